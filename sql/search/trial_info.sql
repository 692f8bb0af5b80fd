CREATE FUNCTION @extschema@.trial_info(fit @extschema@.fit)
RETURNS TABLE (trial_id integer, params jsonb, score float8, epochs integer, iterations integer, status text,
               stop_reason text, epoch_losses float8[], passes bigint, seconds float8, is_best boolean)
LANGUAGE plpython3u IMMUTABLE PARALLEL SAFE
AS $python$
from groupml.udf.search import trial_info; return trial_info(fit)
$python$;
COMMENT ON FUNCTION @extschema@.trial_info(@extschema@.fit) IS
  'One row per configuration tried for a fit (like BigQuery ML.TRIAL_INFO): params, validation score, epochs, iterations, status, stop reason, per-epoch validation losses, data passes, seconds, and whether it was selected. See groupml.help(''trial_info'').';
