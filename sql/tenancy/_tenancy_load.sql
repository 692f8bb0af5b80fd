-- The coordinator trains every tenant's job, so it must read every tenant's source. This
-- SECURITY DEFINER loader does that for groupml_admin members only (EXECUTE is revoked
-- from PUBLIC) and only when the job's own role can still read the source and columns.
CREATE FUNCTION @extschema@._tenancy_load(job_id bigint, OUT n_rows bigint, OUT block bytea, OUT error text)
LANGUAGE plpython3u VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $python$
from groupml.udf.tenancy import load_job_block; return load_job_block(job_id)
$python$;
REVOKE ALL ON FUNCTION @extschema@._tenancy_load(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION @extschema@._tenancy_load(bigint) TO groupml_admin;
COMMENT ON FUNCTION @extschema@._tenancy_load(bigint) IS
  'Internal (run_scheduler): a job''s rows as packed big-endian doubles (features then label), read with the extension owner''s rights after checking the job''s role may read them; error is set instead of raising.';
