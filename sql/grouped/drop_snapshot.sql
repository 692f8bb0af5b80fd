CREATE FUNCTION @extschema@.drop_snapshot(snapshot_id bigint) RETURNS boolean
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import drop_snapshot; return drop_snapshot(snapshot_id)
$python$;
COMMENT ON FUNCTION @extschema@.drop_snapshot(bigint) IS
  'Delete a training snapshot (kept with options.keep_snapshot) and its blocks; true if it existed. Refused (55006) while another session trains a run that uses it.';
