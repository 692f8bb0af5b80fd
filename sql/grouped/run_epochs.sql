CREATE TABLE @extschema@.run_epochs (
    run_id     bigint NOT NULL REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key  jsonb NOT NULL,
    block      integer NOT NULL,                -- epoch block of the group's search (1-based)
    trial_id   integer NOT NULL,
    epoch      integer NOT NULL,
    score      float8,
    decision   text NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, group_key, block, trial_id)
);
COMMENT ON TABLE @extschema@.run_epochs IS
  'Per-epoch validation losses of planner-driven train_groups runs, committed as epochs finish (readable from other sessions while the run is going).';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_epochs', '');
