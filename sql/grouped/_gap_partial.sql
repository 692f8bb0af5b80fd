CREATE FUNCTION @extschema@._gap_partial(request jsonb, theta bytea) RETURNS bytea
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import gap_partial; return gap_partial(request, theta)
$python$;
COMMENT ON FUNCTION @extschema@._gap_partial(jsonb, bytea) IS
  'Internal (worker side of train_groups): partial loss and gradient sums of one shard of a snapshot for many GLM configurations at once.';
