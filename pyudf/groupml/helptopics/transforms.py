"""Help topics: raw feature columns, the stored transform, predict_row."""

TOPICS = {}

TOPICS["transforms"] = """\
Raw columns in: train_groups on feature columns of any common type.
  Feature column types (from the catalog; a domain counts as its base type):
    smallint, integer, bigint, real, double precision, numeric  -> the number
    boolean                                                     -> 0/1
    text, varchar, char, enum types                             -> one-hot categories
    date                        -> epoch_days, month (1-12), dow (0 = Sunday)
    timestamp, timestamptz      -> the same plus hour (timestamptz taken in UTC)
  Other types (jsonb, arrays, uuid, interval, ...) are refused (0A000) naming the column.
  When: a transform is used when a feature column is not numeric or boolean, or with
  options '{"transform": true}' (or an object of settings); '{"transform": false}' keeps
  numeric features as given (rows with a NULL feature are then skipped, as before).
  Settings (options.transform):
    max_categories      (default 20) one-hot columns per category column: the most frequent
                        values (ties by value); the rest share one 'other' column.
    scale               auto (default) | standard | none. standard: numeric columns and date
                        parts as (x - mean) / std. auto: standard for the MLP families only
                        (LightGBM's trees need no scaling; the GLMs standardise inside their
                        solvers).
    missing_indicators  (default true) a 0/1 column per feature column that had NULLs.
  Fitting: once per run, on every row of the source with a non-NULL label, all groups
  together (validation rows included), so every group's model has the same inputs. A NULL is
  imputed with the mean (numbers, date parts) or the most frequent value (booleans,
  categories). The transform is stored in groupml.runs.transform and inside every model of the
  run (model bytes of kind 'xform': the model, then the transform's JSON); a resumed run keeps the
  transform of its first attempt. (fit).n_features is the number of encoded columns.
  Scoring: groupml.predict_row(fit, row) / predict_proba_row(fit, row) take the same raw
  columns. A NULL is imputed as in training; a category value not among the kept ones --
  one never seen in training included -- sets the 'other' column (all one-hot columns 0 when
  the column had no more than max_categories values); an infinite date counts as NULL.
  groupml.predict(fit, float8[]) still takes the encoded vector.
  Not with options.snapshot (a run with a transform builds its own snapshot).
  Example:
    CALL groupml.train_groups('orders', ARRAY['country'], ARRAY['amount', 'device', 'vip', 'day'],
                              'returned', 'logistic', '{}', '{"transform": {"max_categories": 10}}');
    SELECT o.id, groupml.predict_row(m.fit, o)
    FROM orders o JOIN groupml.models m ON m.run_id = 1 AND m.group_key->>'country' = o.country;
"""

TOPICS["predict_row"] = """\
groupml.predict_row(fit groupml.fit, columns jsonb | anyelement) -> float8
  The prediction for one row of raw columns, with a fit whose model stores a transform
  (train_groups on raw feature columns, help('transforms')): class 0/1 or the value.
  columns is the row itself -- a table row (predict_row(m.fit, c)), a subquery's row, or an
  anonymous ROW(a, b, ...) holding the training columns in their order -- or a jsonb object
  keyed by the training columns (to_jsonb(c), jsonb_build_object(...)); extra columns are
  ignored. PL/Python takes no record argument: the row form is a SQL function passing
  to_jsonb(row) on (STABLE; the jsonb form is IMMUTABLE).
  Errors: a fit trained without a transform (22023: use predict); a training column missing
  from the row (42703, listing them); a value of the wrong kind, e.g. text for a number
  (42804); NaN or infinite numbers (22000), as predict.
  Example:
    SELECT c.id, groupml.predict_row(m.fit, c) FROM orders c
    JOIN groupml.models m ON m.run_id = 1 AND m.group_key->>'country' = c.country;
    SELECT groupml.predict_row(m.fit, ROW(49.5, 'phone', true, DATE '2024-05-06')) FROM ...;
"""

TOPICS["predict_proba_row"] = """\
groupml.predict_proba_row(fit groupml.fit, columns jsonb | anyelement) -> float8
  Probability of class 1 for one row of raw columns, for classifiers; columns as for
  help('predict_row').
"""
