CREATE TABLE @extschema@.jobs (
    job_id              bigserial PRIMARY KEY,
    tenant_id           bigint NOT NULL REFERENCES @extschema@.tenants (tenant_id) ON DELETE CASCADE,
    owner_role          regrole NOT NULL,       -- the tenant's role (row-level security)
    source              regclass NOT NULL,      -- the relation the job trains on
    features            text[] NOT NULL,
    label               text NOT NULL,
    task                text NOT NULL CHECK (task IN ('classification', 'regression')),
    metric              text NOT NULL,          -- validation metric = quality (higher is better)
    n_rows              bigint NOT NULL,        -- rows of the source at submission (cost estimates)
    best_observation_id bigint,                 -- the observation whose model infer uses
    best_quality        float8,
    submitted_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    submitted_by        name NOT NULL DEFAULT current_user,
    -- the inserting transaction: only it may add the job's candidates (_tenancy_add_candidates)
    submitted_xact      xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id()
);
COMMENT ON TABLE @extschema@.jobs IS
  'Multi-tenant model selection: one row per submitted job (source relation, feature and label columns, task, best model so far). Row-level security by owner_role; groupml_admin sees all. Create with groupml.submit_job.';
ALTER TABLE @extschema@.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY jobs_own ON @extschema@.jobs
    USING (pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
    WITH CHECK ((pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
                AND EXISTS (SELECT 1 FROM @extschema@.tenants t
                            WHERE t.tenant_id = jobs.tenant_id AND t.role = jobs.owner_role));
COMMENT ON POLICY jobs_own ON @extschema@.jobs IS
  'Row-level security: members of the row''s role see it, insert it (through submit_job) and delete it; groupml_admin members see and change all rows. A written row must belong to its tenant''s role. Tenants have no UPDATE: a job''s source and features fix its candidates'' estimated costs.';
GRANT SELECT, INSERT, DELETE ON @extschema@.jobs TO PUBLIC;
GRANT USAGE ON SEQUENCE @extschema@.jobs_job_id_seq TO PUBLIC;
GRANT ALL ON @extschema@.jobs TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.jobs_job_id_seq', '');
