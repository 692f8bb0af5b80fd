CREATE TABLE @extschema@.run_checkpoints (
    run_id       bigint NOT NULL REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key    jsonb NOT NULL,
    block        integer NOT NULL,              -- the group's last committed epoch block (1-based)
    passes       bigint NOT NULL,               -- trainer passes of the group's search up to that block
    fingerprint  text NOT NULL,                 -- model, search, options (and shard layout for MLP/LightGBM) it is valid for
    state        bytea NOT NULL,                -- JSON header + numpy npz body (groupml.executor.checkpoint); never pickle
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, group_key)
);
ALTER TABLE @extschema@.run_checkpoints ALTER COLUMN state SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.run_checkpoints IS
  'Epoch-level resume points of planner-driven train_groups runs: per group in flight, the search procedure, trials and trainer state (GLM solver states, MLP training states, LightGBM model texts) after its last epoch block, committed with that block''s run_epochs rows. A run called again with its run_id continues each group from here; the row is deleted when the group''s model is committed.';
ALTER TABLE @extschema@.run_checkpoints ENABLE ROW LEVEL SECURITY;
CREATE POLICY run_checkpoints_of_visible_runs ON @extschema@.run_checkpoints
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) run_checkpoints.run_id));
COMMENT ON POLICY run_checkpoints_of_visible_runs ON @extschema@.run_checkpoints IS
  'Row-level security: checkpoints follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.run_checkpoints TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_checkpoints', '');
