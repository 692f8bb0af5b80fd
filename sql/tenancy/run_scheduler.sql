CREATE PROCEDURE @extschema@.run_scheduler(max_steps integer DEFAULT NULL, max_seconds float8 DEFAULT NULL,
                                           policy text DEFAULT 'hybrid', cost_aware boolean DEFAULT true)
LANGUAGE plpython3u
AS $python$
from groupml.udf.tenancy import run_scheduler; return run_scheduler(max_steps, max_seconds, policy, cost_aware)
$python$;
COMMENT ON PROCEDURE @extschema@.run_scheduler(integer, float8, text, boolean) IS
  'Coordinator: step by step pick (tenant job, candidate) with the multi-tenant scheduler, train it, record quality and measured cost, update the job''s best model, COMMIT. Stops at max_steps, max_seconds or when every candidate is done; resumes where an interrupted run stopped. groupml_admin only. See groupml.help(''run_scheduler'').';
