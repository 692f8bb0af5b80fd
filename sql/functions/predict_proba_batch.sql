CREATE FUNCTION @extschema@.predict_proba_batch(fit @extschema@.fit, features float8[])
RETURNS float8[] LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict_proba_batch; from groupml.udf import take_args; return predict_proba_batch(*take_args(globals(), "fit", "features"))
$python$;
COMMENT ON FUNCTION @extschema@.predict_proba_batch(@extschema@.fit, float8[]) IS
  'Probability of class 1 for many rows in one call, for classifiers (logistic, mlp, lightgbm); features is a two-dimensional array.';
