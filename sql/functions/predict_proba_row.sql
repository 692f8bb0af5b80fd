CREATE FUNCTION @extschema@.predict_proba_row(fit @extschema@.fit, columns jsonb)
RETURNS float8 LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict_proba_row; return predict_proba_row(fit, columns)
$python$;
COMMENT ON FUNCTION @extschema@.predict_proba_row(@extschema@.fit, jsonb) IS
  'Probability of class 1 for one row of raw columns with a fit whose model stores a transform (train_groups on raw feature columns), for classifiers. columns: a JSON object keyed by the training columns (extra keys ignored), e.g. to_jsonb(c). The transform imputes NULLs and sends unseen categories to the other column. See groupml.help(''transforms'').';
