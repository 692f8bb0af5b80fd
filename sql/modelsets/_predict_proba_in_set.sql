-- As _predict_in_set: PARALLEL UNSAFE (the version's models are read by a statement on first
-- use in a backend, and the active version checked once per statement).
CREATE FUNCTION @extschema@._predict_proba_in_set(model_set text, features float8[], group_key bytea, on_missing text)
RETURNS float8 LANGUAGE plpython3u STABLE PARALLEL UNSAFE
AS $python$
from groupml.udf.modelsets import predict_proba_in_set; return predict_proba_in_set(model_set, features, group_key, on_missing)
$python$;
COMMENT ON FUNCTION @extschema@._predict_proba_in_set(text, float8[], bytea, text) IS
  'Internal (predict_proba with a model set): the probability of class 1 of one row with the model of its group, the group given as record_send of its key values.';
