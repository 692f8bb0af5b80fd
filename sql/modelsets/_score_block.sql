-- Called by predict_table's query once per group, with the models predict_table loaded into
-- this backend's cache: PARALLEL RESTRICTED (the leader has that cache; a worker would not).
-- Returns the predictions as a float8[] literal, which the query casts: PL/Python would turn a
-- returned list into float8[] through each value's text, one value at a time.
CREATE FUNCTION @extschema@._score_block(version_id bigint, group_key bytea, on_missing text, proba boolean, rows bytea)
RETURNS text LANGUAGE plpython3u STABLE PARALLEL RESTRICTED
AS $python$
from groupml.udf.modelsets import score_block; return score_block(version_id, group_key, on_missing, proba, rows)
$python$;
COMMENT ON FUNCTION @extschema@._score_block(bigint, bytea, text, boolean, bytea) IS
  'Internal (predict_table, predict_proba_table): one group''s rows scored with its model of a model set version (proba: the probability of class 1), the rows given as the bytes of their float8[][] of features (_float8_bytes; a NULL is read as NaN); the predictions as a float8[] literal.';
