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
ALTER TABLE @extschema@.run_epochs ENABLE ROW LEVEL SECURITY;
CREATE POLICY run_epochs_of_visible_runs ON @extschema@.run_epochs
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) run_epochs.run_id));
COMMENT ON POLICY run_epochs_of_visible_runs ON @extschema@.run_epochs IS
  'Row-level security: epoch rows follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.run_epochs TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_epochs', '');
