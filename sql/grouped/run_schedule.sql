CREATE TABLE @extschema@.run_schedule (
    run_id     bigint NOT NULL REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key  jsonb NOT NULL,
    pass       integer NOT NULL,                -- the group's data pass (0-based)
    worker     integer NOT NULL,
    shard      integer NOT NULL,
    row_start  bigint NOT NULL,                 -- training rows [row_start, row_start + n_rows) of the group
    n_rows     bigint NOT NULL,
    trials     integer[] NOT NULL,              -- configurations evaluated in this task
    started    float8 NOT NULL,                 -- seconds since the run started (groupml.runs.started_at; one clock over resumed attempts)
    finished   float8 NOT NULL,
    worker_pid integer,
    kind       text NOT NULL DEFAULT 'pass'     -- pass (GLM data pass) | stats | visit (MLP hop; pass = epoch) | rank (distributed LightGBM; pass = job) | fit (whole group on one worker) | eval (MLP state scored / serialised) | fork (MLP state copied, population based training)
);
CREATE INDEX ON @extschema@.run_schedule (run_id, group_key);
COMMENT ON TABLE @extschema@.run_schedule IS
  'What ran where: every task a worker executed for a planner-driven train_groups run (written with the group''s model). For MLP groups split over workers the kind = ''visit'' rows ordered by started are the visit log that groupml.learners.replay reproduces. groupml checks data sharding, worker exclusivity and config isolation on it.';
ALTER TABLE @extschema@.run_schedule ENABLE ROW LEVEL SECURITY;
CREATE POLICY run_schedule_of_visible_runs ON @extschema@.run_schedule
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) run_schedule.run_id));
COMMENT ON POLICY run_schedule_of_visible_runs ON @extschema@.run_schedule IS
  'Row-level security: schedule rows follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.run_schedule TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_schedule', '');
