CREATE TABLE @extschema@.snapshot_groups (
    snapshot_id  bigint NOT NULL REFERENCES @extschema@.snapshots (snapshot_id) ON DELETE CASCADE,
    group_no     integer NOT NULL,
    group_key    jsonb NOT NULL,
    n_train      bigint NOT NULL,
    n_val        bigint NOT NULL,
    n_pos        bigint NOT NULL,               -- training rows with label > 0.5 (class weights)
    n_skipped    bigint NOT NULL,               -- rows with a NULL or NaN feature or label
    n_blocks     integer NOT NULL,
    train_rows   integer[] NOT NULL,            -- training rows of every block, in block order
    PRIMARY KEY (snapshot_id, group_no)
);
COMMENT ON TABLE @extschema@.snapshot_groups IS
  'One row per group of a training snapshot: row counts and the training rows of each of its blocks (the planner places shards on these).';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshot_groups', '');
