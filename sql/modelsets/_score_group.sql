-- Called by predict_table's query once per group, with the models predict_table loaded into
-- this backend's cache: PARALLEL RESTRICTED (the leader has that cache; a worker would not).
CREATE FUNCTION @extschema@._score_group(version_id bigint, group_key bytea, on_missing text, VARIADIC columns bytea[])
RETURNS float8[] LANGUAGE plpython3u STABLE PARALLEL RESTRICTED
AS $python$
from groupml.udf.modelsets import score_group; from groupml.udf import take_args; return score_group(*take_args(globals(), "version_id", "group_key", "on_missing", "columns"))
$python$;
COMMENT ON FUNCTION @extschema@._score_group(bigint, bytea, text, bytea[]) IS
  'Internal (predict_table): one group''s rows scored with its model of a model set version: each feature column given as array_send of its float8 values.';
