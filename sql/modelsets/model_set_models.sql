CREATE TABLE @extschema@.model_set_models (
    version_id    bigint NOT NULL REFERENCES @extschema@.model_set_versions (version_id) ON DELETE CASCADE,
    group_key     jsonb NOT NULL,                    -- as in groupml.models
    key_value     bytea NOT NULL,                    -- the typed key: record_send of the group columns' values
    fit           @extschema@.fit NOT NULL,
    PRIMARY KEY (version_id, group_key)
);
ALTER TABLE @extschema@.model_set_models ALTER COLUMN fit SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.model_set_models IS
  'The per-group models of each model set version, copied from the run when the version became ready (a version outlives its run), with each group''s key in its training types.';
ALTER TABLE @extschema@.model_set_models ENABLE ROW LEVEL SECURITY;
CREATE POLICY model_set_models_by_owner ON @extschema@.model_set_models
    USING (EXISTS (SELECT 1 FROM @extschema@.model_set_versions v JOIN @extschema@.model_sets s ON s.name OPERATOR(pg_catalog.=) v.set_name
                   WHERE v.version_id OPERATOR(pg_catalog.=) model_set_models.version_id
                   AND (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(s.owner)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))));
COMMENT ON POLICY model_set_models_by_owner ON @extschema@.model_set_models IS
  'Row-level security: models follow their set: its owner''s members and groupml_admin see and change them.';
CREATE POLICY model_set_models_for_readers ON @extschema@.model_set_models FOR SELECT
    USING (EXISTS (SELECT 1 FROM @extschema@.model_set_versions v WHERE v.version_id OPERATOR(pg_catalog.=) model_set_models.version_id));
COMMENT ON POLICY model_set_models_for_readers ON @extschema@.model_set_models IS
  'Row-level security: a role that sees a model set''s version (its owner, a reader it was granted to, groupml_admin) sees its models, to score with them.';
GRANT SELECT ON @extschema@.model_set_models TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.model_set_models', '');
