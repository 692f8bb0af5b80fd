CREATE FUNCTION @extschema@.grant_model_set(model_set text, role name)
RETURNS boolean LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import grant_model_set; return grant_model_set(model_set, role)
$python$;
COMMENT ON FUNCTION @extschema@.grant_model_set(text, name) IS
  'Let the members of a role see a model set and score with it (predict, predict_table); only its owner''s members and groupml_admin may. True if the role was not a reader yet.';
