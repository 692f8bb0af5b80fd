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
SELECT pg_catalog.pg_extension_config_dump('@extschema@.grouped_runs', '');
