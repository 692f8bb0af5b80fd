CREATE TABLE @extschema@.trials (
    run_id        bigint NOT NULL REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key     jsonb NOT NULL DEFAULT '{}',
    trial_id      integer NOT NULL,
    params        jsonb NOT NULL,
    status        text NOT NULL,                -- converged | max_iter | stalled | diverged | stopped | failed
    stop_reason   text,
    score         float8,                       -- final validation value of the run's metric
    epoch_scores  float8[] NOT NULL DEFAULT '{}', -- validation loss after every epoch block
    metrics       jsonb,
    parent_trial_id integer,                    -- population based training: the trial this one was forked from
    forked_at_epoch integer,                    -- the parent's epoch count when it was forked
    PRIMARY KEY (run_id, group_key, trial_id)
);
COMMENT ON TABLE @extschema@.trials IS
  'Every configuration tried by a catalog-writing run, per group, with its per-epoch validation losses and stop reason.';
COMMENT ON COLUMN @extschema@.trials.parent_trial_id IS
  'Population based training (search method ''pbt''): the trial of the same run and group whose training state this trial continued (exploit); NULL for a trial trained from its own initial state. See groupml.trial_lineage.';
COMMENT ON COLUMN @extschema@.trials.forked_at_epoch IS
  'Population based training: the epoch count of the parent when this trial was forked from it; the trial''s epoch_scores up to it are the parent''s. NULL when parent_trial_id is NULL.';
ALTER TABLE @extschema@.trials ENABLE ROW LEVEL SECURITY;
CREATE POLICY trials_of_visible_runs ON @extschema@.trials
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) trials.run_id));
COMMENT ON POLICY trials_of_visible_runs ON @extschema@.trials IS
  'Row-level security: trials follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.trials TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.trials', '');
