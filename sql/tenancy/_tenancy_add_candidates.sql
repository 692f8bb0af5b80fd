-- Tenants cannot INSERT or UPDATE candidates: keys and estimated costs steer the shared
-- scheduler. submit_job (SECURITY INVOKER: it reads the source as the submitting role, and
-- row-level security decides whose tenant and job it is) calls this SECURITY DEFINER
-- function in the transaction that inserted the job. It adds the job's candidates once,
-- for the job's own role, with keys and costs computed here from the rows passed, and
-- stores those rows for the coordinator. It runs no code of the tenant's: it reads only
-- groupml's own tables, never a source.
CREATE FUNCTION @extschema@._tenancy_add_candidates(job_id bigint, candidates jsonb, n_rows bigint, block bytea)
RETURNS integer LANGUAGE plpython3u VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $python$
from groupml.udf.tenancy import add_job_candidates; return add_job_candidates(job_id, candidates, n_rows, block)
$python$;
COMMENT ON FUNCTION @extschema@._tenancy_add_candidates(bigint, jsonb, bigint, bytea) IS
  'Internal (submit_job): adds the candidates of a job inserted by this transaction, once, owned by the job''s role, with keys and estimated costs computed from the job''s rows (packed by submit_job), and stores those rows for the coordinator; tenants have no INSERT or UPDATE on groupml.candidates.';
