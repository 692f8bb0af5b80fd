CREATE FUNCTION @extschema@.revoke_model_set(model_set text, role name)
RETURNS boolean LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import revoke_model_set; return revoke_model_set(model_set, role)
$python$;
COMMENT ON FUNCTION @extschema@.revoke_model_set(text, name) IS
  'Take back what grant_model_set gave a role. True if the role was a reader.';
