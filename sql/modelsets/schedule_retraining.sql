CREATE FUNCTION @extschema@.schedule_retraining(model_set text, schedule text, margin float8 DEFAULT 0,
                                                database text DEFAULT current_database(), job_name text DEFAULT NULL)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import schedule_retraining; return schedule_retraining(model_set, schedule, margin, database, job_name)
$python$;
COMMENT ON FUNCTION @extschema@.schedule_retraining(text, text, float8, text, text) IS
  'Let pg_cron CALL groupml.retrain_model_set(model_set, margin) on a cron schedule (creates or updates the job job_name, default groupml_retrain_<set>; returns its jobid). Needs pg_cron; only the set''s owner''s members and groupml_admin.';
