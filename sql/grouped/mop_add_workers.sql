CREATE FUNCTION @extschema@.mop_add_workers(run_id bigint, n integer DEFAULT 1) RETURNS bigint
LANGUAGE plpython3u
AS $python$
from groupml.udf.mop import mop_add_workers; return mop_add_workers(run_id, n)
$python$;
COMMENT ON FUNCTION @extschema@.mop_add_workers(bigint, integer) IS
  'Ask a model hopper run (strategy => ''mop'') that is training or resumable to add n worker backends (elasticity): each new worker holds a copy of every partition and the randomized scheduler gives it units from the next sub-epoch on. Returns the request_id of groupml.run_requests. See groupml.help(''mop_add_workers'').';
