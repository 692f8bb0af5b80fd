CREATE UNLOGGED TABLE @extschema@.snapshot_blocks (
    snapshot_id  bigint NOT NULL,
    group_no     integer NOT NULL,
    block_no     integer NOT NULL,
    n_rows       integer NOT NULL,
    n_val        integer NOT NULL,              -- the first n_val rows of the block are validation rows
    data         bytea NOT NULL,                -- n_rows x (features + label) big-endian float8, row major
    PRIMARY KEY (snapshot_id, group_no, block_no),
    FOREIGN KEY (snapshot_id, group_no) REFERENCES @extschema@.snapshot_groups (snapshot_id, group_no) ON DELETE CASCADE
);
ALTER TABLE @extschema@.snapshot_blocks ALTER COLUMN data SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.snapshot_blocks IS
  'Packed row blocks of training snapshots (uncompressed TOAST so substring() reads only the bytes a worker needs). Unlogged: a snapshot is a cache of its source, so its blocks skip the WAL; a crash restart empties this table, and a run resumed after one rebuilds its snapshot.';
-- the source's rows: readable only with SELECT on every column of the source the snapshot
-- holds, on top of seeing the snapshot (groupml_admin included); a source dropped since hides them
ALTER TABLE @extschema@.snapshot_blocks ENABLE ROW LEVEL SECURITY;
CREATE POLICY snapshot_blocks_of_readable_sources ON @extschema@.snapshot_blocks
    USING (snapshot_id IN (
        SELECT s.snapshot_id FROM @extschema@.snapshots s
        WHERE NOT EXISTS (
            SELECT 1 FROM pg_catalog.unnest(s.group_by OPERATOR(pg_catalog.||) s.features OPERATOR(pg_catalog.||) s.label) AS c(col)
            WHERE NOT EXISTS (
                SELECT 1 FROM pg_catalog.pg_attribute a
                WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(s.source)
                  AND a.attname OPERATOR(pg_catalog.=) c.col::name AND a.attnum OPERATOR(pg_catalog.>) 0
                  AND NOT a.attisdropped
                  AND pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'SELECT')))))
    WITH CHECK (snapshot_id IN (
        SELECT s.snapshot_id FROM @extschema@.snapshots s
        WHERE NOT EXISTS (
            SELECT 1 FROM pg_catalog.unnest(s.group_by OPERATOR(pg_catalog.||) s.features OPERATOR(pg_catalog.||) s.label) AS c(col)
            WHERE NOT EXISTS (
                SELECT 1 FROM pg_catalog.pg_attribute a
                WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(s.source)
                  AND a.attname OPERATOR(pg_catalog.=) c.col::name AND a.attnum OPERATOR(pg_catalog.>) 0
                  AND NOT a.attisdropped
                  AND pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'SELECT')))));
COMMENT ON POLICY snapshot_blocks_of_readable_sources ON @extschema@.snapshot_blocks IS
  'Row-level security: packed row blocks hold the source''s data, so a role sees and writes them only for the groupml.snapshots rows it sees (its own, those of roles it is a member of; groupml_admin: all) whose source it may SELECT every snapshot column of.';
GRANT SELECT ON @extschema@.snapshot_blocks TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshot_blocks', '');
