"""Help topics of the foundation objects (learn_over_groups, predict, train_groups, ...)."""

from __future__ import annotations

TOPICS = {}

TOPICS["learn_over_groups"] = """\
groupml.learn_over_groups(features float8[], label float8|boolean, model groupml.model_family, search jsonb
                          [, options jsonb])
  Aggregate. Trains every configuration of `search` on the rows of each GROUP BY group and
  selects the best on a deterministic validation holdout; returns a groupml.fit. GLM
  configurations (logistic, linear, svm) train together: one data pass per solver iteration
  serves all of them. MLP and LightGBM configurations train one after another.

  model    a literal such as 'logistic' or any text value (see groupml.help('model_family')):
           'logistic' (binary label 0/1), 'linear' (least squares / ridge), 'svm' (linear, label 0/1),
           'mlp' / 'mlp_regressor' (PyTorch), 'lightgbm' / 'lightgbm_regressor'  (see groupml.help('models'))
  search   hyperparameters to try; lists form a grid, e.g. '{"l2": [0, 0.001, 0.01], "class_weight": [null, "balanced"]}'
           or random search: '{"method": "random", "n_trials": 20, "seed": 7,
                               "space": {"l2": {"loguniform": [1e-6, 1]}}}'        (see groupml.help('search'))
  options  {"validation_fraction": 0.2, "metric": "accuracy", "seed": 0, "progress": false, "threads": 2}
           metric: accuracy | auc | logloss (logistic, mlp, lightgbm), accuracy | auc (svm),
                   rmse | mae | r2 (linear and the *_regressor models)
           threads: groups trained at the same time for this backend, default min(CPUs, 4); with a
                   hashed GROUP BY that many helper processes (spawned during the scan, after
                   20,000 rows) train the groups, largest first, from the first final call on
                   (BLAS one thread each); results do not depend on it;
                   1 = one after another in the backend.
                   Groups finished ahead wait in memory until PostgreSQL asks for them (about
                   10 kB each): for hundreds of thousands of groups use 1, or train_groups

  Rows with a NULL, NaN or infinite label or feature are skipped and counted (fit.n_skipped).
  Feature arrays of different lengths (or empty, or nested) are an ERROR, raised when the group's
  rows are complete (the per-row step only buffers them, in C). Groups too small to split, or with one
  class only, return a fit whose status says so (too_small, single_class) and no model.
  model/search/options are read from the first row of each group.

  Example:
    SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, f3], clicked, 'logistic',
           '{"l2": [0, 0.001, 0.01, 0.1], "class_weight": [null, "balanced"]}') AS fit
    FROM clicks GROUP BY country;
    -- readable: SELECT country, (fit).status, (fit).params, (fit).score FROM country_models;
"""

TOPICS["model_family"] = """\
groupml.model_family  (enum: the model argument of learn_over_groups)
  lightgbm | lightgbm_regressor | linear | logistic | mlp | mlp_regressor | svm
  Write the family as a literal ('logistic'), or pass a text value (a column, a text parameter):
  it converts implicitly, and an unknown name is an ERROR that lists the families. An unknown
  literal is PostgreSQL's enum ERROR: invalid input value for enum groupml.model_family.
  Being an enum (no collation), a literal model lets postgres_fdw run the whole aggregate on the
  server of each foreign partition (see groupml.help('scaleout')).
"""

TOPICS["scaleout"] = """\
learn_over_groups where the rows live: Citus and postgres_fdw shards  (docs/scaleout.md)
  Citus, GROUP BY the distribution column (groupml installed on every node: CREATE EXTENSION
  groupml CASCADE on the coordinator reaches the workers): each worker runs the aggregate on its
  shards; only the fits travel to the coordinator.
    SELECT country, groupml.learn_over_groups(ARRAY[f1, f2], clicked, 'logistic', '{}')
    FROM clicks GROUP BY country;          -- clicks distributed by country
  Citus, any other grouping: correct fits, but the aggregate's input rows travel to the coordinator.
  postgres_fdw: a table partitioned by the group column, foreign partitions on servers with
  groupml and OPTIONS (extensions 'groupml', async_capable 'true'):
    SET enable_partitionwise_aggregate = on;
    SELECT country, groupml.learn_over_groups(ARRAY[f1, f2], clicked, 'logistic', '{}')
    FROM clicks GROUP BY country;          -- EXPLAIN VERBOSE: Remote SQL ... GROUP BY 1
  train_groups on a Citus distributed table trains on the nodes holding the shards:
    CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2'], 'clicked', 'logistic',
                              '{"l2": [0.01, 0.1]}');
  One worker per shard, on the node of one of its active placements, reached as the calling role
  (host/port from pg_dist_node; a non-superuser never uses the server's password file). Each
  shard's rows are snapshotted and trained there; a group held by one shard trains whole on its
  node, a GLM group spread over shards trains by partial sums per pass (its validation rows go to
  the coordinator), an MLP group spread over shards by model hopping (its configurations' states
  hop between the nodes; help('mop')), a LightGBM group spread over nodes by LightGBM's
  data-parallel mode, one rank per node reading that node's rows (ranks listen on the nodes'
  shard-map addresses). strategy 'auto', 'grouped' or (MLP) 'mop'; workers is the shard count.
  explain_train_groups shows a 'nodes' row per shard (node, table, groups, rows, bytes moved, the
  hop plan) and a 'gather' row. A node down: ERROR 08001
  naming it; resume with run_id once it is back; a replicated shard is read from another
  placement. The same on a table partitioned over postgres_fdw servers (each server trains its
  partitions; connections with the calling role's user mapping, which must give a password for
  a non-superuser); explain_train_groups there shows a row per partition (server, partition).
"""

TOPICS["fit"] = """\
groupml.fit  (composite type returned by learn_over_groups, stored in groupml.models)
  status text        ok | too_small | single_class | no_rows | failed (no configuration scored)
  family text        logistic | linear | svm | mlp | mlp_regressor | lightgbm | lightgbm_regressor
  params jsonb       hyperparameters of the selected configuration
  metric text        the validation metric used for the selection; score float8 its value
  metrics jsonb      all validation metrics of the selected model
  n_train, n_validation, n_skipped bigint; n_features integer
  trials jsonb       every configuration tried: params, score, epochs, status, stop_reason
  message text       why status is not ok; for an ok GLM fit, a warning when its selected
                     configuration stopped at max_iter (or stalled) before tol, or met tol at zero
                     weights (features or labels far too small in scale); else NULL
  model bytea        the model in groupml's safe format (numpy arrays + JSON header, never pickle)
"""

TOPICS["search"] = """\
search specification (jsonb), used by learn_over_groups and train_groups
  Shorthand grid: every key is a hyperparameter; a list is a grid dimension, a scalar is fixed:
     '{"l2": [0, 0.001, 0.01], "class_weight": [null, "balanced"], "max_iter": 200}'
  Full form:
     '{"method": "grid" | "random" | "tpe" | "successive_halving" | "hyperband" | "asha" | "pbt",
       "space": {"l2": {"loguniform": [1e-6, 1]}, "solver": "gd", "lr": {"uniform": [0.01, 1]},
                 "max_iter": {"int": [50, 200]}, "class_weight": {"choice": [null, "balanced"]}},
       "n_trials": 20, "seed": 7, "early_stopping": {"method": "bandit", "epsilon": 0.5, "partial_iters": 10}}'
  Hyperparameters of logistic / linear / svm: l2 (>= 0), l1 (>= 0), fit_intercept, class_weight
  (null | 'balanced'), solver ('auto' | 'lbfgs' | 'gd' | 'sgd'), lr (> 0, for gd/sgd), max_iter, tol,
  batch_size (sgd), loss (svm: 'squared_hinge' | 'hinge'). The full schema is in docs/search.md.
  The solvers standardize the columns internally (models keep the user's scale); l2 and l1 apply
  to the standardized weights, so a column's unit does not change the fit. solver 'auto' is gd when
  l1 > 0 or loss is 'hinge', else lbfgs; giving lr then is an ERROR (22023): name solver 'gd'.
  Choosing the model family too (TuPAQ's ChoiceP): a "model" dimension, each item a family or a
  sub-space naming its family, e.g.
     '{"method": "random", "n_trials": 20, "space": {"model": {"choice": [
        {"model": "logistic", "l2": {"loguniform": [1e-4, 1]}},
        {"model": "lightgbm", "num_leaves": {"int": [7, 63]}}]}}}'
  Families of the call's task only, selected on one metric (options' metric, else the call's
  family's default); the fit is the chosen family's. One backend only (train_groups workers => 1).
  Population based training (method "pbt", models mlp and mlp_regressor): see help('pbt').
"""

TOPICS["predict"] = """\
groupml.predict(model_set text, features float8[], group_key anycompatible, on_missing text DEFAULT 'error') -> float8
  With a named model set (help('model_sets')): the row is scored with its group's model in the
  set's active version. group_key is the group column, or ROW(a, b, ...) for several, matched
  by typed value (help('scoring')). PARALLEL UNSAFE (it reads the set's models); for a whole
  table use groupml.predict_table.
groupml.predict(fit groupml.fit, features float8[]) -> float8
  The prediction for one row: class 0/1 for a classifier (logistic, svm, mlp, lightgbm), the
  value for a regressor (linear, mlp_regressor, lightgbm_regressor).
  features is one row (a two-dimensional array of several rows is an ERROR: use predict_batch).
  One call per row: fine for a few rows; to score a whole table, predict_batch per group is
  several times faster (docs/performance.md).
  Errors: wrong length (2202E); NULL, NaN or infinite features (22000); features so large the
  score is not a finite number, e.g. near 1e308 (22003, naming the row; the same in every
  scoring function and family). That holds for a classifier's score of +-infinity too, and for
  an overflow inside a model whose output still looks finite: after an overflow even the
  score's sign means nothing, so it gives no class and no probability.
  Example:
    SELECT c.id, groupml.predict(m.fit, ARRAY[c.f1, c.f2, c.f3])
    FROM clicks c JOIN country_models m USING (country);
"""

TOPICS["predict_proba"] = """\
groupml.predict_proba(model_set text, features float8[], group_key anycompatible, on_missing text DEFAULT 'error') -> float8
  With a named model set (help('model_sets')): the probability of class 1 of the row with its
  group's classifier in the set's active version, routed as predict with a model set (group_key
  the group column or ROW(a, b, ...), matched by typed value; help('scoring')) and with its
  errors: unknown set (42704), a set the caller may not read (42501), a key of another number of
  columns or type (42804), features of another length (2202E), a group without a model under
  on_missing 'error' (22000). PARALLEL UNSAFE (it reads the set's models); for a whole table use
  groupml.predict_proba_table.
  Example: SELECT id, groupml.predict_proba('churn_by_country', ARRAY[f1, f2], country) FROM clicks;
groupml.predict_proba(fit groupml.fit, features float8[]) -> float8
  Probability of class 1 for one row, for classifiers (logistic, mlp, lightgbm); svm and the
  regressors give 0A000 (use predict).
"""

TOPICS["predict_batch"] = """\
groupml.predict_batch(fit groupml.fit, features float8[][]) -> float8[]
  Predictions for many rows in one call: the form for scoring a table (one call per group
  instead of one per row). Aggregate the rows first, then join the models:
    SELECT b.country, b.ids, groupml.predict_batch(m.fit, b.x)
    FROM (SELECT country, array_agg(id ORDER BY id) AS ids,
                 array_agg(ARRAY[f1, f2, f3] ORDER BY id) AS x
          FROM clicks GROUP BY country) b
    JOIN country_models m USING (country);
  For models in a table of your own, ALTER TABLE ... ALTER COLUMN fit SET STORAGE EXTERNAL
  before filling it spares decompressing the model on every call (groupml.models does this).
  Rows are scored 4096 at a time with a cancel check between. The array itself takes memory:
  PL/Python hands it over as Python lists, about 60 bytes per value while it is converted (a
  million rows of 60 features peaked at 3.4 GB), released when the call returns: keep calls
  to a few hundred thousand values' worth of rows (split very large groups, e.g. by id ranges).
"""

TOPICS["predict_proba_batch"] = """\
groupml.predict_proba_batch(fit groupml.fit, features float8[][]) -> float8[]
  Probabilities of class 1 for many rows in one call, for classifiers (logistic, mlp, lightgbm).
"""

TOPICS["train_groups"] = """\
CALL groupml.train_groups(source regclass, group_by text[], features text[], label text, model text,
                          search jsonb DEFAULT '{}', options jsonb DEFAULT '{}', INOUT run_id bigint DEFAULT NULL,
                          workers integer DEFAULT 1, strategy text DEFAULT 'auto', model_set text DEFAULT NULL)
  model_set => 'name' makes the run a new version of that named model set, ready and active in the
  transaction that marks the run done (help('model_sets')).
  Trains and selects one model per group of a table and stores them in the catalog
  (groupml.models, groupml.trials, groupml.runs). Each group is committed when done, so a
  crash or cancel loses at most the groups in flight; CALL again with the same run_id to resume.
  A run is trained by one call at a time: resuming a run another session is still training
  fails (SQLSTATE 55006, naming that session's pid) and changes nothing. A resume needs those of
  the TimeZone, IntervalStyle and extra_float_digits the run started under (runs.key_settings)
  that its group keys are written in (timestamptz, interval and float keys); under others it is
  refused (22023) with the SET commands to use.
  Call it outside an explicit transaction block (BEGIN ... COMMIT) so it can commit as it goes.
  It writes groupml's catalog: the extension's owner runs it, or a role an administrator has
  granted the catalog rights it needs (a role without them gets 42501 naming them, before
  anything is written). The calling role needs SELECT on the columns it reads (a table grant
  or column grants). The source is resolved once, on the caller's search_path, and kept
  schema-qualified (runs.source): worker backends and later resumes read exactly that relation.
  features: column names of any common type -- numbers, booleans, text and enum categories,
  dates and timestamps, with NULLs: they are encoded by a transform stored with every model
  (options "transform"; help('transforms')), and groupml.predict_row scores raw rows.
  options: those of learn_over_groups except "threads", plus "processes": groups trained at the
  same time by helper processes of this backend (plain Python processes it spawns and ends; they
  never connect to the database; BLAS one thread each). Default min(CPUs, 4) for tables of
  20,000 rows or more, else 1 (= in the backend, one after another). Cancel ends the helpers.
  workers   1 (default): this backend and its helper processes. p > 1, 0 (the planner picks the
            count) or a strategy other than 'auto' run the planner-driven executor over worker
            backends: see groupml.help('grouped').
  strategy  auto | grouped | gtp | mtp | dp (help('grouped')).
  Example:
    CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', 'logistic',
                              '{"l2": [0, 0.001, 0.01]}');
    SELECT * FROM groupml.best_models WHERE run_id = 1;
"""

TOPICS["best_models"] = """\
groupml.best_models  (view): the catalog without model bytes: model_id, run_id, group_key, status,
  family, params, metric, score, metrics, n_train, n_validation, n_skipped, created_at.
  The models themselves are in groupml.models (column fit).
"""

TOPICS["catalog"] = """groupml's catalog (tables written by train_groups; no grants to PUBLIC -- see README "Who may train").
Row-level security: a role sees and changes its own runs' rows (runs.created_by) and those of roles
it is a member of; groupml_admin sees all; snapshot groups and blocks also need SELECT on the source:
  runs              one row per train_groups run: source, group_by, features, label, family, search,
                    options, status (running | done | failed | cancelled: a cancelled call, or one
                    whose session ended, stored by the next call), groups_done / n_groups,
                    started_at / finished_at, seconds (the call's wall time), estimated_seconds (the
                    planner's estimate of the training) beside train_seconds (its measured time: one
                    backend, all its groups' searches summed; with workers, the training after the
                    snapshot of the call that finished the run, while the estimate is the first
                    call's whole plan), created_by, key_settings (the settings its group keys are
                    written in)
  models            one row per (run, group): group_key jsonb, fit groupml.fit (the selected model)
  trials            every configuration tried per (run, group): params, status, stop_reason, score,
                    epoch_scores, metrics (passes, seconds, iterations, is_best), parent_trial_id and
                    forked_at_epoch (population based training, help('pbt'))
  grouped_runs      the executor's record of a run with workers: strategy, workers, snapshot_id, plan
                    (placement, estimates, unit costs), epochs_done (epoch blocks committed),
                    passes_done (data passes of the groups finished), last_event
  run_schedule      the executor's visit log: every task (pass, worker, shard, rows, trials, started,
                    finished, kind)
  run_epochs        per (run, group, epoch block, trial): epoch, score and the search's decision
  run_checkpoints   the last committed search and trainer state of a group in training (resume)
  snapshots, snapshot_groups, snapshot_blocks   training snapshots (help('snapshots'))
  cost_runs         measured training runs the planner's cost model is fitted on (help('cost_runs'))
  worker_endpoints  worker backends (help('worker_endpoints'))
  Views: best_models, run_trial_info, trial_lineage, progress. Tenancy tables: help('tenancy').
"""

TOPICS["version"] = """\
groupml.version() -> text: the groupml package version this backend loaded, its location, numpy and scipy versions.
"""

TOPICS["help"] = """\
groupml.help() lists the topics; groupml.help('<topic>') shows one.
"""


def _models_topic() -> str:
    from ..learners import LEARNER_FAMILIES

    lines = ["model families (the `model` argument of learn_over_groups and train_groups) and their",
             "hyperparameters with defaults; put any of them in the search spec:"]
    for name in sorted(LEARNER_FAMILIES):
        fam = LEARNER_FAMILIES[name]
        defaults = ", ".join(f"{k}={v!r}" for k, v in sorted(fam.defaults.items()))
        lines.append(f"  {name:<20} ({fam.kind}) {defaults}")
    lines.append("A learner's own seed goes inside \"space\" ({\"space\": {\"seed\": 5}}): a top-level \"seed\" seeds")
    lines.append("the search. Parameters a solver does not use (lr under lbfgs, momentum under adam) make no new model.")
    lines.append("Details: docs/learners.md (GLMs), docs/learners_mlp_lgbm.md (mlp, lightgbm).")
    return "\n".join(lines) + "\n"


TOPICS["models"] = _models_topic()
