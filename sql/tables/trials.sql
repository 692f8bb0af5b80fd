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
    PRIMARY KEY (run_id, group_key, trial_id)
);
COMMENT ON TABLE @extschema@.trials IS
  'Every configuration tried by a catalog-writing run, per group, with its per-epoch validation losses and stop reason.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.trials', '');
