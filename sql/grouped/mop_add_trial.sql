CREATE FUNCTION @extschema@.mop_add_trial(run_id bigint, params jsonb) RETURNS integer
LANGUAGE plpython3u
AS $python$
from groupml.udf.mop import mop_add_trial; return mop_add_trial(run_id, params)
$python$;
COMMENT ON FUNCTION @extschema@.mop_add_trial(bigint, jsonb) IS
  'Ask a model hopper run (strategy => ''mop'') that is training or resumable to add one MLP configuration (params: the learner''s hyperparameters, validated now): it starts at the run''s next epoch boundary in every group still training and visits every partition once per epoch. Returns the new trial''s id (numbered from 1000000). The request is recorded in groupml.run_requests. See groupml.help(''mop_add_trial'').';
