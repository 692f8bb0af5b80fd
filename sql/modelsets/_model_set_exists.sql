-- Whether a model set of this name exists, whoever owns it: predict tells a set the caller may
-- not read (42501) from one that does not exist (42704). It reads only groupml.model_sets.
CREATE FUNCTION @extschema@._model_set_exists(model_set text)
RETURNS boolean LANGUAGE plpython3u STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $python$
from groupml.udf.modelsets import model_set_exists; return model_set_exists(model_set)
$python$;
COMMENT ON FUNCTION @extschema@._model_set_exists(text) IS
  'Internal (predict, publish): whether a model set of this name exists, also one the caller may not see, so a refusal can say 42501 rather than 42704.';
