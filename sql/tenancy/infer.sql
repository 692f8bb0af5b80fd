CREATE FUNCTION @extschema@.infer(job_id bigint, features float8[])
RETURNS float8 LANGUAGE plpython3u STABLE
AS $python$
from groupml.udf.tenancy import infer; return infer(job_id, features)
$python$;
COMMENT ON FUNCTION @extschema@.infer(bigint, float8[]) IS
  'Predict one row with the best model trained so far for a job (class 0/1 for classification, value for regression). Row-level security applies: a tenant infers with its own jobs only.';
