CREATE FUNCTION @extschema@.predict(fit @extschema@.fit, features float8[])
RETURNS float8 LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict; return predict(fit, features)
$python$;
COMMENT ON FUNCTION @extschema@.predict(@extschema@.fit, float8[]) IS
  'Predict one row with a fit: the class (0/1) for logistic and svm, the value for linear.';
