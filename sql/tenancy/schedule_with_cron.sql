CREATE FUNCTION @extschema@.schedule_with_cron(schedule text, max_seconds float8 DEFAULT 50,
                                               policy text DEFAULT 'hybrid', cost_aware boolean DEFAULT true,
                                               database text DEFAULT current_database(),
                                               job_name text DEFAULT 'groupml_scheduler')
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.tenancy import schedule_with_cron; return schedule_with_cron(schedule, max_seconds, policy, cost_aware, database, job_name)
$python$;
COMMENT ON FUNCTION @extschema@.schedule_with_cron(text, float8, text, boolean, text, text) IS
  'Let pg_cron CALL groupml.run_scheduler(max_seconds => ...) on a cron schedule (creates or updates the cron job job_name, returns its jobid). Needs pg_cron in this database. See groupml.help(''schedule_with_cron'').';
