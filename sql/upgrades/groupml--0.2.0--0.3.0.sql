-- groupml 0.2.0 -> 0.3.0 (ALTER EXTENSION groupml UPDATE). What changed in the catalog:
\echo Use "ALTER EXTENSION groupml UPDATE TO '0.3.0'" to load this file. \quit

-- Model hopper parallelism: train_groups(..., strategy => 'mop'); replay a configuration
-- from the run's visit log
COMMENT ON PROCEDURE @extschema@.train_groups(regclass, text[], text[], text, text, jsonb, jsonb, bigint, integer, text) IS
  'Train and select one model per group of a table and store them in groupml.models (committed group by group). workers => p > 1 (or an explicit strategy) runs the planner-driven executor over p worker backends: auto | grouped | gtp | mtp | dp | mop (model hopper parallelism: MLP configurations hop over p partitions of each group). Pass an existing run_id to resume an interrupted run. See groupml.help(''train_groups''), groupml.help(''grouped'') and groupml.help(''mop'').';
CREATE FUNCTION @extschema@.replay(run_id bigint, trial_id integer, group_key jsonb DEFAULT NULL) RETURNS bytea
LANGUAGE plpython3u
AS $python$
from groupml.udf.mop import replay; return replay(run_id, trial_id, group_key)
$python$;
COMMENT ON FUNCTION @extschema@.replay(bigint, integer, jsonb) IS
  'Retrain one configuration (trial) of a train_groups run whose MLP groups were split into partitions (strategy => ''mop'') sequentially in this backend, from the run''s visit log in groupml.run_schedule, and return its model bytes: the same bytes as the run''s model of that trial on the same host. Needs the run''s snapshot (options.keep_snapshot). group_key may be NULL when the trial is in one group.';
