-- Tenants cannot INSERT or UPDATE candidates: keys and estimated costs steer the shared
-- scheduler. submit_job (SECURITY INVOKER: row-level security decides whose tenant and job
-- it is) calls this SECURITY DEFINER function, which adds a job's candidates once, for the
-- job's own role, with keys and costs computed from the job's source.
CREATE FUNCTION @extschema@._tenancy_add_candidates(job_id bigint, candidates jsonb)
RETURNS integer LANGUAGE plpython3u VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $python$
from groupml.udf.tenancy import add_job_candidates; return add_job_candidates(job_id, candidates)
$python$;
COMMENT ON FUNCTION @extschema@._tenancy_add_candidates(bigint, jsonb) IS
  'Internal (submit_job): adds a job''s candidates once, owned by the job''s role, with keys and estimated costs computed from the job''s source; tenants have no INSERT or UPDATE on groupml.candidates.';
