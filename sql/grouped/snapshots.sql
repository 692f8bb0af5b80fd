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
ALTER TABLE @extschema@.snapshots ENABLE ROW LEVEL SECURITY;
CREATE POLICY snapshots_by_role ON @extschema@.snapshots
    USING (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(created_by)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY snapshots_by_role ON @extschema@.snapshots IS
  'Row-level security: members of the role that built a snapshot (created_by) see and change it; groupml_admin members see and drop all snapshots. Their groups and blocks are further limited to roles that may read the source (see snapshot_blocks).';
GRANT SELECT, DELETE ON @extschema@.snapshots TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshots', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshots_snapshot_id_seq', '');
