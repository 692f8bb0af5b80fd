CREATE FUNCTION @extschema@.drop_snapshot(snapshot_id bigint) RETURNS boolean
LANGUAGE sql
AS $$ WITH d AS (DELETE FROM @extschema@.snapshots s WHERE s.snapshot_id = drop_snapshot.snapshot_id RETURNING 1)
      SELECT count(*) > 0 FROM d $$;
COMMENT ON FUNCTION @extschema@.drop_snapshot(bigint) IS
  'Delete a training snapshot (kept with options.keep_snapshot) and its blocks; true if it existed.';
