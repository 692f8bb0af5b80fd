CREATE TABLE @extschema@.models (
    model_id      bigserial PRIMARY KEY,
    run_id        bigint REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key     jsonb NOT NULL DEFAULT '{}',  -- {"country": "FR"}; {} for an ungrouped run
    fit           @extschema@.fit NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (run_id, group_key)
);
COMMENT ON TABLE @extschema@.models IS
  'The model catalog: one selected model per (run, group). Every trainer in groupml writes here.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.models', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.models_model_id_seq', '');
