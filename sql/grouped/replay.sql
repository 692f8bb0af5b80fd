CREATE FUNCTION @extschema@.replay(run_id bigint, trial_id integer, group_key jsonb DEFAULT NULL) RETURNS bytea
LANGUAGE plpython3u
AS $python$
from groupml.udf.mop import replay; return replay(run_id, trial_id, group_key)
$python$;
COMMENT ON FUNCTION @extschema@.replay(bigint, integer, jsonb) IS
  'Retrain one configuration (trial) of a train_groups run whose MLP groups were split into partitions, or whose MLP or GLM configurations hopped over partitions (strategy => ''mop''), sequentially in this backend, from the run''s visit log in groupml.run_schedule, and return its model bytes: the same bytes as the run''s model of that trial on the same host. Needs the run''s snapshot (options.keep_snapshot). group_key may be NULL when the trial is in one group.';
