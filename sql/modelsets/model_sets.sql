CREATE TABLE @extschema@.model_sets (
    name            text PRIMARY KEY CHECK (name OPERATOR(pg_catalog.<>) ''),
    owner           name NOT NULL DEFAULT current_user,
    readers         name[] NOT NULL DEFAULT '{}',   -- roles granted scoring (groupml.grant_model_set)
    active_version  integer,                        -- the version predict uses; NULL until one is ready
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE @extschema@.model_sets IS
  'Named, versioned sets of per-group models (groupml.publish, train_groups(model_set => ...)); predict(model_set, features, group_key) scores with the active version.';
ALTER TABLE @extschema@.model_sets ENABLE ROW LEVEL SECURITY;
CREATE POLICY model_sets_by_owner ON @extschema@.model_sets
    USING (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(owner)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY model_sets_by_owner ON @extschema@.model_sets IS
  'Row-level security: members of the role that owns a model set see and change it; groupml_admin members see and change all sets. A role dropped or renamed since leaves its sets to groupml_admin.';
CREATE POLICY model_sets_for_readers ON @extschema@.model_sets FOR SELECT
    USING (EXISTS (SELECT 1 FROM pg_catalog.unnest(readers) AS r(role)
                   WHERE pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(r.role)), 'MEMBER')));
COMMENT ON POLICY model_sets_for_readers ON @extschema@.model_sets IS
  'Row-level security: members of a role the owner granted the set to (groupml.grant_model_set) see it, to score with it; they cannot change it.';
GRANT SELECT ON @extschema@.model_sets TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.model_sets', '');
