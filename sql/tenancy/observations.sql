CREATE TABLE @extschema@.observations (
    observation_id  bigserial PRIMARY KEY,
    job_id          bigint NOT NULL REFERENCES @extschema@.jobs (job_id) ON DELETE CASCADE,
    candidate_id    bigint NOT NULL UNIQUE REFERENCES @extschema@.candidates (candidate_id) ON DELETE CASCADE,
    owner_role      regrole NOT NULL,
    step            bigint NOT NULL,            -- the scheduler step that trained it
    policy          text NOT NULL,
    status          text NOT NULL CHECK (status IN ('ok', 'failed')),
    quality         float8,                     -- validation metric of the job (higher is better)
    cost_seconds    float8 NOT NULL,            -- measured training time
    error           text,                       -- why it failed
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz NOT NULL,
    model           bytea,                      -- the trained model, groupml's safe format
    CHECK ((status = 'ok') = (quality IS NOT NULL))
);
-- Out of line, not compressed: groupml.infer reads the model on every call (see models.sql)
ALTER TABLE @extschema@.observations ALTER COLUMN model SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.observations IS
  'Multi-tenant model selection: one row per trained candidate (at most one per candidate): quality, measured cost, status ok|failed with the error, timestamps and the model. Written by groupml.run_scheduler; row-level security by owner_role.';
ALTER TABLE @extschema@.observations ENABLE ROW LEVEL SECURITY;
CREATE POLICY observations_own ON @extschema@.observations
    USING (pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY observations_own ON @extschema@.observations IS
  'Row-level security: members of the row''s role see and change it; groupml_admin members see and change all rows.';
GRANT SELECT, DELETE ON @extschema@.observations TO PUBLIC;
GRANT ALL ON @extschema@.observations TO groupml_admin;
GRANT USAGE ON SEQUENCE @extschema@.observations_observation_id_seq TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.observations', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.observations_observation_id_seq', '');
