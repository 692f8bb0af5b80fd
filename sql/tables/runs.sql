CREATE TABLE @extschema@.runs (
    run_id       bigserial PRIMARY KEY,
    kind         text NOT NULL,                 -- train_groups | ...
    source       text NOT NULL,                 -- qualified relation name
    group_by     text[] NOT NULL DEFAULT '{}',
    features     text[] NOT NULL,
    label        text NOT NULL,
    family       text NOT NULL,
    search       jsonb NOT NULL DEFAULT '{}',
    options      jsonb NOT NULL DEFAULT '{}',
    status       text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'failed', 'cancelled')),
    n_groups     integer,
    groups_done  integer NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at  timestamptz,
    seconds      float8,                        -- wall time of the run's calls, charged as each commits
    estimated_seconds float8,                   -- the planner's estimate of the training (train_seconds)
    created_by   name NOT NULL DEFAULT current_user,
    -- the settings the run's group keys were written in (TimeZone, IntervalStyle,
    -- extra_float_digits): a resume under others would write the same groups as other keys
    key_settings jsonb,
    -- the measured time of what estimated_seconds estimates: one backend, the groups' searches
    -- summed; with workers, the training after the snapshot (the planner's makespan)
    train_seconds float8
);
COMMENT ON TABLE @extschema@.runs IS
  'One row per catalog-writing training run (groupml.train_groups). Progress is committed group by group.';
ALTER TABLE @extschema@.runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY runs_by_role ON @extschema@.runs
    USING (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(created_by)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY runs_by_role ON @extschema@.runs IS
  'Row-level security: members of the role that created a run (created_by) see and change it; groupml_admin members see and change all runs. A role dropped or renamed since leaves its runs to groupml_admin.';
GRANT SELECT, UPDATE, DELETE ON @extschema@.runs TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.runs', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.runs_run_id_seq', '');
