CREATE TABLE @extschema@.scheduler_state (
    name        text PRIMARY KEY DEFAULT 'default',
    policy      text NOT NULL,
    cost_aware  boolean NOT NULL,
    state       jsonb NOT NULL,                 -- groupml.tenancy.Scheduler.state_dict()
    steps       bigint NOT NULL DEFAULT 0,      -- last step number (observations.step); the log may hold fewer after a tenant deletes observations
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE @extschema@.scheduler_state IS
  'Multi-tenant model selection: the coordinator''s scheduler state (policy, JSON state, step counter), committed with every step so an interrupted run_scheduler resumes where it stopped. Administrators only.';
GRANT ALL ON @extschema@.scheduler_state TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.scheduler_state', '');
