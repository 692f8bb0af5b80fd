CREATE FUNCTION @extschema@.drop_model_set_version(model_set text, version integer)
RETURNS boolean LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import drop_model_set_version; return drop_model_set_version(model_set, version)
$python$;
COMMENT ON FUNCTION @extschema@.drop_model_set_version(text, integer) IS
  'Delete a version of a model set and its models; refused (55006) for the active version. True if it existed.';
