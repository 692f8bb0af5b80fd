CREATE TABLE @extschema@.candidates (
    candidate_id    bigserial PRIMARY KEY,
    job_id          bigint NOT NULL REFERENCES @extschema@.jobs (job_id) ON DELETE CASCADE,
    owner_role      regrole NOT NULL,
    key             text NOT NULL,              -- stable key 'family:{params}' shared across jobs
    family          text NOT NULL,
    params          jsonb NOT NULL,
    estimated_cost  float8 NOT NULL CHECK (estimated_cost > 0 AND estimated_cost < 'Infinity'),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ok', 'failed')),
    -- trainings of it started (each committed before it starts): a pending candidate's attempts
    -- all ended without an outcome (cancel, statement_timeout, its backend ended); after a few it
    -- is recorded as failed instead of being retried forever
    attempts        integer NOT NULL DEFAULT 0,
    UNIQUE (job_id, key)
);
COMMENT ON TABLE @extschema@.candidates IS
  'Multi-tenant model selection: the candidate models of each job (family, fixed hyperparameters, estimated cost, status pending|ok|failed). Row-level security by owner_role.';
ALTER TABLE @extschema@.candidates ENABLE ROW LEVEL SECURITY;
CREATE POLICY candidates_own ON @extschema@.candidates
    USING (pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
    WITH CHECK ((pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
                AND EXISTS (SELECT 1 FROM @extschema@.jobs j
                            WHERE j.job_id = candidates.job_id AND j.owner_role = candidates.owner_role));
COMMENT ON POLICY candidates_own ON @extschema@.candidates IS
  'Row-level security: members of the row''s role see it and may delete it; groupml_admin members see and change all rows. A written row must belong to its job''s role. Tenants have no INSERT or UPDATE: submit_job adds candidates through groupml._tenancy_add_candidates.';
GRANT SELECT, DELETE ON @extschema@.candidates TO PUBLIC;
GRANT ALL ON @extschema@.candidates TO groupml_admin;
GRANT USAGE ON SEQUENCE @extschema@.candidates_candidate_id_seq TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.candidates', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.candidates_candidate_id_seq', '');
