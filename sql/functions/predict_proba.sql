CREATE FUNCTION @extschema@.predict_proba(fit @extschema@.fit, features float8[])
RETURNS float8 LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict_proba; return predict_proba(fit, features)
$python$;
COMMENT ON FUNCTION @extschema@.predict_proba(@extschema@.fit, float8[]) IS
  'Probability of class 1 for one row, for classifiers (logistic, mlp, lightgbm).';
