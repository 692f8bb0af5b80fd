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
-- the source's rows: readable only with SELECT on every column of the source the snapshot
-- holds, on top of seeing the snapshot (groupml_admin included); a source dropped since hides them
ALTER TABLE @extschema@.snapshot_groups ENABLE ROW LEVEL SECURITY;
CREATE POLICY snapshot_groups_of_readable_sources ON @extschema@.snapshot_groups
    USING (snapshot_id IN (
        SELECT s.snapshot_id FROM @extschema@.snapshots s
        WHERE NOT EXISTS (
            SELECT 1 FROM pg_catalog.unnest(s.group_by OPERATOR(pg_catalog.||) s.features OPERATOR(pg_catalog.||) s.label) AS c(col)
            WHERE NOT EXISTS (
                SELECT 1 FROM pg_catalog.pg_attribute a
                WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(s.source)
                  AND a.attname OPERATOR(pg_catalog.=) c.col::name AND a.attnum OPERATOR(pg_catalog.>) 0
                  AND NOT a.attisdropped
                  AND pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'SELECT')))));
COMMENT ON POLICY snapshot_groups_of_readable_sources ON @extschema@.snapshot_groups IS
  'Row-level security: group rows (group keys, counts) hold the source''s data, so a role sees and writes them only for the groupml.snapshots rows it sees (its own, those of roles it is a member of; groupml_admin: all) whose source it may SELECT every snapshot column of.';
GRANT SELECT ON @extschema@.snapshot_groups TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshot_groups', '');
