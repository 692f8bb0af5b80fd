CREATE TABLE @extschema@.grouped_runs (
    run_id       bigint PRIMARY KEY REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    strategy     text NOT NULL,
    workers      integer NOT NULL,
    snapshot_id  bigint,
    plan         jsonb NOT NULL DEFAULT '{}',
    epochs_done  bigint NOT NULL DEFAULT 0,
    passes_done  bigint NOT NULL DEFAULT 0,
    last_event   text,
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE @extschema@.grouped_runs IS
  'Planner-driven train_groups runs (workers > 1 or an explicit strategy): strategy, workers, snapshot, plan and live counters.';
ALTER TABLE @extschema@.grouped_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY grouped_runs_of_visible_runs ON @extschema@.grouped_runs
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) grouped_runs.run_id));
COMMENT ON POLICY grouped_runs_of_visible_runs ON @extschema@.grouped_runs IS
  'Row-level security: executor records follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.grouped_runs TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.grouped_runs', '');
