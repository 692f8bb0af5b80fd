CREATE TABLE @extschema@.job_data (
    job_id      bigint PRIMARY KEY REFERENCES @extschema@.jobs (job_id) ON DELETE CASCADE,
    owner_role  regrole NOT NULL,
    n_rows      bigint NOT NULL CHECK (n_rows >= 0),    -- rows of the source, NULL rows included
    block       bytea NOT NULL                          -- the rows without NULLs: big-endian float8, features then label
);
-- Out of line, not compressed: the coordinator reads a job's block whole, and doubles barely compress
ALTER TABLE @extschema@.job_data ALTER COLUMN block SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.job_data IS
  'Multi-tenant model selection: the rows of each job, read by submit_job as the submitting role and packed as big-endian doubles (features then label); the coordinator trains on them and never reads a tenant''s source itself. Written once per job by submit_job; no grants to tenants.';
ALTER TABLE @extschema@.job_data ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_data_own ON @extschema@.job_data
    USING (pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY job_data_own ON @extschema@.job_data IS
  'Row-level security: only groupml_admin members (the coordinator) read job rows; tenants have no grants and read their own sources.';
GRANT SELECT, DELETE ON @extschema@.job_data TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.job_data', '');
