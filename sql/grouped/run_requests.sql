CREATE TABLE @extschema@.run_requests (
    request_id   bigserial PRIMARY KEY,
    run_id       bigint NOT NULL REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('add_trial', 'stop_trial', 'add_workers')),
    trial_id     integer CHECK (trial_id >= 0),  -- add_trial: the new trial's id; stop_trial: the trial to stop
    params       jsonb,                          -- add_trial: the configuration, validated and completed
    n_workers    integer CHECK (n_workers >= 1), -- add_workers: worker backends to add
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'applied', 'refused', 'expired')),
    note         text,                           -- what applying it did, or why it was not applied
    requested_by name NOT NULL DEFAULT current_user,
    requested_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    applied_at   timestamptz,                    -- committed with the run's progress that applied it
    CHECK ((kind = 'add_trial') = (params IS NOT NULL)),
    CHECK ((kind = 'add_workers') = (n_workers IS NOT NULL)),
    CHECK ((kind = 'add_workers') = (trial_id IS NULL)),
    CHECK ((status = 'pending') = (applied_at IS NULL))
);
CREATE UNIQUE INDEX run_requests_one_per_trial ON @extschema@.run_requests (run_id, kind, trial_id)
    WHERE kind IN ('add_trial', 'stop_trial');
COMMENT ON TABLE @extschema@.run_requests IS
  'Requests that steer a running model hopper run (strategy => ''mop'') from another session: add a trial (groupml.mop_add_trial), stop a trial (groupml.mop_stop_trial), add worker backends (groupml.mop_add_workers). The run applies trial requests between epoch blocks and worker requests between sub-epochs, and marks them applied in the transaction that commits that progress, so a resumed run neither loses nor repeats one.';
COMMENT ON INDEX @extschema@.run_requests_one_per_trial IS
  'One add request per added trial id and one stop request per trial of a run.';
ALTER TABLE @extschema@.run_requests ENABLE ROW LEVEL SECURITY;
CREATE POLICY run_requests_of_visible_runs ON @extschema@.run_requests
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) run_requests.run_id));
COMMENT ON POLICY run_requests_of_visible_runs ON @extschema@.run_requests IS
  'Row-level security: requests follow their run: a role sees, files and changes the requests of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT, INSERT ON @extschema@.run_requests TO groupml_admin;
GRANT USAGE ON SEQUENCE @extschema@.run_requests_request_id_seq TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_requests', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_requests_request_id_seq', '');
