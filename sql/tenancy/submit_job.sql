CREATE FUNCTION @extschema@.submit_job(tenant text, source regclass, features text[], label text,
                                       candidates jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.tenancy import submit_job; return submit_job(tenant, source, features, label, candidates)
$python$;
COMMENT ON FUNCTION @extschema@.submit_job(text, regclass, text[], text, jsonb) IS
  'Submit a model-selection job for a tenant: the source relation, feature and label columns, and candidate models (families with explicit params or a grid/random search space, expanded into one candidate per configuration). Returns the job_id. See groupml.help(''submit_job'').';
