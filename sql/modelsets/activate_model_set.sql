CREATE FUNCTION @extschema@.activate_model_set(model_set text, version integer)
RETURNS integer LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import activate_model_set; return activate_model_set(model_set, version)
$python$;
COMMENT ON FUNCTION @extschema@.activate_model_set(text, integer) IS
  'Make a ready version of a model set the one predict uses; returns the version that was active before.';
