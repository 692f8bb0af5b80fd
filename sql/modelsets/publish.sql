CREATE FUNCTION @extschema@.publish(run_id bigint, model_set text)
RETURNS integer LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import publish; return publish(run_id, model_set)
$python$;
COMMENT ON FUNCTION @extschema@.publish(bigint, text) IS
  'Make a train_groups run a new version of a named model set (created on first use, owned by the caller); returns the version number. A finished run''s version is ready and active at once; an unfinished run''s becomes ready and active in the transaction that marks the run done.';
