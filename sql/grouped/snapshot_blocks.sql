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
ALTER TABLE @extschema@.snapshot_blocks ENABLE ROW LEVEL SECURITY;
CREATE POLICY snapshot_blocks_of_readable_groups ON @extschema@.snapshot_blocks
    USING (EXISTS (SELECT 1 FROM @extschema@.snapshot_groups g WHERE g.snapshot_id OPERATOR(pg_catalog.=) snapshot_blocks.snapshot_id
                                                        AND g.group_no OPERATOR(pg_catalog.=) snapshot_blocks.group_no));
COMMENT ON POLICY snapshot_blocks_of_readable_groups ON @extschema@.snapshot_blocks IS
  'Row-level security: packed row blocks hold the source''s rows and follow their group: a role sees and writes the blocks of the groupml.snapshot_groups rows it sees (only with SELECT on every column of the source the snapshot holds).';
GRANT SELECT ON @extschema@.snapshot_blocks TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshot_blocks', '');
