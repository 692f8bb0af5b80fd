-- groupml 0.2.0: generated from sql/ by installer/groupml_installer.py; do not edit
\echo Use "CREATE EXTENSION groupml" to load this file. \quit

-- types/fit.sql
-- The result of training and selecting a model for one group.
CREATE TYPE @extschema@.fit AS (
    status        text,     -- ok | too_small | single_class | no_rows | failed
    family        text,     -- model family: groupml.help('models')
    params        jsonb,    -- hyperparameters of the selected configuration
    metric        text,     -- validation metric the selection used
    score         float8,   -- value of that metric on the validation rows (natural units)
    metrics       jsonb,    -- every validation metric of the selected model
    n_train       bigint,   -- rows used for training
    n_validation  bigint,   -- rows held out for validation
    n_skipped     bigint,   -- rows skipped for a NULL label or a NULL/NaN/infinite feature
    n_features    integer,
    trials        jsonb,    -- one object per configuration tried: params, score, epochs, status
    message       text,     -- why status is not ok; a solver warning for an ok fit; else NULL
    model         bytea     -- the selected model in groupml's safe format (no pickle)
);
COMMENT ON TYPE @extschema@.fit IS
  'Result of groupml.learn_over_groups for one group: status, selected params, validation score, every trial, and the model (safe format). Use groupml.predict(fit, features).';

-- tables/runs.sql
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
SELECT pg_catalog.pg_extension_config_dump('@extschema@.runs', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.runs_run_id_seq', '');

-- tables/models.sql
CREATE TABLE @extschema@.models (
    model_id      bigserial PRIMARY KEY,
    run_id        bigint REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key     jsonb NOT NULL DEFAULT '{}',  -- {"country": "FR"}; {} for an ungrouped run
    fit           @extschema@.fit NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (run_id, group_key)
);
-- Out of line but not compressed: predict called once per row detoasts the fit on every call,
-- and decompressing a LightGBM model of ~90 KB (pglz) cost ~80 us of a ~150 us call.
ALTER TABLE @extschema@.models ALTER COLUMN fit SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.models IS
  'The model catalog: one selected model per (run, group). Every trainer in groupml writes here.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.models', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.models_model_id_seq', '');

-- tables/trials.sql
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

-- functions/_learn_step.sql
-- Transition functions of learn_over_groups, one per aggregate signature: each buffers one row in
-- backend memory under the handle it returns (the aggregate state).
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model text, search jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, None)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, text, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label).';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model text, search jsonb, options jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, options)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, text, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label, with options).';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model text, search jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, None)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, text, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label).';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model text, search jsonb, options jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, options)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, text, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label, with options).';

-- functions/_learn_final.sql
-- Final function of learn_over_groups: trains and selects the group's model.
CREATE FUNCTION @extschema@._learn_final(state bigint)
RETURNS @extschema@.fit LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import final; return final(state)
$python$;
COMMENT ON FUNCTION @extschema@._learn_final(bigint) IS
  'Internal: final function of groupml.learn_over_groups. Splits the buffered rows, trains every configuration together and returns the selected fit.';

-- aggregates/learn_over_groups.sql
-- learn_over_groups: train and select one model per GROUP BY group.
CREATE AGGREGATE @extschema@.learn_over_groups(features float8[], label float8, model text, search jsonb) (
    SFUNC = @extschema@._learn_step, STYPE = bigint,
    FINALFUNC = @extschema@._learn_final, FINALFUNC_MODIFY = READ_WRITE
);
CREATE AGGREGATE @extschema@.learn_over_groups(features float8[], label float8, model text, search jsonb, options jsonb) (
    SFUNC = @extschema@._learn_step, STYPE = bigint,
    FINALFUNC = @extschema@._learn_final, FINALFUNC_MODIFY = READ_WRITE
);
CREATE AGGREGATE @extschema@.learn_over_groups(features float8[], label boolean, model text, search jsonb) (
    SFUNC = @extschema@._learn_step, STYPE = bigint,
    FINALFUNC = @extschema@._learn_final, FINALFUNC_MODIFY = READ_WRITE
);
CREATE AGGREGATE @extschema@.learn_over_groups(features float8[], label boolean, model text, search jsonb, options jsonb) (
    SFUNC = @extschema@._learn_step, STYPE = bigint,
    FINALFUNC = @extschema@._learn_final, FINALFUNC_MODIFY = READ_WRITE
);
COMMENT ON AGGREGATE @extschema@.learn_over_groups(float8[], float8, text, jsonb) IS
  'Train every configuration of the search spec on the group''s rows (all together, one data pass per iteration), select the best on a deterministic validation holdout, return a groupml.fit. See groupml.help(''learn_over_groups'').';
COMMENT ON AGGREGATE @extschema@.learn_over_groups(float8[], float8, text, jsonb, jsonb) IS
  'learn_over_groups with options: {"validation_fraction": 0.2, "metric": "accuracy", "seed": 0}. See groupml.help(''learn_over_groups'').';
COMMENT ON AGGREGATE @extschema@.learn_over_groups(float8[], boolean, text, jsonb) IS
  'learn_over_groups for a boolean label (true = 1). See groupml.help(''learn_over_groups'').';
COMMENT ON AGGREGATE @extschema@.learn_over_groups(float8[], boolean, text, jsonb, jsonb) IS
  'learn_over_groups for a boolean label, with options. See groupml.help(''learn_over_groups'').';

-- functions/predict.sql
CREATE FUNCTION @extschema@.predict(fit @extschema@.fit, features float8[])
RETURNS float8 LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict; return predict(fit, features)
$python$;
COMMENT ON FUNCTION @extschema@.predict(@extschema@.fit, float8[]) IS
  'Predict one row with a fit: the class (0/1) for logistic and svm, the value for linear.';

-- functions/predict_proba.sql
CREATE FUNCTION @extschema@.predict_proba(fit @extschema@.fit, features float8[])
RETURNS float8 LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict_proba; return predict_proba(fit, features)
$python$;
COMMENT ON FUNCTION @extschema@.predict_proba(@extschema@.fit, float8[]) IS
  'Probability of class 1 for one row, for classifiers (logistic, mlp, lightgbm).';

-- functions/predict_batch.sql
CREATE FUNCTION @extschema@.predict_batch(fit @extschema@.fit, features float8[])
RETURNS float8[] LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict_batch; from groupml.udf import take_args; return predict_batch(*take_args(globals(), "fit", "features"))
$python$;
COMMENT ON FUNCTION @extschema@.predict_batch(@extschema@.fit, float8[]) IS
  'Predict many rows in one call: features is a two-dimensional array (one row per sub-array); returns one prediction per row.';

-- functions/predict_proba_batch.sql
CREATE FUNCTION @extschema@.predict_proba_batch(fit @extschema@.fit, features float8[])
RETURNS float8[] LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict_proba_batch; from groupml.udf import take_args; return predict_proba_batch(*take_args(globals(), "fit", "features"))
$python$;
COMMENT ON FUNCTION @extschema@.predict_proba_batch(@extschema@.fit, float8[]) IS
  'Probability of class 1 for many rows in one call, for classifiers (logistic, mlp, lightgbm); features is a two-dimensional array.';

-- functions/help.sql
CREATE FUNCTION @extschema@.help(topic text DEFAULT NULL)
RETURNS text LANGUAGE plpython3u IMMUTABLE PARALLEL SAFE
AS $python$
from groupml.udf.help import help_text; return help_text(topic)
$python$;
COMMENT ON FUNCTION @extschema@.help(text) IS
  'groupml.help() lists the functions; groupml.help(''learn_over_groups'') explains one, with its parameters and an example.';

-- functions/version.sql
CREATE FUNCTION @extschema@.version()
RETURNS text LANGUAGE plpython3u STABLE PARALLEL SAFE
AS $python$
from groupml.udf.help import version_text; return version_text()
$python$;
COMMENT ON FUNCTION @extschema@.version() IS
  'Version of the groupml Python package loaded by this backend, its path, and the versions of numpy and scipy.';

-- procedures/train_groups.sql
CREATE PROCEDURE @extschema@.train_groups(
    source regclass, group_by text[], features text[], label text, model text,
    search jsonb DEFAULT '{}', options jsonb DEFAULT '{}', INOUT run_id bigint DEFAULT NULL,
    workers integer DEFAULT 1, strategy text DEFAULT 'auto')
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import train_groups; return train_groups(source, group_by, features, label, model, search, options, run_id, workers, strategy)
$python$;
COMMENT ON PROCEDURE @extschema@.train_groups(regclass, text[], text[], text, text, jsonb, jsonb, bigint, integer, text) IS
  'Train and select one model per group of a table and store them in groupml.models (committed group by group). workers => p > 1 (or an explicit strategy) runs the planner-driven executor over p worker backends: auto | grouped | gtp | mtp | dp. Pass an existing run_id to resume an interrupted run. See groupml.help(''train_groups'') and groupml.help(''grouped'').';

-- views/best_models.sql
CREATE VIEW @extschema@.best_models AS
SELECT m.model_id, m.run_id, m.group_key, (m.fit).status, (m.fit).family, (m.fit).params,
       (m.fit).metric, (m.fit).score, (m.fit).metrics, (m.fit).n_train, (m.fit).n_validation,
       (m.fit).n_skipped, m.created_at
FROM @extschema@.models m;
COMMENT ON VIEW @extschema@.best_models IS
  'The catalog without model bytes: the selected configuration and validation score per run and group.';

-- search/cost_runs.sql
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

-- search/calibrate_cost_model.sql
CREATE FUNCTION @extschema@.calibrate_cost_model(sizes jsonb DEFAULT NULL, model text DEFAULT 'logistic',
                                                 passes integer DEFAULT 5)
RETURNS TABLE (n bigint, d integer, k integer, measured_passes integer, seconds_per_pass float8,
               estimated_seconds_per_pass float8)
LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.search import calibrate_cost_model; return calibrate_cost_model(sizes, model, passes)
$python$;
COMMENT ON FUNCTION @extschema@.calibrate_cost_model(jsonb, text, integer) IS
  'Measure a few real batched training passes on synthetic data (default sizes, or sizes => ''[{"n": 10000, "d": 20, "k": 4}, ...]''), store them in groupml.cost_runs and return each measurement beside the refitted cost model''s estimate. See groupml.help(''calibrate_cost_model'').';

-- search/explain_search.sql
CREATE FUNCTION @extschema@.explain_search(source regclass, features text[], label text, model text, search jsonb,
                                           group_by text[] DEFAULT '{}', options jsonb DEFAULT '{}')
RETURNS TABLE (item text, value text, detail text)
LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.search import explain_search; return explain_search(source, features, label, model, search, group_by, options)
$python$;
COMMENT ON FUNCTION @extschema@.explain_search(regclass, text[], text, text, jsonb, text[], jsonb) IS
  'The plan of a search without training: procedure, early stopping, configurations, epoch and pass budget, batch size k and why, groups and rows, estimated seconds (all groups and the largest). Reads the catalog and one count query. See groupml.help(''explain_search'').';

-- search/trial_info.sql
CREATE FUNCTION @extschema@.trial_info(fit @extschema@.fit)
RETURNS TABLE (trial_id integer, params jsonb, score float8, epochs integer, iterations integer, status text,
               stop_reason text, epoch_losses float8[], passes bigint, seconds float8, is_best boolean)
LANGUAGE plpython3u IMMUTABLE PARALLEL SAFE
AS $python$
from groupml.udf.search import trial_info; return trial_info(fit)
$python$;
COMMENT ON FUNCTION @extschema@.trial_info(@extschema@.fit) IS
  'One row per configuration tried for a fit (like BigQuery ML.TRIAL_INFO): params, validation score, epochs, iterations, status, stop reason, per-epoch validation losses, data passes, seconds, and whether it was selected. See groupml.help(''trial_info'').';

-- search/run_trial_info.sql
CREATE VIEW @extschema@.run_trial_info AS
SELECT t.run_id, t.group_key, t.trial_id, t.params, t.score,
       pg_catalog.cardinality(t.epoch_scores) AS epochs, (t.metrics ->> 'iterations')::integer AS iterations,
       t.status, t.stop_reason,
       t.epoch_scores AS epoch_losses,
       (t.metrics ->> 'passes')::bigint AS passes, (t.metrics ->> 'seconds')::float8 AS seconds,
       coalesce((t.metrics ->> 'is_best')::boolean,
                t.trial_id = (SELECT min(t2.trial_id) FROM @extschema@.trials t2
                              WHERE t2.run_id = t.run_id AND t2.group_key = t.group_key
                                AND t2.params = (m.fit).params AND t2.score IS NOT DISTINCT FROM (m.fit).score),
                false) AS is_best
FROM @extschema@.trials t
LEFT JOIN @extschema@.models m ON m.run_id = t.run_id AND m.group_key = t.group_key;
COMMENT ON VIEW @extschema@.run_trial_info IS
  'Every trial of the catalog-writing runs (groupml.trials) in the shape of groupml.trial_info(fit): params, score, epochs, iterations, status, stop reason, per-epoch losses, cost, and whether it was selected.';

-- tenancy/role_groupml_admin.sql
-- The administrator role of multi-tenant model selection: members see every tenant's rows,
-- run the coordinator (run_scheduler) and schedule it with pg_cron. Roles are cluster-wide,
-- so the role is created only when missing (another database may have created it).
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'groupml_admin') THEN
        CREATE ROLE groupml_admin NOLOGIN;
    END IF;
END
$do$;
COMMENT ON ROLE groupml_admin IS
  'groupml multi-tenant administrator: members see all tenants, jobs, candidates and observations and may CALL groupml.run_scheduler. GRANT groupml_admin TO <coordinator role>.';

-- tenancy/schema_usage.sql
-- Tenants are ordinary roles: they need to reach the schema. Row-level security on the
-- tenancy tables (not schema privileges) decides which rows each role sees; the
-- foundation's catalog tables stay without grants.
GRANT USAGE ON SCHEMA @extschema@ TO PUBLIC;

-- tenancy/tenants.sql
CREATE TABLE @extschema@.tenants (
    tenant_id    bigserial PRIMARY KEY,
    name         text NOT NULL UNIQUE CHECK (name <> ''),
    role         regrole NOT NULL,               -- members of this role act as the tenant
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by   name NOT NULL DEFAULT current_user
);
COMMENT ON TABLE @extschema@.tenants IS
  'Multi-tenant model selection: one row per tenant, bound to a role. Row-level security: a role sees the tenants it is a member of; groupml_admin sees all. Create with groupml.create_tenant.';
ALTER TABLE @extschema@.tenants ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenants_own ON @extschema@.tenants
    USING (pg_catalog.pg_has_role(role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY tenants_own ON @extschema@.tenants IS
  'Row-level security: members of the row''s role see and change it; groupml_admin members see and change all rows.';
GRANT SELECT, INSERT, UPDATE, DELETE ON @extschema@.tenants TO PUBLIC;
GRANT USAGE ON SEQUENCE @extschema@.tenants_tenant_id_seq TO PUBLIC;
GRANT ALL ON @extschema@.tenants TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tenants', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.tenants_tenant_id_seq', '');

-- tenancy/jobs.sql
CREATE TABLE @extschema@.jobs (
    job_id              bigserial PRIMARY KEY,
    tenant_id           bigint NOT NULL REFERENCES @extschema@.tenants (tenant_id) ON DELETE CASCADE,
    owner_role          regrole NOT NULL,       -- the tenant's role (row-level security)
    source              regclass NOT NULL,      -- the relation the job trains on
    features            text[] NOT NULL,
    label               text NOT NULL,
    task                text NOT NULL CHECK (task IN ('classification', 'regression')),
    metric              text NOT NULL,          -- validation metric = quality (higher is better)
    n_rows              bigint NOT NULL,        -- rows of the source at submission (cost estimates)
    best_observation_id bigint,                 -- the observation whose model infer uses
    best_quality        float8,
    submitted_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    submitted_by        name NOT NULL DEFAULT current_user,
    -- the inserting transaction: only it may add the job's candidates (_tenancy_add_candidates)
    submitted_xact      xid8 NOT NULL DEFAULT pg_catalog.pg_current_xact_id()
);
COMMENT ON TABLE @extschema@.jobs IS
  'Multi-tenant model selection: one row per submitted job (source relation, feature and label columns, task, best model so far). Row-level security by owner_role; groupml_admin sees all. Create with groupml.submit_job.';
ALTER TABLE @extschema@.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY jobs_own ON @extschema@.jobs
    USING (pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
    WITH CHECK ((pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
                AND EXISTS (SELECT 1 FROM @extschema@.tenants t
                            WHERE t.tenant_id = jobs.tenant_id AND t.role = jobs.owner_role));
COMMENT ON POLICY jobs_own ON @extschema@.jobs IS
  'Row-level security: members of the row''s role see it, insert it (through submit_job) and delete it; groupml_admin members see and change all rows. A written row must belong to its tenant''s role. Tenants have no UPDATE: a job''s source and features fix its candidates'' estimated costs.';
GRANT SELECT, INSERT, DELETE ON @extschema@.jobs TO PUBLIC;
GRANT USAGE ON SEQUENCE @extschema@.jobs_job_id_seq TO PUBLIC;
GRANT ALL ON @extschema@.jobs TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.jobs_job_id_seq', '');

-- tenancy/candidates.sql
CREATE TABLE @extschema@.candidates (
    candidate_id    bigserial PRIMARY KEY,
    job_id          bigint NOT NULL REFERENCES @extschema@.jobs (job_id) ON DELETE CASCADE,
    owner_role      regrole NOT NULL,
    key             text NOT NULL,              -- stable key 'family:{params}' shared across jobs
    family          text NOT NULL,
    params          jsonb NOT NULL,
    estimated_cost  float8 NOT NULL CHECK (estimated_cost > 0 AND estimated_cost < 'Infinity'),
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ok', 'failed')),
    -- trainings of it started (each committed before it starts): a pending candidate's attempts
    -- all ended without an outcome (cancel, statement_timeout, its backend ended); after a few it
    -- is recorded as failed instead of being retried forever
    attempts        integer NOT NULL DEFAULT 0,
    UNIQUE (job_id, key)
);
COMMENT ON TABLE @extschema@.candidates IS
  'Multi-tenant model selection: the candidate models of each job (family, fixed hyperparameters, estimated cost, status pending|ok|failed). Row-level security by owner_role.';
ALTER TABLE @extschema@.candidates ENABLE ROW LEVEL SECURITY;
CREATE POLICY candidates_own ON @extschema@.candidates
    USING (pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
    WITH CHECK ((pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
                AND EXISTS (SELECT 1 FROM @extschema@.jobs j
                            WHERE j.job_id = candidates.job_id AND j.owner_role = candidates.owner_role));
COMMENT ON POLICY candidates_own ON @extschema@.candidates IS
  'Row-level security: members of the row''s role see it and may delete it; groupml_admin members see and change all rows. A written row must belong to its job''s role. Tenants have no INSERT or UPDATE: submit_job adds candidates through groupml._tenancy_add_candidates.';
GRANT SELECT, DELETE ON @extschema@.candidates TO PUBLIC;
GRANT ALL ON @extschema@.candidates TO groupml_admin;
GRANT USAGE ON SEQUENCE @extschema@.candidates_candidate_id_seq TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.candidates', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.candidates_candidate_id_seq', '');

-- tenancy/job_data.sql
CREATE TABLE @extschema@.job_data (
    job_id      bigint PRIMARY KEY REFERENCES @extschema@.jobs (job_id) ON DELETE CASCADE,
    owner_role  regrole NOT NULL,
    n_rows      bigint NOT NULL CHECK (n_rows >= 0),    -- rows of the source, NULL rows included
    block       bytea NOT NULL                          -- the rows without NULLs: big-endian float8, features then label
);
-- Out of line, not compressed: the coordinator reads a job's block whole, and doubles barely compress
ALTER TABLE @extschema@.job_data ALTER COLUMN block SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.job_data IS
  'Multi-tenant model selection: the rows of each job, read by submit_job as the submitting role and packed as big-endian doubles (features then label); the coordinator trains on them and never reads a tenant''s source itself. Written once per job by submit_job; no grants to tenants.';
ALTER TABLE @extschema@.job_data ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_data_own ON @extschema@.job_data
    USING (pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY job_data_own ON @extschema@.job_data IS
  'Row-level security: only groupml_admin members (the coordinator) read job rows; tenants have no grants and read their own sources.';
GRANT SELECT, DELETE ON @extschema@.job_data TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.job_data', '');

-- tenancy/observations.sql
CREATE TABLE @extschema@.observations (
    observation_id  bigserial PRIMARY KEY,
    job_id          bigint NOT NULL REFERENCES @extschema@.jobs (job_id) ON DELETE CASCADE,
    candidate_id    bigint NOT NULL UNIQUE REFERENCES @extschema@.candidates (candidate_id) ON DELETE CASCADE,
    owner_role      regrole NOT NULL,
    step            bigint NOT NULL,            -- the scheduler step that trained it
    policy          text NOT NULL,
    status          text NOT NULL CHECK (status IN ('ok', 'failed')),
    quality         float8,                     -- validation metric of the job (higher is better)
    cost_seconds    float8 NOT NULL,            -- measured training time
    error           text,                       -- why it failed
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz NOT NULL,
    model           bytea,                      -- the trained model, groupml's safe format
    CHECK ((status = 'ok') = (quality IS NOT NULL))
);
-- Out of line, not compressed: groupml.infer reads the model on every call (see models.sql)
ALTER TABLE @extschema@.observations ALTER COLUMN model SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.observations IS
  'Multi-tenant model selection: one row per trained candidate (at most one per candidate): quality, measured cost, status ok|failed with the error, timestamps and the model. Written by groupml.run_scheduler; row-level security by owner_role.';
ALTER TABLE @extschema@.observations ENABLE ROW LEVEL SECURITY;
CREATE POLICY observations_own ON @extschema@.observations
    USING (pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))
    WITH CHECK (pg_catalog.pg_has_role(owner_role::oid, 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY observations_own ON @extschema@.observations IS
  'Row-level security: members of the row''s role see and change it; groupml_admin members see and change all rows.';
GRANT SELECT, DELETE ON @extschema@.observations TO PUBLIC;
GRANT ALL ON @extschema@.observations TO groupml_admin;
GRANT USAGE ON SEQUENCE @extschema@.observations_observation_id_seq TO groupml_admin;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.observations', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.observations_observation_id_seq', '');

-- tenancy/scheduler_state.sql
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

-- tenancy/create_tenant.sql
CREATE FUNCTION @extschema@.create_tenant(name text, role name DEFAULT current_user)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.tenancy import create_tenant; return create_tenant(name, role)
$python$;
COMMENT ON FUNCTION @extschema@.create_tenant(text, name) IS
  'Create a tenant bound to a role (default: the calling role) and return its tenant_id. Binding another role needs membership in it or groupml_admin. See groupml.help(''create_tenant'').';

-- tenancy/submit_job.sql
CREATE FUNCTION @extschema@.submit_job(tenant text, source regclass, features text[], label text,
                                       candidates jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.tenancy import submit_job; return submit_job(tenant, source, features, label, candidates)
$python$;
COMMENT ON FUNCTION @extschema@.submit_job(text, regclass, text[], text, jsonb) IS
  'Submit a model-selection job for a tenant: the source relation, feature and label columns, and candidate models (families with explicit params or a grid/random search space, expanded into one candidate per configuration). Returns the job_id. See groupml.help(''submit_job'').';

-- tenancy/_tenancy_add_candidates.sql
-- Tenants cannot INSERT or UPDATE candidates: keys and estimated costs steer the shared
-- scheduler. submit_job (SECURITY INVOKER: it reads the source as the submitting role, and
-- row-level security decides whose tenant and job it is) calls this SECURITY DEFINER
-- function in the transaction that inserted the job. It adds the job's candidates once,
-- for the job's own role, with keys and costs computed here from the rows passed, and
-- stores those rows for the coordinator. It runs no code of the tenant's: it reads only
-- groupml's own tables, never a source.
CREATE FUNCTION @extschema@._tenancy_add_candidates(job_id bigint, candidates jsonb, n_rows bigint, block bytea)
RETURNS integer LANGUAGE plpython3u VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $python$
from groupml.udf.tenancy import add_job_candidates; return add_job_candidates(job_id, candidates, n_rows, block)
$python$;
COMMENT ON FUNCTION @extschema@._tenancy_add_candidates(bigint, jsonb, bigint, bytea) IS
  'Internal (submit_job): adds the candidates of a job inserted by this transaction, once, owned by the job''s role, with keys and estimated costs computed from the job''s rows (packed by submit_job), and stores those rows for the coordinator; tenants have no INSERT or UPDATE on groupml.candidates.';

-- tenancy/run_scheduler.sql
CREATE PROCEDURE @extschema@.run_scheduler(max_steps integer DEFAULT NULL, max_seconds float8 DEFAULT NULL,
                                           policy text DEFAULT 'hybrid', cost_aware boolean DEFAULT true)
LANGUAGE plpython3u
AS $python$
from groupml.udf.tenancy import run_scheduler; return run_scheduler(max_steps, max_seconds, policy, cost_aware)
$python$;
COMMENT ON PROCEDURE @extschema@.run_scheduler(integer, float8, text, boolean) IS
  'Coordinator: step by step pick (tenant job, candidate) with the multi-tenant scheduler, train it, record quality and measured cost, update the job''s best model, COMMIT. Stops at max_steps, max_seconds or when every candidate is done; resumes where an interrupted run stopped. groupml_admin only. See groupml.help(''run_scheduler'').';

-- tenancy/schedule_with_cron.sql
CREATE FUNCTION @extschema@.schedule_with_cron(schedule text, max_seconds float8 DEFAULT 50,
                                               policy text DEFAULT 'hybrid', cost_aware boolean DEFAULT true,
                                               database text DEFAULT current_database(),
                                               job_name text DEFAULT 'groupml_scheduler')
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.tenancy import schedule_with_cron; return schedule_with_cron(schedule, max_seconds, policy, cost_aware, database, job_name)
$python$;
COMMENT ON FUNCTION @extschema@.schedule_with_cron(text, float8, text, boolean, text, text) IS
  'Let pg_cron CALL groupml.run_scheduler(max_seconds => ...) on a cron schedule (creates or updates the cron job job_name, returns its jobid). Needs pg_cron in this database. See groupml.help(''schedule_with_cron'').';

-- tenancy/infer.sql
CREATE FUNCTION @extschema@.infer(job_id bigint, features float8[])
RETURNS float8 LANGUAGE plpython3u STABLE
AS $python$
from groupml.udf.tenancy import infer; return infer(job_id, features)
$python$;
COMMENT ON FUNCTION @extschema@.infer(bigint, float8[]) IS
  'Predict one row with the best model trained so far for a job (class 0/1 for classification, value for regression). Row-level security applies: a tenant infers with its own jobs only.';

-- tenancy/simulate_scheduler.sql
CREATE FUNCTION @extschema@.simulate_scheduler(policy text DEFAULT 'hybrid', sigma_m float8 DEFAULT 0.5,
                                               alpha float8 DEFAULT 0.1, seeds integer DEFAULT 5,
                                               cost_aware boolean DEFAULT true, n_users integer DEFAULT 100,
                                               n_models integer DEFAULT 50, n_tenants integer DEFAULT 10,
                                               budget_fraction float8 DEFAULT 0.5, grid_points integer DEFAULT 50)
RETURNS TABLE (cost float8, avg_loss float8, worst_tenant_loss float8, worst_run_loss float8)
LANGUAGE plpython3u IMMUTABLE
AS $python$
from groupml.udf.tenancy import simulate_scheduler; return simulate_scheduler(policy, sigma_m, alpha, seeds, cost_aware, n_users, n_models, n_tenants, budget_fraction, grid_points)
$python$;
COMMENT ON FUNCTION @extschema@.simulate_scheduler(text, float8, float8, integer, boolean, integer, integer, integer, float8, integer) IS
  'Simulate the multi-tenant scheduler on the synthetic SYN(sigma_m, alpha) quality/cost matrices (no training) and return the accuracy-loss curve averaged over seeds: average, worst tenant, worst run, against cumulative cost. See groupml.help(''simulate_scheduler'').';

-- tenancy/scheduler_log.sql
CREATE VIEW @extschema@.scheduler_log WITH (security_invoker = true) AS
SELECT o.step, t.name AS tenant, o.job_id, c.key AS candidate, c.family, c.params, o.status, o.quality,
       j.metric, o.cost_seconds, c.estimated_cost, o.policy, o.error, o.started_at, o.finished_at,
       (j.best_observation_id = o.observation_id) AS is_best
FROM @extschema@.observations o
JOIN @extschema@.candidates c USING (candidate_id)
JOIN @extschema@.jobs j ON j.job_id = o.job_id
JOIN @extschema@.tenants t ON t.tenant_id = j.tenant_id;
GRANT SELECT ON @extschema@.scheduler_log TO PUBLIC;
COMMENT ON VIEW @extschema@.scheduler_log IS
  'What the multi-tenant scheduler did, step by step: tenant served, job, candidate trained, status, quality, measured and estimated cost, timestamps. Row-level security of the underlying tables applies (security_invoker).';

-- grouped/worker_endpoints.sql
CREATE TABLE @extschema@.worker_endpoints (
    name     text PRIMARY KEY,
    dsn      text NOT NULL,                 -- libpq DSN or URI; 'loopback' = this server as the calling role
    enabled  boolean NOT NULL DEFAULT true,
    comment  text
);
COMMENT ON TABLE @extschema@.worker_endpoints IS
  'Worker backends train_groups may use (workers => p takes the first p enabled rows by name). Empty: p loopback connections to this server as the calling role; rows but none enabled: an error. Every endpoint must reach this server and database (workers read its snapshot tables). Passwords in DSNs are never logged or shown in errors.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.worker_endpoints', '');

-- grouped/snapshots.sql
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

-- grouped/snapshot_groups.sql
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

-- grouped/snapshot_blocks.sql
CREATE UNLOGGED TABLE @extschema@.snapshot_blocks (
    snapshot_id  bigint NOT NULL,
    group_no     integer NOT NULL,
    block_no     integer NOT NULL,
    n_rows       integer NOT NULL,
    n_val        integer NOT NULL,              -- the first n_val rows of the block are validation rows
    data         bytea NOT NULL,                -- n_rows x (features + label) big-endian float8, row major
    PRIMARY KEY (snapshot_id, group_no, block_no),
    FOREIGN KEY (snapshot_id, group_no) REFERENCES @extschema@.snapshot_groups (snapshot_id, group_no) ON DELETE CASCADE
);
ALTER TABLE @extschema@.snapshot_blocks ALTER COLUMN data SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.snapshot_blocks IS
  'Packed row blocks of training snapshots (uncompressed TOAST so substring() reads only the bytes a worker needs). Unlogged: a snapshot is a cache of its source, so its blocks skip the WAL; a crash restart empties this table, and a run resumed after one rebuilds its snapshot.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.snapshot_blocks', '');

-- grouped/grouped_runs.sql
CREATE TABLE @extschema@.grouped_runs (
    run_id       bigint PRIMARY KEY REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    strategy     text NOT NULL,
    workers      integer NOT NULL,
    snapshot_id  bigint,
    plan         jsonb NOT NULL DEFAULT '{}',
    epochs_done  bigint NOT NULL DEFAULT 0,
    passes_done  bigint NOT NULL DEFAULT 0,
    last_event   text,
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE @extschema@.grouped_runs IS
  'Planner-driven train_groups runs (workers > 1 or an explicit strategy): strategy, workers, snapshot, plan and live counters.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.grouped_runs', '');

-- grouped/run_epochs.sql
CREATE TABLE @extschema@.run_epochs (
    run_id     bigint NOT NULL REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key  jsonb NOT NULL,
    block      integer NOT NULL,                -- epoch block of the group's search (1-based)
    trial_id   integer NOT NULL,
    epoch      integer NOT NULL,
    score      float8,
    decision   text NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, group_key, block, trial_id)
);
COMMENT ON TABLE @extschema@.run_epochs IS
  'Per-epoch validation losses of planner-driven train_groups runs, committed as epochs finish (readable from other sessions while the run is going).';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_epochs', '');

-- grouped/run_schedule.sql
CREATE TABLE @extschema@.run_schedule (
    run_id     bigint NOT NULL REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key  jsonb NOT NULL,
    pass       integer NOT NULL,                -- the group's data pass (0-based)
    worker     integer NOT NULL,
    shard      integer NOT NULL,
    row_start  bigint NOT NULL,                 -- training rows [row_start, row_start + n_rows) of the group
    n_rows     bigint NOT NULL,
    trials     integer[] NOT NULL,              -- configurations evaluated in this task
    started    float8 NOT NULL,                 -- seconds since the run started (groupml.runs.started_at; one clock over resumed attempts)
    finished   float8 NOT NULL,
    worker_pid integer,
    kind       text NOT NULL DEFAULT 'pass'     -- pass (GLM data pass) | stats | visit (MLP hop; pass = epoch) | rank (distributed LightGBM; pass = job) | fit (whole group on one worker) | eval (MLP state scored / serialised)
);
CREATE INDEX ON @extschema@.run_schedule (run_id, group_key);
COMMENT ON TABLE @extschema@.run_schedule IS
  'What ran where: every task a worker executed for a planner-driven train_groups run (written with the group''s model). For MLP groups split over workers the kind = ''visit'' rows ordered by started are the visit log that groupml.learners.replay reproduces. groupml checks data sharding, worker exclusivity and config isolation on it.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_schedule', '');

-- grouped/run_checkpoints.sql
CREATE TABLE @extschema@.run_checkpoints (
    run_id       bigint NOT NULL REFERENCES @extschema@.runs (run_id) ON DELETE CASCADE,
    group_key    jsonb NOT NULL,
    block        integer NOT NULL,              -- the group's last committed epoch block (1-based)
    passes       bigint NOT NULL,               -- trainer passes of the group's search up to that block
    fingerprint  text NOT NULL,                 -- model, search, options (and shard layout for MLP/LightGBM) it is valid for
    state        bytea NOT NULL,                -- JSON header + numpy npz body (groupml.executor.checkpoint); never pickle
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, group_key)
);
ALTER TABLE @extschema@.run_checkpoints ALTER COLUMN state SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.run_checkpoints IS
  'Epoch-level resume points of planner-driven train_groups runs: per group in flight, the search procedure, trials and trainer state (GLM solver states, MLP training states, LightGBM model texts) after its last epoch block, committed with that block''s run_epochs rows. A run called again with its run_id continues each group from here; the row is deleted when the group''s model is committed.';
SELECT pg_catalog.pg_extension_config_dump('@extschema@.run_checkpoints', '');

-- grouped/progress.sql
CREATE VIEW @extschema@.progress AS
SELECT r.run_id, r.status, r.source, r.family, g.strategy, g.workers, r.n_groups, r.groups_done,
       g.epochs_done, g.passes_done, g.last_event, r.started_at,
       coalesce(r.finished_at, clock_timestamp()) - r.started_at AS elapsed, g.updated_at,
       -- the session training the run now: it holds the run's advisory lock (class 'gmlr')
       (SELECT min(l.pid) FROM pg_catalog.pg_locks l
        WHERE l.locktype = 'advisory' AND l.granted AND l.classid::int8 = 1735224434
          AND l.objid::int8 = (r.run_id & 4294967295) AND l.objsubid = 2
          AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                            WHERE d.datname = pg_catalog.current_database())) AS trained_by
FROM @extschema@.runs r LEFT JOIN @extschema@.grouped_runs g USING (run_id);
COMMENT ON VIEW @extschema@.progress IS
  'Live progress of train_groups runs (committed as groups and epochs finish; query it from another session). trained_by: the pid of the session training the run now; a run ''running'' with no trained_by was interrupted (crash, cancel, terminate) and resumes with train_groups(..., run_id => its id).';

-- grouped/_gap_partial.sql
CREATE FUNCTION @extschema@._gap_partial(request jsonb, theta bytea) RETURNS bytea
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import gap_partial; return gap_partial(request, theta)
$python$;
COMMENT ON FUNCTION @extschema@._gap_partial(jsonb, bytea) IS
  'Internal (worker side of train_groups): partial loss and gradient sums of one shard of a snapshot for many GLM configurations at once.';

-- grouped/_gap_task.sql
CREATE FUNCTION @extschema@._gap_task(request jsonb, blob bytea) RETURNS bytea
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import gap_task; from groupml.udf import take_args; return gap_task(*take_args(globals(), "request", "blob"))
$python$;
COMMENT ON FUNCTION @extschema@._gap_task(jsonb, bytea) IS
  'Internal (worker side of train_groups): one task of the sequential (MLP shard statistics, one hop of a model over a shard) or sampling pattern (one rank of distributed LightGBM), or the whole search of an unsplit group, on a shard of a snapshot.';

-- grouped/explain_train_groups.sql
CREATE FUNCTION @extschema@.explain_train_groups(
    source regclass, group_by text[], features text[], label text, model text,
    search jsonb DEFAULT '{}', options jsonb DEFAULT '{}', workers integer DEFAULT 4, strategy text DEFAULT 'auto')
RETURNS TABLE (strategy text, chosen boolean, worker integer, estimated_seconds float8, shards jsonb, explanation text)
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import explain_train_groups; return explain_train_groups(source, group_by, features, label, model, search, options, workers, strategy)
$python$;
COMMENT ON FUNCTION @extschema@.explain_train_groups(regclass, text[], text[], text, text, jsonb, jsonb, integer, text) IS
  'What train_groups would do with these arguments: every strategy''s estimated busy seconds per worker, the chosen one''s placement (shards per worker) and why. Reads group sizes only; trains nothing. See groupml.help(''grouped'').';

-- grouped/drop_snapshot.sql
CREATE FUNCTION @extschema@.drop_snapshot(snapshot_id bigint) RETURNS boolean
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import drop_snapshot; return drop_snapshot(snapshot_id)
$python$;
COMMENT ON FUNCTION @extschema@.drop_snapshot(bigint) IS
  'Delete a training snapshot (kept with options.keep_snapshot) and its blocks; true if it existed. Refused (55006) while another session trains a run that uses it.';
