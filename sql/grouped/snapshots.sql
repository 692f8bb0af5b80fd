CREATE TABLE @extschema@.snapshots (
    snapshot_id          bigserial PRIMARY KEY,
    source               text NOT NULL,
    group_by             text[] NOT NULL,
    features             text[] NOT NULL,
    label                text NOT NULL,
    seed                 bigint NOT NULL,
    validation_fraction  float8 NOT NULL,
    block_rows           integer NOT NULL,
    n_rows               bigint,
    n_groups             integer,
    keep                 boolean NOT NULL DEFAULT false,
    status               text NOT NULL DEFAULT 'building' CHECK (status IN ('building', 'ready')),
    created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by           name NOT NULL DEFAULT current_user
);
COMMENT ON TABLE @extschema@.snapshots IS
  'Training snapshots (the ETL step of grouped learning): a source materialised once as packed blocks in groupml.snapshot_blocks, shuffled by a seeded row hash with validation rows marked. Reused by runs with the same arguments; dropped with the run unless options.keep_snapshot.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshots', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshots_snapshot_id_seq', '');
