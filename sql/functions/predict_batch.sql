CREATE FUNCTION @extschema@.predict_batch(fit @extschema@.fit, features float8[])
RETURNS float8[] LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict_batch; from groupml.udf import take_args; return predict_batch(*take_args(globals(), "fit", "features"))
$python$;
COMMENT ON FUNCTION @extschema@.predict_batch(@extschema@.fit, float8[]) IS
  'Predict many rows in one call: features is a two-dimensional array (one row per sub-array); returns one prediction per row.';
