CREATE FUNCTION @extschema@.mop_stop_trial(run_id bigint, trial_id integer) RETURNS bigint
LANGUAGE plpython3u
AS $python$
from groupml.udf.mop import mop_stop_trial; return mop_stop_trial(run_id, trial_id)
$python$;
COMMENT ON FUNCTION @extschema@.mop_stop_trial(bigint, integer) IS
  'Ask a model hopper run (strategy => ''mop'') that is training or resumable to stop one trial: it finishes its current epoch block and is stored with status ''stopped''. Returns the request_id of groupml.run_requests. See groupml.help(''mop_stop_trial'').';
