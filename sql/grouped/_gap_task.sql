CREATE FUNCTION @extschema@._gap_task(request jsonb, blob bytea) RETURNS bytea
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import gap_task; from groupml.udf import take_args; return gap_task(*take_args(globals(), "request", "blob"))
$python$;
COMMENT ON FUNCTION @extschema@._gap_task(jsonb, bytea) IS
  'Internal (worker side of train_groups): one task of the sequential (MLP shard statistics, one hop of a model over a shard) or sampling pattern (one rank of distributed LightGBM), or the whole search of an unsplit group, on a shard of a snapshot.';
