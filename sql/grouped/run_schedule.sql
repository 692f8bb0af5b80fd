CREATE TABLE @extschema@.run_schedule (
    run_id     bigint NOT NULL REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key  jsonb NOT NULL,
    pass       integer NOT NULL,                -- the group's data pass (0-based)
    worker     integer NOT NULL,
    shard      integer NOT NULL,
    row_start  bigint NOT NULL,                 -- training rows [row_start, row_start + n_rows) of the group
    n_rows     bigint NOT NULL,
    trials     integer[] NOT NULL,              -- configurations evaluated in this task
    started    float8 NOT NULL,                 -- seconds since the run attempt started
    finished   float8 NOT NULL,
    worker_pid integer
);
CREATE INDEX ON @extschema@.run_schedule (run_id, group_key);
COMMENT ON TABLE @extschema@.run_schedule IS
  'What ran where: every task a worker executed for a planner-driven train_groups run (written with the group''s model). groupml checks data sharding, worker exclusivity and config isolation on it.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_schedule', '');
