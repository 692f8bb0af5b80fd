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
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshot_blocks', '');
