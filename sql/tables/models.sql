CREATE TABLE @extschema@.models (
    model_id      bigserial PRIMARY KEY,
    run_id        bigint REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key     jsonb NOT NULL DEFAULT '{}',  -- {"country": "FR"}; {} for an ungrouped run
    fit           @extschema@.fit NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (run_id, group_key)
);
-- Out of line but not compressed: predict called once per row detoasts the fit on every call,
-- and decompressing a LightGBM model of ~90 KB (pglz) cost ~80 us of a ~150 us call.
ALTER TABLE @extschema@.models ALTER COLUMN fit SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.models IS
  'The model catalog: one selected model per (run, group). Every trainer in groupml writes here.';
ALTER TABLE @extschema@.models ENABLE ROW LEVEL SECURITY;
CREATE POLICY models_of_visible_runs ON @extschema@.models
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) models.run_id));
COMMENT ON POLICY models_of_visible_runs ON @extschema@.models IS
  'Row-level security: models follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.models TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.models', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.models_model_id_seq', '');
