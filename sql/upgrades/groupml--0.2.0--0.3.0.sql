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

-- Named model sets: versions of per-group models published from train_groups runs, routed
-- scoring by typed group key (predict(model_set, features, group_key)), the table scorer
-- (predict_table), row-level security (owner, readers, groupml_admin). train_groups takes
-- model_set => name.

DROP PROCEDURE @extschema@.train_groups(regclass, text[], text[], text, text, jsonb, jsonb, bigint, integer, text);

CREATE PROCEDURE @extschema@.train_groups(
    source regclass, group_by text[], features text[], label text, model text,
    search jsonb DEFAULT '{}', options jsonb DEFAULT '{}', INOUT run_id bigint DEFAULT NULL,
    workers integer DEFAULT 1, strategy text DEFAULT 'auto', model_set text DEFAULT NULL)
LANGUAGE plpython3u
AS $python$
from groupml.udf.train import train_groups; return train_groups(source, group_by, features, label, model, search, options, run_id, workers, strategy, model_set)
$python$;
COMMENT ON PROCEDURE @extschema@.train_groups(regclass, text[], text[], text, text, jsonb, jsonb, bigint, integer, text, text) IS
  'Train and select one model per group of a table and store them in groupml.models (committed group by group). workers => p > 1 (or an explicit strategy) runs the planner-driven executor over p worker backends: auto | grouped | gtp | mtp | dp. Pass an existing run_id to resume an interrupted run. model_set => name makes the run a new version of that model set, activated when the run finishes (groupml.help(''model_sets'')). See groupml.help(''train_groups'') and groupml.help(''grouped'').';

CREATE TABLE @extschema@.model_sets (
    name            text PRIMARY KEY CHECK (name OPERATOR(pg_catalog.<>) ''),
    owner           name NOT NULL DEFAULT current_user,
    readers         name[] NOT NULL DEFAULT '{}',   -- roles granted scoring (groupml.grant_model_set)
    active_version  integer,                        -- the version predict uses; NULL until one is ready
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE @extschema@.model_sets IS
  'Named, versioned sets of per-group models (groupml.publish, train_groups(model_set => ...)); predict(model_set, features, group_key) scores with the active version.';
ALTER TABLE @extschema@.model_sets ENABLE ROW LEVEL SECURITY;
CREATE POLICY model_sets_by_owner ON @extschema@.model_sets
    USING (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(owner)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'));
COMMENT ON POLICY model_sets_by_owner ON @extschema@.model_sets IS
  'Row-level security: members of the role that owns a model set see and change it; groupml_admin members see and change all sets. A role dropped or renamed since leaves its sets to groupml_admin.';
CREATE POLICY model_sets_for_readers ON @extschema@.model_sets FOR SELECT
    USING (EXISTS (SELECT 1 FROM pg_catalog.unnest(readers) AS r(role)
                   WHERE pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(r.role)), 'MEMBER')));
COMMENT ON POLICY model_sets_for_readers ON @extschema@.model_sets IS
  'Row-level security: members of a role the owner granted the set to (groupml.grant_model_set) see it, to score with it; they cannot change it.';
GRANT SELECT ON @extschema@.model_sets TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.model_sets', '');

CREATE TABLE @extschema@.model_set_versions (
    version_id    bigserial PRIMARY KEY,             -- never reused: keys the scorers' caches
    set_name      text NOT NULL REFERENCES @extschema@.model_sets (name) ON DELETE CASCADE ON UPDATE CASCADE,
    version       integer NOT NULL,
    run_id        bigint REFERENCES @extschema@.runs (run_id) ON DELETE SET NULL,
    status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'ready')),
    group_by      text[] NOT NULL,                   -- the group columns, in key order
    group_types   text[] NOT NULL,                   -- their types at training (format_type)
    features      text[] NOT NULL,
    n_features    integer NOT NULL,
    family        text NOT NULL,
    summary       jsonb,                             -- groups, groups with a model, metric, score quantiles
    margin        float8,                            -- NULL: active when ready; else only if no worse by this
    decision      text,                              -- whether it was activated when ready, and why
    created_by    name NOT NULL DEFAULT current_user,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    ready_at      timestamptz,
    UNIQUE (set_name, version)
);
COMMENT ON TABLE @extschema@.model_set_versions IS
  'One row per version of a model set: the run it was published from, its group columns and their types, features, family and validation summary; pending until its run is done, then ready and activated (a retrained version only if its validation score is no worse than the active one''s by margin; decision says why).';
ALTER TABLE @extschema@.model_set_versions ENABLE ROW LEVEL SECURITY;
CREATE POLICY model_set_versions_by_owner ON @extschema@.model_set_versions
    USING (EXISTS (SELECT 1 FROM @extschema@.model_sets s WHERE s.name OPERATOR(pg_catalog.=) model_set_versions.set_name
                   AND (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(s.owner)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))));
COMMENT ON POLICY model_set_versions_by_owner ON @extschema@.model_set_versions IS
  'Row-level security: versions follow their set: its owner''s members and groupml_admin see and change them.';
CREATE POLICY model_set_versions_for_readers ON @extschema@.model_set_versions FOR SELECT
    USING (EXISTS (SELECT 1 FROM @extschema@.model_sets s WHERE s.name OPERATOR(pg_catalog.=) model_set_versions.set_name));
COMMENT ON POLICY model_set_versions_for_readers ON @extschema@.model_set_versions IS
  'Row-level security: a role that sees a model set (its owner, a reader it was granted to, groupml_admin) sees its versions.';
GRANT SELECT ON @extschema@.model_set_versions TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.model_set_versions', '');
SELECT pg_catalog.pg_extension_config_dump('@extschema@.model_set_versions_version_id_seq', '');

CREATE TABLE @extschema@.model_set_models (
    version_id    bigint NOT NULL REFERENCES @extschema@.model_set_versions (version_id) ON DELETE CASCADE,
    group_key     jsonb NOT NULL,                    -- as in groupml.models
    key_value     bytea NOT NULL,                    -- the typed key: record_send of the group columns' values
    fit           @extschema@.fit NOT NULL,
    PRIMARY KEY (version_id, group_key)
);
ALTER TABLE @extschema@.model_set_models ALTER COLUMN fit SET STORAGE EXTERNAL;
COMMENT ON TABLE @extschema@.model_set_models IS
  'The per-group models of each model set version, copied from the run when the version became ready (a version outlives its run), with each group''s key in its training types.';
ALTER TABLE @extschema@.model_set_models ENABLE ROW LEVEL SECURITY;
CREATE POLICY model_set_models_by_owner ON @extschema@.model_set_models
    USING (EXISTS (SELECT 1 FROM @extschema@.model_set_versions v JOIN @extschema@.model_sets s ON s.name OPERATOR(pg_catalog.=) v.set_name
                   WHERE v.version_id OPERATOR(pg_catalog.=) model_set_models.version_id
                   AND (pg_catalog.pg_has_role(pg_catalog.to_regrole(pg_catalog.quote_ident(s.owner)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER'))));
COMMENT ON POLICY model_set_models_by_owner ON @extschema@.model_set_models IS
  'Row-level security: models follow their set: its owner''s members and groupml_admin see and change them.';
CREATE POLICY model_set_models_for_readers ON @extschema@.model_set_models FOR SELECT
    USING (EXISTS (SELECT 1 FROM @extschema@.model_set_versions v WHERE v.version_id OPERATOR(pg_catalog.=) model_set_models.version_id));
COMMENT ON POLICY model_set_models_for_readers ON @extschema@.model_set_models IS
  'Row-level security: a role that sees a model set''s version (its owner, a reader it was granted to, groupml_admin) sees its models, to score with them.';
GRANT SELECT ON @extschema@.model_set_models TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('@extschema@.model_set_models', '');

-- Whether a model set of this name exists, whoever owns it: predict tells a set the caller may
-- not read (42501) from one that does not exist (42704). It reads only groupml.model_sets.
CREATE FUNCTION @extschema@._model_set_exists(model_set text)
RETURNS boolean LANGUAGE plpython3u STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $python$
from groupml.udf.modelsets import model_set_exists; return model_set_exists(model_set)
$python$;
COMMENT ON FUNCTION @extschema@._model_set_exists(text) IS
  'Internal (predict, publish): whether a model set of this name exists, also one the caller may not see, so a refusal can say 42501 rather than 42704.';

CREATE FUNCTION @extschema@.publish(run_id bigint, model_set text)
RETURNS integer LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import publish; return publish(run_id, model_set)
$python$;
COMMENT ON FUNCTION @extschema@.publish(bigint, text) IS
  'Make a train_groups run a new version of a named model set (created on first use, owned by the caller); returns the version number. A finished run''s version is ready and active at once; an unfinished run''s becomes ready and active in the transaction that marks the run done.';

CREATE FUNCTION @extschema@.activate_model_set(model_set text, version integer)
RETURNS integer LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import activate_model_set; return activate_model_set(model_set, version)
$python$;
COMMENT ON FUNCTION @extschema@.activate_model_set(text, integer) IS
  'Make a ready version of a model set the one predict uses; returns the version that was active before.';

CREATE FUNCTION @extschema@.rollback_model_set(model_set text)
RETURNS integer LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import rollback_model_set; return rollback_model_set(model_set)
$python$;
COMMENT ON FUNCTION @extschema@.rollback_model_set(text) IS
  'Activate the newest ready version of a model set older than its active one; returns the version now active.';

CREATE FUNCTION @extschema@.drop_model_set_version(model_set text, version integer)
RETURNS boolean LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import drop_model_set_version; return drop_model_set_version(model_set, version)
$python$;
COMMENT ON FUNCTION @extschema@.drop_model_set_version(text, integer) IS
  'Delete a version of a model set and its models; refused (55006) for the active version. True if it existed.';

CREATE FUNCTION @extschema@.drop_model_set(model_set text)
RETURNS boolean LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import drop_model_set; return drop_model_set(model_set)
$python$;
COMMENT ON FUNCTION @extschema@.drop_model_set(text) IS
  'Delete a model set with all its versions and models (the runs they came from stay). True if it existed.';

CREATE FUNCTION @extschema@.grant_model_set(model_set text, role name)
RETURNS boolean LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import grant_model_set; return grant_model_set(model_set, role)
$python$;
COMMENT ON FUNCTION @extschema@.grant_model_set(text, name) IS
  'Let the members of a role see a model set and score with it (predict, predict_table); only its owner''s members and groupml_admin may. True if the role was not a reader yet.';

CREATE FUNCTION @extschema@.revoke_model_set(model_set text, role name)
RETURNS boolean LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import revoke_model_set; return revoke_model_set(model_set, role)
$python$;
COMMENT ON FUNCTION @extschema@.revoke_model_set(text, name) IS
  'Take back what grant_model_set gave a role. True if the role was a reader.';

CREATE PROCEDURE @extschema@.retrain_model_set(model_set text, margin float8 DEFAULT 0, workers integer DEFAULT 1)
LANGUAGE plpython3u
AS $python$
from groupml.udf.retrain import retrain_model_set; return retrain_model_set(model_set, margin, workers)
$python$;
COMMENT ON PROCEDURE @extschema@.retrain_model_set(text, float8, integer) IS
  'Train a model set again with the arguments of its active version''s run, on the source''s rows now; the new version becomes active only if its mean validation score is no worse than the active version''s by more than margin (model_set_versions.decision says why). Commits as it goes, like train_groups.';

CREATE FUNCTION @extschema@.schedule_retraining(model_set text, schedule text, margin float8 DEFAULT 0,
                                                database text DEFAULT current_database(), job_name text DEFAULT NULL)
RETURNS bigint LANGUAGE plpython3u VOLATILE
AS $python$
from groupml.udf.modelsets import schedule_retraining; return schedule_retraining(model_set, schedule, margin, database, job_name)
$python$;
COMMENT ON FUNCTION @extschema@.schedule_retraining(text, text, float8, text, text) IS
  'Let pg_cron CALL groupml.retrain_model_set(model_set, margin) on a cron schedule (creates or updates the job job_name, default groupml_retrain_<set>; returns its jobid). Needs pg_cron; only the set''s owner''s members and groupml_admin.';

-- Scores one row with its group's model in a model set's active version. The version's models
-- are read by a statement on first use in a backend (and the active version checked once per
-- statement), which a parallel query cannot run: PARALLEL UNSAFE.
CREATE FUNCTION @extschema@._predict_in_set(model_set text, features float8[], group_key bytea, on_missing text)
RETURNS float8 LANGUAGE plpython3u STABLE PARALLEL UNSAFE
AS $python$
from groupml.udf.modelsets import predict_in_set; return predict_in_set(model_set, features, group_key, on_missing)
$python$;
COMMENT ON FUNCTION @extschema@._predict_in_set(text, float8[], bytea, text) IS
  'Internal (predict with a model set): one row scored with the model of its group, the group given as record_send of its key values.';

-- The group key reaches Python in its binary form (record_send of its values, each with its
-- type), so keys match by typed value whatever DateStyle, TimeZone or extra_float_digits are.
CREATE FUNCTION @extschema@.predict(model_set text, features float8[], group_key anycompatible, on_missing text DEFAULT 'error')
RETURNS float8 LANGUAGE sql STABLE PARALLEL UNSAFE
AS $sql$
SELECT @extschema@._predict_in_set(model_set, features, pg_catalog.record_send(ROW(group_key)), on_missing)
$sql$;
COMMENT ON FUNCTION @extschema@.predict(text, float8[], anycompatible, text) IS
  'Predict one row with its group''s model in a model set''s active version: group_key is the value of the group column, or ROW(a, b, ...) for several. on_missing: error | null, for a group the version has no model of.';

CREATE FUNCTION @extschema@._predict_table_sql(model_set text, source regclass, key_column text, features text[], group_by text[], on_missing text)
RETURNS text LANGUAGE plpython3u STABLE PARALLEL UNSAFE
AS $python$
from groupml.udf.modelsets import predict_table_sql; return predict_table_sql(model_set, source, key_column, features, group_by, on_missing)
$python$;
COMMENT ON FUNCTION @extschema@._predict_table_sql(text, regclass, text, text[], text[], text) IS
  'Internal (predict_table): checks the request, loads the active version''s models into this backend and returns the query that scores the source group by group.';

-- Called by predict_table's query once per group, with the models predict_table loaded into
-- this backend's cache: PARALLEL RESTRICTED (the leader has that cache; a worker would not).
CREATE FUNCTION @extschema@._score_group(version_id bigint, group_key bytea, on_missing text, VARIADIC columns bytea[])
RETURNS float8[] LANGUAGE plpython3u STABLE PARALLEL RESTRICTED
AS $python$
from groupml.udf.modelsets import score_group; from groupml.udf import take_args; return score_group(*take_args(globals(), "version_id", "group_key", "on_missing", "columns"))
$python$;
COMMENT ON FUNCTION @extschema@._score_group(bigint, bytea, text, bytea[]) IS
  'Internal (predict_table): one group''s rows scored with its model of a model set version: each feature column given as array_send of its float8 values.';

CREATE FUNCTION @extschema@.predict_table(model_set text, source regclass, key_column text, features text[], group_by text[] DEFAULT NULL, on_missing text DEFAULT 'error')
RETURNS TABLE (row_key bigint, prediction float8) LANGUAGE plpgsql STABLE PARALLEL UNSAFE
AS $plpgsql$
BEGIN RETURN QUERY EXECUTE @extschema@._predict_table_sql(model_set, source, key_column, features, group_by, on_missing); END
$plpgsql$;
COMMENT ON FUNCTION @extschema@.predict_table(text, regclass, text, text[], text[], text) IS
  'Score every row of a table or view with its group''s model in a model set''s active version: (row_key, prediction) per row, row_key the integer key_column. Rows are read group by group as packed arrays and scored with numpy.';

CREATE FUNCTION @extschema@._model_sets_run_done()
RETURNS trigger LANGUAGE plpython3u
AS $python$
from groupml.udf.modelsets import run_done_trigger; return run_done_trigger(TD)
$python$;
COMMENT ON FUNCTION @extschema@._model_sets_run_done() IS
  'Internal (trigger on groupml.runs): when a run is marked done, its pending model set versions get the run''s models and become active, in the same transaction.';

CREATE TRIGGER model_sets_on_run_done AFTER UPDATE OF status ON @extschema@.runs
    FOR EACH ROW WHEN (NEW.status = 'done' AND OLD.status IS DISTINCT FROM 'done')
    EXECUTE FUNCTION @extschema@._model_sets_run_done();
COMMENT ON TRIGGER model_sets_on_run_done ON @extschema@.runs IS
  'A run marked done makes its pending model set versions ready and active in that transaction (groupml.publish, train_groups(model_set => ...)).';
-- Model hopper parallelism: train_groups(..., strategy => 'mop'); replay a configuration
-- from the run's visit log
COMMENT ON PROCEDURE @extschema@.train_groups(regclass, text[], text[], text, text, jsonb, jsonb, bigint, integer, text, text) IS
  'Train and select one model per group of a table and store them in groupml.models (committed group by group). workers => p > 1 (or an explicit strategy) runs the planner-driven executor over p worker backends: auto | grouped | gtp | mtp | dp | mop (model hopper parallelism: MLP configurations hop over p partitions of each group). Pass an existing run_id to resume an interrupted run. model_set => name makes the run a new version of that model set, activated when the run finishes (groupml.help(''model_sets'')). See groupml.help(''train_groups''), groupml.help(''grouped'') and groupml.help(''mop'').';
CREATE FUNCTION @extschema@.replay(run_id bigint, trial_id integer, group_key jsonb DEFAULT NULL) RETURNS bytea
LANGUAGE plpython3u
AS $python$
from groupml.udf.mop import replay; return replay(run_id, trial_id, group_key)
$python$;
COMMENT ON FUNCTION @extschema@.replay(bigint, integer, jsonb) IS
  'Retrain one configuration (trial) of a train_groups run whose MLP groups were split into partitions (strategy => ''mop'') sequentially in this backend, from the run''s visit log in groupml.run_schedule, and return its model bytes: the same bytes as the run''s model of that trial on the same host. Needs the run''s snapshot (options.keep_snapshot). group_key may be NULL when the trial is in one group.';

-- Raw columns in: train_groups fits a transform on raw feature columns (numbers, booleans,
-- text and enum categories, dates and timestamps, NULLs) and stores it with every model;
-- predict_row scores a row of the same raw columns.
ALTER TABLE @extschema@.runs ADD COLUMN transform jsonb;
COMMENT ON COLUMN @extschema@.runs.transform IS
  'The raw-column transform of the run (imputation, one-hot categories, date parts, scaling) as JSON, fitted once on the source and stored with every model of the run; NULL when the features were used as given. See groupml.help(''transforms'').';

-- predict_row / predict_proba_row: one row of raw columns (jsonb, or a row) with a fit that stores a transform
CREATE FUNCTION @extschema@.predict_row(fit @extschema@.fit, columns jsonb)
RETURNS float8 LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict_row; return predict_row(fit, columns)
$python$;
COMMENT ON FUNCTION @extschema@.predict_row(@extschema@.fit, jsonb) IS
  'Predict one row of raw columns with a fit whose model stores a transform (train_groups on raw feature columns): the class (0/1) for classifiers, the value for regressors. columns: a JSON object keyed by the training columns (extra keys ignored), e.g. to_jsonb(c). The transform imputes NULLs and sends unseen categories to the other column. See groupml.help(''transforms'').';

CREATE FUNCTION @extschema@.predict_row(fit @extschema@.fit, columns anyelement)
RETURNS float8 LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $sql$ SELECT @extschema@.predict_row(fit, pg_catalog.to_jsonb(columns)) $sql$;
COMMENT ON FUNCTION @extschema@.predict_row(@extschema@.fit, anyelement) IS
  'Predict one row of raw columns with a fit whose model stores a transform (train_groups on raw feature columns): the class (0/1) for classifiers, the value for regressors. columns: a row -- a table row such as c, or ROW(a, b, ...) with the training columns in their order. See groupml.help(''transforms'').';

CREATE FUNCTION @extschema@.predict_proba_row(fit @extschema@.fit, columns jsonb)
RETURNS float8 LANGUAGE plpython3u IMMUTABLE STRICT PARALLEL SAFE
AS $python$
from groupml.udf.predict import predict_proba_row; return predict_proba_row(fit, columns)
$python$;
COMMENT ON FUNCTION @extschema@.predict_proba_row(@extschema@.fit, jsonb) IS
  'Probability of class 1 for one row of raw columns with a fit whose model stores a transform (train_groups on raw feature columns), for classifiers. columns: a JSON object keyed by the training columns (extra keys ignored), e.g. to_jsonb(c). The transform imputes NULLs and sends unseen categories to the other column. See groupml.help(''transforms'').';

CREATE FUNCTION @extschema@.predict_proba_row(fit @extschema@.fit, columns anyelement)
RETURNS float8 LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $sql$ SELECT @extschema@.predict_proba_row(fit, pg_catalog.to_jsonb(columns)) $sql$;
COMMENT ON FUNCTION @extschema@.predict_proba_row(@extschema@.fit, anyelement) IS
  'Probability of class 1 for one row of raw columns with a fit whose model stores a transform (train_groups on raw feature columns), for classifiers. columns: a row -- a table row such as c, or ROW(a, b, ...) with the training columns in their order. See groupml.help(''transforms'').';

-- GLMs under model hopper parallelism: strategy => 'mop' trains logistic, linear and svm by
-- mini-batch SGD; replay retrains their configurations
COMMENT ON PROCEDURE @extschema@.train_groups(regclass, text[], text[], text, text, jsonb, jsonb, bigint, integer, text, text) IS
  'Train and select one model per group of a table and store them in groupml.models (committed group by group). workers => p > 1 (or an explicit strategy) runs the planner-driven executor over p worker backends: auto | grouped | gtp | mtp | dp | mop (model hopper parallelism: MLP configurations, or GLM configurations trained by mini-batch SGD, hop over p partitions of each group). Pass an existing run_id to resume an interrupted run. model_set => name makes the run a new version of that model set, activated when the run finishes (groupml.help(''model_sets'')). See groupml.help(''train_groups''), groupml.help(''grouped'') and groupml.help(''mop'').';

COMMENT ON FUNCTION @extschema@.replay(bigint, integer, jsonb) IS
  'Retrain one configuration (trial) of a train_groups run whose MLP groups were split into partitions, or whose MLP or GLM configurations hopped over partitions (strategy => ''mop''), sequentially in this backend, from the run''s visit log in groupml.run_schedule, and return its model bytes: the same bytes as the run''s model of that trial on the same host. Needs the run''s snapshot (options.keep_snapshot). group_key may be NULL when the trial is in one group.';

-- Steering a running model hopper run from another session: groupml.run_requests and
-- mop_add_trial / mop_stop_trial / mop_add_workers
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
CREATE FUNCTION @extschema@.mop_add_trial(run_id bigint, params jsonb) RETURNS integer
LANGUAGE plpython3u
AS $python$
from groupml.udf.mop import mop_add_trial; return mop_add_trial(run_id, params)
$python$;
COMMENT ON FUNCTION @extschema@.mop_add_trial(bigint, jsonb) IS
  'Ask a model hopper run (strategy => ''mop'') that is training or resumable to add one MLP configuration (params: the learner''s hyperparameters, validated now): it starts at the run''s next epoch boundary in every group still training and visits every partition once per epoch. Returns the new trial''s id (numbered from 1000000). The request is recorded in groupml.run_requests. See groupml.help(''mop_add_trial'').';
CREATE FUNCTION @extschema@.mop_stop_trial(run_id bigint, trial_id integer) RETURNS bigint
LANGUAGE plpython3u
AS $python$
from groupml.udf.mop import mop_stop_trial; return mop_stop_trial(run_id, trial_id)
$python$;
COMMENT ON FUNCTION @extschema@.mop_stop_trial(bigint, integer) IS
  'Ask a model hopper run (strategy => ''mop'') that is training or resumable to stop one trial: it finishes its current epoch block and is stored with status ''stopped''. Returns the request_id of groupml.run_requests. See groupml.help(''mop_stop_trial'').';
CREATE FUNCTION @extschema@.mop_add_workers(run_id bigint, n integer DEFAULT 1) RETURNS bigint
LANGUAGE plpython3u
AS $python$
from groupml.udf.mop import mop_add_workers; return mop_add_workers(run_id, n)
$python$;
COMMENT ON FUNCTION @extschema@.mop_add_workers(bigint, integer) IS
  'Ask a model hopper run (strategy => ''mop'') that is training or resumable to add n worker backends (elasticity): each new worker holds a copy of every partition and the randomized scheduler gives it units from the next sub-epoch on. Returns the request_id of groupml.run_requests. See groupml.help(''mop_add_workers'').';

-- Population based training (search method 'pbt'): a forked trial's parent and fork epoch on
-- groupml.trials, and the groupml.trial_lineage view
ALTER TABLE @extschema@.trials ADD COLUMN parent_trial_id integer;
ALTER TABLE @extschema@.trials ADD COLUMN forked_at_epoch integer;
COMMENT ON COLUMN @extschema@.trials.parent_trial_id IS
  'Population based training (search method ''pbt''): the trial of the same run and group whose training state this trial continued (exploit); NULL for a trial trained from its own initial state. See groupml.trial_lineage.';
COMMENT ON COLUMN @extschema@.trials.forked_at_epoch IS
  'Population based training: the epoch count of the parent when this trial was forked from it; the trial''s epoch_scores up to it are the parent''s. NULL when parent_trial_id is NULL.';

CREATE VIEW @extschema@.trial_lineage WITH (security_invoker = true) AS
SELECT c.run_id, c.group_key, c.trial_id, c.parent_trial_id, c.forked_at_epoch,
       p.params AS parent_params, c.params,
       (SELECT pg_catalog.jsonb_object_agg(e.key, e.value)
          FROM pg_catalog.jsonb_each(c.params) AS e(key, value)
         WHERE (p.params OPERATOR(pg_catalog.->) e.key) IS DISTINCT FROM e.value) AS explored,
       c.status, c.stop_reason, c.score
FROM @extschema@.trials c
JOIN @extschema@.trials p ON p.run_id = c.run_id AND p.group_key = c.group_key AND p.trial_id = c.parent_trial_id;
COMMENT ON VIEW @extschema@.trial_lineage IS
  'Population based training (search method ''pbt''): one row per forked trial -- its parent trial, the parent''s epoch count at the fork, both trials'' params and the params the fork explored (perturbed or resampled). Follow parent_trial_id back to a trial with no parent for a whole lineage.';
GRANT SELECT ON @extschema@.trial_lineage TO groupml_admin;

-- Model sets: faster table scoring (feature columns packed as the arrays' own bytes, NULL features
-- read as NaN instead of filtered aggregates, each group's predictions returned as a float8[]
-- literal), predict_proba with a model set and predict_proba_table
DROP FUNCTION @extschema@._score_group(bigint, bytea, text, bytea[]);
DROP FUNCTION @extschema@._predict_table_sql(text, regclass, text, text[], text[], text);

CREATE FUNCTION @extschema@._predict_table_sql(model_set text, source regclass, key_column text, features text[], group_by text[], on_missing text, proba boolean)
RETURNS text LANGUAGE plpython3u STABLE PARALLEL UNSAFE
AS $python$
from groupml.udf.modelsets import predict_table_sql; return predict_table_sql(model_set, source, key_column, features, group_by, on_missing, proba)
$python$;
COMMENT ON FUNCTION @extschema@._predict_table_sql(text, regclass, text, text[], text[], text, boolean) IS
  'Internal (predict_table, predict_proba_table): checks the request, loads the active version''s models into this backend and returns the query that scores the source group by group (proba: probabilities of class 1).';

-- The bytes of a float8[] as they are in memory (header, dimensions, then the values in the
-- server's byte order), copied into a bytea by the server's own byteasend (which returns a copy
-- of its argument): predict_table's query packs each group's rows of features with it, one
-- memcpy instead of array_send's call per value. Any float8[] is a valid input; the output is the caller's own
-- data.
CREATE FUNCTION @extschema@._float8_bytes(float8[])
RETURNS bytea LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE
AS 'byteasend';
COMMENT ON FUNCTION @extschema@._float8_bytes(float8[]) IS
  'Internal (predict_table): the bytes of a float8[] as the server holds it in memory (ArrayType header, dimensions, values in native byte order), read by numpy without a conversion per value.';

-- Called by predict_table's query once per group, with the models predict_table loaded into
-- this backend's cache: PARALLEL RESTRICTED (the leader has that cache; a worker would not).
-- Returns the predictions as a float8[] literal, which the query casts: PL/Python would turn a
-- returned list into float8[] through each value's text, one value at a time.
CREATE FUNCTION @extschema@._score_block(version_id bigint, group_key bytea, on_missing text, proba boolean, rows bytea)
RETURNS text LANGUAGE plpython3u STABLE PARALLEL RESTRICTED
AS $python$
from groupml.udf.modelsets import score_block; return score_block(version_id, group_key, on_missing, proba, rows)
$python$;
COMMENT ON FUNCTION @extschema@._score_block(bigint, bytea, text, boolean, bytea) IS
  'Internal (predict_table, predict_proba_table): one group''s rows scored with its model of a model set version (proba: the probability of class 1), the rows given as the bytes of their float8[][] of features (_float8_bytes; a NULL is read as NaN); the predictions as a float8[] literal.';

CREATE OR REPLACE FUNCTION @extschema@.predict_table(model_set text, source regclass, key_column text, features text[], group_by text[] DEFAULT NULL, on_missing text DEFAULT 'error')
RETURNS TABLE (row_key bigint, prediction float8) LANGUAGE plpgsql STABLE PARALLEL UNSAFE
AS $plpgsql$
BEGIN RETURN QUERY EXECUTE @extschema@._predict_table_sql(model_set, source, key_column, features, group_by, on_missing, false); END
$plpgsql$;
COMMENT ON FUNCTION @extschema@.predict_table(text, regclass, text, text[], text[], text) IS
  'Score every row of a table or view with its group''s model in a model set''s active version: (row_key, prediction) per row, row_key the integer key_column. Rows are read group by group as packed arrays and scored with numpy.';

CREATE FUNCTION @extschema@.predict_proba_table(model_set text, source regclass, key_column text, features text[], group_by text[] DEFAULT NULL, on_missing text DEFAULT 'error')
RETURNS TABLE (row_key bigint, probability float8) LANGUAGE plpgsql STABLE PARALLEL UNSAFE
AS $plpgsql$
BEGIN RETURN QUERY EXECUTE @extschema@._predict_table_sql(model_set, source, key_column, features, group_by, on_missing, true); END
$plpgsql$;
COMMENT ON FUNCTION @extschema@.predict_proba_table(text, regclass, text, text[], text[], text) IS
  'Probability of class 1 for every row of a table or view with its group''s classifier in a model set''s active version: (row_key, probability) per row, row_key the integer key_column. Rows are read group by group as packed arrays and scored with numpy.';

-- As _predict_in_set: PARALLEL UNSAFE (the version's models are read by a statement on first
-- use in a backend, and the active version checked once per statement).
CREATE FUNCTION @extschema@._predict_proba_in_set(model_set text, features float8[], group_key bytea, on_missing text)
RETURNS float8 LANGUAGE plpython3u STABLE PARALLEL UNSAFE
AS $python$
from groupml.udf.modelsets import predict_proba_in_set; return predict_proba_in_set(model_set, features, group_key, on_missing)
$python$;
COMMENT ON FUNCTION @extschema@._predict_proba_in_set(text, float8[], bytea, text) IS
  'Internal (predict_proba with a model set): the probability of class 1 of one row with the model of its group, the group given as record_send of its key values.';

-- The group key reaches Python in its binary form, as for predict with a model set.
CREATE FUNCTION @extschema@.predict_proba(model_set text, features float8[], group_key anycompatible, on_missing text DEFAULT 'error')
RETURNS float8 LANGUAGE sql STABLE PARALLEL UNSAFE
AS $sql$
SELECT @extschema@._predict_proba_in_set(model_set, features, pg_catalog.record_send(ROW(group_key)), on_missing)
$sql$;
COMMENT ON FUNCTION @extschema@.predict_proba(text, float8[], anycompatible, text) IS
  'Probability of class 1 for one row with its group''s classifier in a model set''s active version: group_key is the value of the group column, or ROW(a, b, ...) for several. on_missing: error | null, for a group the version has no model of.';

-- learn_over_groups: the transition function in C (groupml.so). It buffers rows natively in
-- backend memory; the final function reads them with _learn_rows and _learn_buffers.
CREATE OR REPLACE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model @extschema@.model_family, search jsonb)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, @extschema@.model_family, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label), in C: buffers the row.';
CREATE OR REPLACE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model @extschema@.model_family, search jsonb, options jsonb)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, @extschema@.model_family, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label, with options), in C: buffers the row.';
CREATE OR REPLACE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model @extschema@.model_family, search jsonb)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, @extschema@.model_family, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label), in C: buffers the row.';
CREATE OR REPLACE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model @extschema@.model_family, search jsonb, options jsonb)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, @extschema@.model_family, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label, with options), in C: buffers the row.';

-- The packed rows of one learn_over_groups buffer, for the final function: native float8,
-- d features then the label per row. C (groupml.so).
CREATE FUNCTION @extschema@._learn_rows(handle bigint)
RETURNS bytea LANGUAGE C VOLATILE STRICT
AS 'MODULE_PATHNAME', 'groupml_learn_rows';
COMMENT ON FUNCTION @extschema@._learn_rows(bigint) IS
  'Internal: the rows buffered under a learn_over_groups handle in this backend, packed as native float8 (d features, then the label); NULL for an unknown handle; an error (2202E, 22000) for a buffer whose rows stopped at an empty, ragged or nested array.';

-- The live learn_over_groups buffers of this backend: what the final function reads besides
-- the rows (counts, the anomaly a row recorded, the first row's model, search and options).
CREATE FUNCTION @extschema@._learn_buffers(handle bigint DEFAULT NULL)
RETURNS TABLE(handle bigint, d integer, n_rows bigint, skipped bigint, anomaly text, found integer,
              stmt timestamptz, model text, search jsonb, options jsonb)
LANGUAGE C VOLATILE ROWS 100
AS 'MODULE_PATHNAME', 'groupml_learn_buffers';
COMMENT ON FUNCTION @extschema@._learn_buffers(bigint) IS
  'Internal: the learn_over_groups row buffers alive in this backend (only the given handle''s when one is given): features per row, rows, skipped rows, the first anomaly (empty, length with the length found, nested), the statement start, and the first row''s model, search and options.';

-- learn_over_groups: helper processes start during the scan (called by the C transition function).
CREATE FUNCTION @extschema@._learn_prestart(handle bigint)
RETURNS void LANGUAGE plpython3u VOLATILE STRICT
AS $python$
from groupml.udf.aggregate import prestart; return prestart(handle)
$python$;
COMMENT ON FUNCTION @extschema@._learn_prestart(bigint) IS
  'Internal: called by learn_over_groups'' transition function (C) once a hashed aggregate has buffered 20,000 rows; starts the helper processes that will train its groups, so their start overlaps the scan.';

-- train_groups' load: each group's rows packed by the C step of learn_over_groups (no model).
CREATE FUNCTION @extschema@._pack_step(state bigint, features float8[], label float8)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._pack_step(bigint, float8[], float8) IS
  'Internal: transition function of groupml._pack_rows, in C: buffers the row (features, then the label) as native float8; rows with a NULL are counted as skipped, not buffered.';
CREATE FUNCTION @extschema@._pack_shared(handle bigint)
RETURNS int8[] LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_pack_shared';
COMMENT ON FUNCTION @extschema@._pack_shared(bigint) IS
  'Internal: final function of groupml._pack_values and groupml._pack_rows, in C: writes the group''s rows (native float8, features then the label) to the transaction''s load arena, a memory file, and returns {fd, offset, bytes}; fd is the arena''s descriptor in this backend (-1 for a group without rows) until the transaction ends.';
CREATE AGGREGATE @extschema@._pack_rows(features float8[], label float8) (
    SFUNC = @extschema@._pack_step, STYPE = bigint,
    FINALFUNC = @extschema@._pack_shared, FINALFUNC_MODIFY = READ_WRITE
);
COMMENT ON AGGREGATE @extschema@._pack_rows(float8[], float8) IS
  'Internal (train_groups): the group''s rows as native float8, each row its features then its label, written to the load arena; returns {fd, offset, bytes} (groupml._pack_shared). A row with a NULL value is left out.';

-- train_groups' load: _pack_rows with a row's values as separate float8 arguments (no array per row).
CREATE FUNCTION @extschema@._pack_values_step(state bigint, VARIADIC "values" "any")
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_pack_step';
COMMENT ON FUNCTION @extschema@._pack_values_step(bigint, "any") IS
  'Internal: transition function of groupml._pack_values, in C: buffers the row (float8 features, then the label, as separate arguments) as native float8; a row with a NULL value is counted as skipped, not buffered.';
CREATE AGGREGATE @extschema@._pack_values(VARIADIC "values" "any") (
    SFUNC = @extschema@._pack_values_step, STYPE = bigint,
    FINALFUNC = @extschema@._pack_shared, FINALFUNC_MODIFY = READ_WRITE
);
COMMENT ON AGGREGATE @extschema@._pack_values("any") IS
  'Internal (train_groups): the group''s rows as native float8, each row its features then its label given as separate float8 arguments (at most 98 features), written to the load arena; returns {fd, offset, bytes} (groupml._pack_shared). A row with a NULL value is left out.';
CREATE FUNCTION @extschema@._pack_read(ref int8[])
RETURNS bytea LANGUAGE C VOLATILE STRICT
AS 'MODULE_PATHNAME', 'groupml_pack_read';
COMMENT ON FUNCTION @extschema@._pack_read(int8[]) IS
  'Internal: the bytes a reference of groupml._pack_values or groupml._pack_rows names ({fd, offset, bytes}), read from the load arena of the transaction that loaded them.';
