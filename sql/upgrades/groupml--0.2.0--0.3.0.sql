-- groupml 0.2.0 -> 0.3.0 (ALTER EXTENSION groupml UPDATE). What changed in the catalog:
\echo Use "ALTER EXTENSION groupml UPDATE TO '0.3.0'" to load this file. \quit

-- Row-level security on the training catalog: a role sees and changes only its own runs (and
-- those of roles it is a member of) and everything that belongs to them; groupml_admin sees
-- all; snapshot groups and blocks (the source's rows) only for roles that may read the
-- source's columns. The views read as their caller. Each policy is FOR ALL with USING only,
-- so written rows are checked with the same expression.

-- groupml_admin: also the training catalog's administrator
COMMENT ON ROLE groupml_admin IS
  'groupml administrator: members see all tenants, jobs, candidates and observations and may CALL groupml.run_scheduler; they also see every role''s training runs and what belongs to them (snapshot rows only with SELECT on the source). GRANT groupml_admin TO <coordinator role>.';

-- runs
ALTER TABLE @extschema@.runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY runs_by_role ON @extschema@.runs
    USING (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(created_by)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY runs_by_role ON @extschema@.runs IS
  'Row-level security: members of the role that created a run (created_by) see and change it; groupml_admin members see and change all runs. A role dropped or renamed since leaves its runs to groupml_admin.';
GRANT SELECT, UPDATE, DELETE ON @extschema@.runs TO groupml_admin;

-- models
ALTER TABLE @extschema@.models ENABLE ROW LEVEL SECURITY;
CREATE POLICY models_of_visible_runs ON @extschema@.models
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) models.run_id));
COMMENT ON POLICY models_of_visible_runs ON @extschema@.models IS
  'Row-level security: models follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.models TO groupml_admin;

-- trials
ALTER TABLE @extschema@.trials ENABLE ROW LEVEL SECURITY;
CREATE POLICY trials_of_visible_runs ON @extschema@.trials
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) trials.run_id));
COMMENT ON POLICY trials_of_visible_runs ON @extschema@.trials IS
  'Row-level security: trials follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.trials TO groupml_admin;

-- grouped_runs
ALTER TABLE @extschema@.grouped_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY grouped_runs_of_visible_runs ON @extschema@.grouped_runs
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) grouped_runs.run_id));
COMMENT ON POLICY grouped_runs_of_visible_runs ON @extschema@.grouped_runs IS
  'Row-level security: executor records follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.grouped_runs TO groupml_admin;

-- run_epochs
ALTER TABLE @extschema@.run_epochs ENABLE ROW LEVEL SECURITY;
CREATE POLICY run_epochs_of_visible_runs ON @extschema@.run_epochs
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) run_epochs.run_id));
COMMENT ON POLICY run_epochs_of_visible_runs ON @extschema@.run_epochs IS
  'Row-level security: epoch rows follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.run_epochs TO groupml_admin;

-- run_schedule
ALTER TABLE @extschema@.run_schedule ENABLE ROW LEVEL SECURITY;
CREATE POLICY run_schedule_of_visible_runs ON @extschema@.run_schedule
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) run_schedule.run_id));
COMMENT ON POLICY run_schedule_of_visible_runs ON @extschema@.run_schedule IS
  'Row-level security: schedule rows follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.run_schedule TO groupml_admin;

-- run_checkpoints
ALTER TABLE @extschema@.run_checkpoints ENABLE ROW LEVEL SECURITY;
CREATE POLICY run_checkpoints_of_visible_runs ON @extschema@.run_checkpoints
    USING (EXISTS (SELECT 1 FROM @extschema@.runs r WHERE r.run_id OPERATOR(pg_catalog.=) run_checkpoints.run_id));
COMMENT ON POLICY run_checkpoints_of_visible_runs ON @extschema@.run_checkpoints IS
  'Row-level security: checkpoints follow their run: a role sees and changes the rows of the groupml.runs rows it sees (its own runs, those of roles it is a member of; groupml_admin: all).';
GRANT SELECT ON @extschema@.run_checkpoints TO groupml_admin;

-- snapshots
ALTER TABLE @extschema@.snapshots ENABLE ROW LEVEL SECURITY;
CREATE POLICY snapshots_by_role ON @extschema@.snapshots
    USING (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(created_by)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY snapshots_by_role ON @extschema@.snapshots IS
  'Row-level security: members of the role that built a snapshot (created_by) see and change it; groupml_admin members see and drop all snapshots. Their groups and blocks are further limited to roles that may read the source (see snapshot_blocks).';
GRANT SELECT, DELETE ON @extschema@.snapshots TO groupml_admin;

-- snapshot_groups
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

-- snapshot_blocks
ALTER TABLE @extschema@.snapshot_blocks ENABLE ROW LEVEL SECURITY;
CREATE POLICY snapshot_blocks_of_readable_groups ON @extschema@.snapshot_blocks
    USING (EXISTS (SELECT 1 FROM @extschema@.snapshot_groups g WHERE g.snapshot_id OPERATOR(pg_catalog.=) snapshot_blocks.snapshot_id
                                                        AND g.group_no OPERATOR(pg_catalog.=) snapshot_blocks.group_no));
COMMENT ON POLICY snapshot_blocks_of_readable_groups ON @extschema@.snapshot_blocks IS
  'Row-level security: packed row blocks hold the source''s rows and follow their group: a role sees and writes the blocks of the groupml.snapshot_groups rows it sees (only with SELECT on every column of the source the snapshot holds).';
GRANT SELECT ON @extschema@.snapshot_blocks TO groupml_admin;

-- the views: row-level security applies as the caller, not as the views' owner
ALTER VIEW @extschema@.best_models SET (security_invoker = true);
GRANT SELECT ON @extschema@.best_models TO groupml_admin;
ALTER VIEW @extschema@.progress SET (security_invoker = true);
GRANT SELECT ON @extschema@.progress TO groupml_admin;
ALTER VIEW @extschema@.run_trial_info SET (security_invoker = true);
GRANT SELECT ON @extschema@.run_trial_info TO groupml_admin;
-- learn_over_groups: the model argument is the enum model_family instead of text, so that
-- postgres_fdw can ship the aggregate to foreign partitions (a text literal's collation blocked it).
-- Calls with a literal ('logistic') or a text value keep working (implicit cast from text).
DROP AGGREGATE @extschema@.learn_over_groups(float8[], float8, text, jsonb);
DROP AGGREGATE @extschema@.learn_over_groups(float8[], float8, text, jsonb, jsonb);
DROP AGGREGATE @extschema@.learn_over_groups(float8[], boolean, text, jsonb);
DROP AGGREGATE @extschema@.learn_over_groups(float8[], boolean, text, jsonb, jsonb);
DROP FUNCTION @extschema@._learn_step(bigint, float8[], float8, text, jsonb);
DROP FUNCTION @extschema@._learn_step(bigint, float8[], float8, text, jsonb, jsonb);
DROP FUNCTION @extschema@._learn_step(bigint, float8[], boolean, text, jsonb);
DROP FUNCTION @extschema@._learn_step(bigint, float8[], boolean, text, jsonb, jsonb);

-- model_family: the `model` argument of learn_over_groups. An enum has no collation, so a call
-- with a literal model name ('logistic') has no collation-dependent input and postgres_fdw can
-- ship the aggregate to the server of each foreign partition; a text literal's collation blocks it.
CREATE TYPE @extschema@.model_family AS ENUM
    ('lightgbm', 'lightgbm_regressor', 'linear', 'logistic', 'mlp', 'mlp_regressor', 'svm');
COMMENT ON TYPE @extschema@.model_family IS
  'The model families of learn_over_groups (its model argument). A text value converts implicitly. See groupml.help(''model_family'').';

-- A text value (a column, a text parameter) converts to model_family where a function takes one,
-- through a function that names the known families when the value is not one; a literal such
-- as 'logistic' is read as a model_family directly.
CREATE FUNCTION @extschema@._model_family(name text)
RETURNS @extschema@.model_family LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.aggregate import model_family; return model_family(name)
$python$;
COMMENT ON FUNCTION @extschema@._model_family(text) IS
  'Internal: the cast from text to groupml.model_family; an unknown name is an ERROR that lists the known families.';
CREATE CAST (text AS @extschema@.model_family) WITH FUNCTION @extschema@._model_family(text) AS IMPLICIT;
COMMENT ON CAST (text AS @extschema@.model_family) IS
  'Lets learn_over_groups take the model family as a text value (a column, a text parameter) too.';

-- Transition functions of learn_over_groups, one per aggregate signature: each buffers one row in
-- backend memory under the handle it returns (the aggregate state).
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model @extschema@.model_family, search jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, None)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, @extschema@.model_family, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label).';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model @extschema@.model_family, search jsonb, options jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, options)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, @extschema@.model_family, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label, with options).';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model @extschema@.model_family, search jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, None)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, @extschema@.model_family, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label).';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model @extschema@.model_family, search jsonb, options jsonb)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.aggregate import step; return step(state, features, label, model, search, options)
$python$;
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, @extschema@.model_family, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label, with options).';

-- learn_over_groups: train and select one model per GROUP BY group.
CREATE AGGREGATE @extschema@.learn_over_groups(features float8[], label float8, model @extschema@.model_family, search jsonb) (
    SFUNC = @extschema@._learn_step, STYPE = bigint,
    FINALFUNC = @extschema@._learn_final, FINALFUNC_MODIFY = READ_WRITE
);
CREATE AGGREGATE @extschema@.learn_over_groups(features float8[], label float8, model @extschema@.model_family, search jsonb, options jsonb) (
    SFUNC = @extschema@._learn_step, STYPE = bigint,
    FINALFUNC = @extschema@._learn_final, FINALFUNC_MODIFY = READ_WRITE
);
CREATE AGGREGATE @extschema@.learn_over_groups(features float8[], label boolean, model @extschema@.model_family, search jsonb) (
    SFUNC = @extschema@._learn_step, STYPE = bigint,
    FINALFUNC = @extschema@._learn_final, FINALFUNC_MODIFY = READ_WRITE
);
CREATE AGGREGATE @extschema@.learn_over_groups(features float8[], label boolean, model @extschema@.model_family, search jsonb, options jsonb) (
    SFUNC = @extschema@._learn_step, STYPE = bigint,
    FINALFUNC = @extschema@._learn_final, FINALFUNC_MODIFY = READ_WRITE
);
COMMENT ON AGGREGATE @extschema@.learn_over_groups(float8[], float8, @extschema@.model_family, jsonb) IS
  'Train every configuration of the search spec on the group''s rows (all together, one data pass per iteration), select the best on a deterministic validation holdout, return a groupml.fit. See groupml.help(''learn_over_groups'').';
COMMENT ON AGGREGATE @extschema@.learn_over_groups(float8[], float8, @extschema@.model_family, jsonb, jsonb) IS
  'learn_over_groups with options: {"validation_fraction": 0.2, "metric": "accuracy", "seed": 0}. See groupml.help(''learn_over_groups'').';
COMMENT ON AGGREGATE @extschema@.learn_over_groups(float8[], boolean, @extschema@.model_family, jsonb) IS
  'learn_over_groups for a boolean label (true = 1). See groupml.help(''learn_over_groups'').';
COMMENT ON AGGREGATE @extschema@.learn_over_groups(float8[], boolean, @extschema@.model_family, jsonb, jsonb) IS
  'learn_over_groups for a boolean label, with options. See groupml.help(''learn_over_groups'').';
-- progress: a run 'running' that no session trains (its call was cancelled or its backend
-- ended) reads 'cancelled', and its elapsed time stops
CREATE OR REPLACE VIEW @extschema@.progress WITH (security_invoker = true) AS
SELECT r.run_id,
       -- a run 'running' that no session trains was left by a call that is gone (a cancel whose
       -- own update was lost, a terminated backend, a crash): it reads 'cancelled' at once, and
       -- the next train_groups call stores that
       CASE WHEN r.status = 'running' AND h.pid IS NULL THEN 'cancelled' ELSE r.status END AS status,
       r.source, r.family, g.strategy, g.workers, r.n_groups, r.groups_done,
       g.epochs_done, g.passes_done, g.last_event, r.started_at,
       coalesce(r.finished_at,
                CASE WHEN r.status = 'running' AND h.pid IS NULL
                     THEN coalesce(g.updated_at, r.started_at + r.seconds * interval '1 second', r.started_at) END,
                clock_timestamp()) - r.started_at AS elapsed,
       g.updated_at,
       h.pid AS trained_by
FROM @extschema@.runs r LEFT JOIN @extschema@.grouped_runs g USING (run_id)
     -- the session training the run now: it holds the run's advisory lock (class 'gmlr')
     LEFT JOIN LATERAL (SELECT min(l.pid) AS pid FROM pg_catalog.pg_locks l
                        WHERE l.locktype = 'advisory' AND l.granted AND l.classid::int8 = 1735224434
                          AND l.objid::int8 = (r.run_id & 4294967295) AND l.objsubid = 2
                          AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                            WHERE d.datname = pg_catalog.current_database())) h ON true;
COMMENT ON VIEW @extschema@.progress IS
  'Live progress of train_groups runs (committed as groups and epochs finish; query it from another session). trained_by: the pid of the session training the run now. status: running, done, failed or cancelled; a run whose call is gone (cancel, statement_timeout, terminate, crash) reads cancelled at once and resumes with train_groups(..., run_id => its id).';
-- report: a self-contained HTML page of a run (learning curves, score histogram, chosen
-- configurations, time per phase); scheduler_report: the multi-tenant scheduler's page
CREATE FUNCTION @extschema@.report(run_id bigint, format text DEFAULT 'html')
RETURNS text LANGUAGE plpython3u STABLE
AS $python$
from groupml.udf.report import run_report; return run_report(run_id, format)
$python$;
COMMENT ON FUNCTION @extschema@.report(bigint, text) IS
  'A self-contained HTML page (inline SVG, nothing loaded from elsewhere) of a train_groups run: per-configuration learning curves, the per-group validation score histogram, the chosen configuration per group and time per phase; format ''json'' returns the data it is drawn from. Reads the catalog as the caller (row-level security applies). See groupml.help(''report'').';
CREATE FUNCTION @extschema@.scheduler_report(format text DEFAULT 'html')
RETURNS text LANGUAGE plpython3u STABLE
AS $python$
from groupml.udf.report import scheduler_report; return scheduler_report(format)
$python$;
COMMENT ON FUNCTION @extschema@.scheduler_report(text) IS
  'A self-contained HTML page (inline SVG) of the multi-tenant scheduler: its loss curve over the steps, each job''s best quality so far and the steps; format ''json'' returns the data. Reads groupml.scheduler_log as the caller (row-level security applies). See groupml.help(''scheduler_report'').';
