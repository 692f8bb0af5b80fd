"""Help topics of named model sets and scoring with them."""

from __future__ import annotations

TOPICS = {}

TOPICS["model_sets"] = """\
Named model sets: versions of per-group models, one active, scored by name (docs/models.md).
  CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2'], 'clicked', 'logistic',
                            model_set => 'churn_by_country');   -- a new version, active when the run is done
  SELECT groupml.publish(42, 'churn_by_country');              -- or publish an existing run
  SELECT groupml.predict('churn_by_country', ARRAY[f1, f2], country) FROM clicks;
  SELECT groupml.rollback_model_set('churn_by_country');       -- back to the version before
Tables (row-level security: the set's owner's members and groupml_admin see and change a set;
roles it was granted to with grant_model_set see it and score with it):
  groupml.model_sets          name, owner, readers (roles granted to), active_version, created_at
  groupml.model_set_versions  version_id, set_name, version, run_id, status (pending | ready), group_by,
                              group_types (at training), features, n_features, family, summary
                              (groups, with_model, metric, score_min / median / max / mean),
                              created_by, created_at, ready_at
  groupml.model_set_models    version_id, group_key jsonb, key_value (the typed key, record_send form), fit
A version's models are copied from its run when it becomes ready: dropping the run keeps the set.
Writing sets needs table rights an administrator grants (INSERT, UPDATE, DELETE on the three tables,
USAGE on groupml.model_set_versions_version_id_seq); reading them is open to every role, limited by
row-level security. pg_dump keeps the sets (extension configuration tables).
"""

TOPICS["publish"] = """\
groupml.publish(run_id bigint, model_set text) -> integer
  Makes a train_groups run a new version of the named model set (created, owned by the caller,
  if it does not exist); returns the version number. A finished run's version is ready and
  active at once; a running or interrupted run's version is pending and becomes ready and
  active in the transaction that marks the run done. The group columns' types are read from the
  run's source now and recorded with the version.
  Errors: unknown or invisible run (42704), a set of another owner (42501), missing table rights (42501).
  Example: SELECT groupml.publish(42, 'churn_by_country');
"""

TOPICS["activate_model_set"] = """\
groupml.activate_model_set(model_set text, version integer) -> integer
  Makes a ready version the one predict and predict_table use; returns the version active before.
  A pending version (its run not done) is refused (55000). Only the owner's members and groupml_admin.
  Example: SELECT groupml.activate_model_set('churn_by_country', 3);
"""

TOPICS["rollback_model_set"] = """\
groupml.rollback_model_set(model_set text) -> integer
  Activates the newest ready version older than the active one; returns it (55000 if there is none).
  Example: SELECT groupml.rollback_model_set('churn_by_country');
"""

TOPICS["drop_model_set_version"] = """\
groupml.drop_model_set_version(model_set text, version integer) -> boolean
  Deletes a version and its models; true if it existed. The active version is refused (55006):
  activate another first. The run it came from stays.
  Example: SELECT groupml.drop_model_set_version('churn_by_country', 1);
"""

TOPICS["drop_model_set"] = """\
groupml.drop_model_set(model_set text) -> boolean
  Deletes a set with all its versions and models; true if it existed. The runs stay.
"""

TOPICS["grant_model_set"] = """\
groupml.grant_model_set(model_set text, role name) -> boolean
  Lets the members of a role see the set and score with it (predict, predict_table); they cannot
  change it. Only the owner's members and groupml_admin may grant. True if the role was not a
  reader yet. Taken back with revoke_model_set.
  Example: SELECT groupml.grant_model_set('churn_by_country', 'analysts');
"""

TOPICS["revoke_model_set"] = """\
groupml.revoke_model_set(model_set text, role name) -> boolean
  Takes back grant_model_set; true if the role was a reader. A session that scored with the set
  is refused from its next statement on (42501).
"""

TOPICS["predict_table"] = """\
groupml.predict_table(model_set text, source regclass, key_column text, features text[], group_by text[] DEFAULT NULL, on_missing text DEFAULT 'error')
  -> TABLE (row_key bigint, prediction float8)
  Scores every row of a table or view with its group's model in the set's active version, in one
  call: the rows are aggregated group by group into packed float8 arrays and each group is scored
  with numpy (one Python call per group, not per row). key_column is an integer column that
  identifies a row (returned as row_key); features name the same columns, in the same order, as
  at training; group_by names the source's group columns (default: the version's). A row with a
  NULL, NaN or infinite feature gets a NULL prediction; a row with a NULL key_column is skipped;
  a group without a model is an ERROR or NULL predictions (on_missing). The output is a class
  (classifiers) or a value (regressors), as predict.
  A group's features travel as one array: about 67 million values (rows x features) a group.
  Groups of classes (0/1) come back from Python as compact text, so a classifier's table scores
  fastest; a regressor's values are written at full precision (slower per row).
  Example:
    INSERT INTO scores SELECT * FROM groupml.predict_table('churn_by_country', 'clicks', 'id', ARRAY['f1', 'f2']);
"""

TOPICS["predict_proba_table"] = """\
groupml.predict_proba_table(model_set text, source regclass, key_column text, features text[], group_by text[] DEFAULT NULL, on_missing text DEFAULT 'error')
  -> TABLE (row_key bigint, probability float8)
  As predict_table, with the probability of class 1 of every row (classifiers: logistic, mlp,
  lightgbm; a set of svm or regressors gives 0A000). A row with a NULL, NaN or infinite feature
  gets a NULL probability; on_missing as predict_table.
  Example:
    SELECT * FROM groupml.predict_proba_table('churn_by_country', 'clicks', 'id', ARRAY['f1', 'f2'])
    WHERE probability > 0.9;
"""

TOPICS["scoring"] = """\
Scoring with a named model set (docs/models.md, section Scoring).
  per row:    SELECT groupml.predict('churn_by_country', ARRAY[f1, f2], country) FROM clicks;
              SELECT groupml.predict('churn_by_device', ARRAY[f1, f2], ROW(country, device)) FROM clicks;
  per table:  SELECT * FROM groupml.predict_table('churn_by_country', 'clicks', 'id', ARRAY['f1', 'f2']);
  probability of class 1: groupml.predict_proba(model_set, ...) and groupml.predict_proba_table(...),
              the same arguments.
  Keys match by typed value: the key reaches groupml in binary form, so no DateStyle, TimeZone or
  extra_float_digits changes it. smallint/integer/bigint keys compare with each other, as do
  text/varchar/char, and real/double precision; every other type must be the type the column had
  at training (else 42804, with the cast to write). A NULL key value finds the group of NULLs.
  on_missing => 'error' (default) refuses a row whose group has no model; 'null' gives it NULL.
  The active version is read once per statement; its models once per backend. A new active version
  is used from the next statement on. predict with a model set is PARALLEL UNSAFE (it reads the
  catalog); predict_table scores group by group in its own query.
  Errors: unknown set (42704), a set the caller may not read (42501), no active version yet (55000),
  a key of another number of columns or type (42804), features of another length (2202E),
  NULL model_set (22004), a group without a model under on_missing 'error' (22000).
"""

TOPICS["retrain_model_set"] = """\
CALL groupml.retrain_model_set(model_set text, margin float8 DEFAULT 0, workers integer DEFAULT 1)
  Trains the set again with the arguments of its active version's run (source, group_by,
  features, label, model, search, options) on the source's rows now, as a new version. When
  its run is done, the new version is made ready and becomes active only if its mean
  validation score over the groups is no worse than the active version's by more than margin
  (in the metric's units, e.g. 0.01 accuracy); otherwise the active version stays.
  model_set_versions.decision says which, and why (also a NOTICE). Commits as it goes, like
  train_groups (not inside a transaction block). Only the owner's members and groupml_admin.
  Example: CALL groupml.retrain_model_set('churn_by_country', margin => 0.005);
"""

TOPICS["schedule_retraining"] = """\
groupml.schedule_retraining(model_set text, schedule text, margin float8 DEFAULT 0, database text DEFAULT current_database(), job_name text DEFAULT NULL) -> bigint
  One call sets up a pg_cron job that runs CALL groupml.retrain_model_set(model_set, margin => ...)
  on a cron schedule, in `database` (default this one), as the calling role; returns the jobid.
  job_name defaults to groupml_retrain_<set>; calling again with the same name updates the job.
  pg_cron must be installed (where it runs: its cron.database_name; call this from there with
  database => the set's database). Remove the job with SELECT cron.unschedule(jobid).
  Example: SELECT groupml.schedule_retraining('churn_by_country', '0 3 * * *', margin => 0.005);
"""
