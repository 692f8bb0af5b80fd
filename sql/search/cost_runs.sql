CREATE TABLE @extschema@.cost_runs (
    run_id      bigserial PRIMARY KEY,
    n           bigint NOT NULL CHECK (n >= 1),          -- training rows per pass
    d           integer NOT NULL CHECK (d >= 1),         -- features
    k           integer NOT NULL CHECK (k >= 1),         -- configurations per pass (batch size)
    workers     integer NOT NULL DEFAULT 1 CHECK (workers >= 1),
    passes      integer NOT NULL CHECK (passes >= 1),    -- data passes measured
    seconds     float8 NOT NULL CHECK (seconds > 0 AND seconds < 'Infinity'),  -- wall time of all those passes
    family      text,                                    -- logistic | linear | svm | ...
    source      text NOT NULL,                           -- calibrate_cost_model | train_groups | ...
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE @extschema@.cost_runs IS
  'Measured training runs (rows n, features d, batch size k, workers, passes, seconds) from which the planner refits its cost model (TuPAQ eq. 1) by NNLS. Filled by groupml.calibrate_cost_model() and by catalog-writing runs.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.cost_runs', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.cost_runs_run_id_seq', '');
-- every role's planning reads the shared model (batch sizes and estimates, never results);
-- only the catalog's writers add runs: a row anyone could insert would steer (or, with a
-- chosen run_id, block) every other role's training
GRANT SELECT ON @extschema@.cost_runs TO PUBLIC;
