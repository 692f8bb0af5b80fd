CREATE TABLE @extschema@.model_set_versions (
    version_id    bigserial PRIMARY KEY,             -- never reused: keys the scorers' caches
    set_name      text NOT NULL REFERENCES @extschema@.model_sets (name) ON DELETE CASCADE ON UPDATE CASCADE,
    version       integer NOT NULL,
    run_id        bigint REFERENCES @extschema@.runs (run_id) ON DELETE SET NULL,
    status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ready')),
    group_by      text[] NOT NULL,                   -- the group columns, in key order
    group_types   text[] NOT NULL,                   -- their types at training (format_type)
    features      text[] NOT NULL,
    n_features    integer NOT NULL,
    family        text NOT NULL,
    summary       jsonb,                             -- groups, groups with a model, metric, score quantiles
    margin        float8,                            -- NULL: active when ready; else only if no worse by this
    decision      text,                              -- whether it was activated when ready, and why
    created_by    name NOT NULL DEFAULT current_user,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    ready_at      timestamptz,
    UNIQUE (set_name, version)
);
COMMENT ON TABLE @extschema@.model_set_versions IS
  'One row per version of a model set: the run it was published from, its group columns and their types, features, family and validation summary; pending until its run is done, then ready and activated (a retrained version only if its validation score is no worse than the active one''s by margin; decision says why).';
ALTER TABLE @extschema@.model_set_versions ENABLE ROW LEVEL SECURITY;
CREATE POLICY model_set_versions_by_owner ON @extschema@.model_set_versions
    USING (EXISTS (SELECT 1 FROM @extschema@.model_sets s WHERE s.name OPERATOR(pg_catalog.=) model_set_versions.set_name
                   AND (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(s.owner)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))));
COMMENT ON POLICY model_set_versions_by_owner ON @extschema@.model_set_versions IS
  'Row-level security: versions follow their set: its owner''s members and groupml_admin see and change them.';
CREATE POLICY model_set_versions_for_readers ON @extschema@.model_set_versions FOR SELECT
    USING (EXISTS (SELECT 1 FROM @extschema@.model_sets s WHERE s.name OPERATOR(pg_catalog.=) model_set_versions.set_name));
COMMENT ON POLICY model_set_versions_for_readers ON @extschema@.model_set_versions IS
  'Row-level security: a role that sees a model set (its owner, a reader it was granted to, groupml_admin) sees its versions.';
GRANT SELECT ON @extschema@.model_set_versions TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.model_set_versions', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.model_set_versions_version_id_seq', '');
