CREATE FUNCTION @extschema@.drop_model_set(model_set text)
RETURNS boolean LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import drop_model_set; return drop_model_set(model_set)
$python$;
COMMENT ON FUNCTION @extschema@.drop_model_set(text) IS
  'Delete a model set with all its versions and models (the runs they came from stay). True if it existed.';
