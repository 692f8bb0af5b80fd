CREATE FUNCTION @extschema@._predict_table_sql(model_set text, source regclass, key_column text, features text[], group_by text[], on_missing text, proba boolean)
RETURNS text LANGUAGE plpython3u STABLE PARALLEL UNSAFE
AS $python$
from groupml.udf.modelsets import predict_table_sql; return predict_table_sql(model_set, source, key_column, features, group_by, on_missing, proba)
$python$;
COMMENT ON FUNCTION @extschema@._predict_table_sql(text, regclass, text, text[], text[], text, boolean) IS
  'Internal (predict_table, predict_proba_table): checks the request, loads the active version''s models into this backend and returns the query that scores the source group by group (proba: probabilities of class 1).';
