CREATE FUNCTION @extschema@.rollback_model_set(model_set text)
RETURNS integer LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import rollback_model_set; return rollback_model_set(model_set)
$python$;
COMMENT ON FUNCTION @extschema@.rollback_model_set(text) IS
  'Activate the newest ready version of a model set older than its active one; returns the version now active.';
