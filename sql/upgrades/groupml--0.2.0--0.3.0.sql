-- groupml 0.2.0 -> 0.3.0 (ALTER EXTENSION groupml UPDATE). What changed in the catalog:
\echo Use "ALTER EXTENSION groupml UPDATE TO '0.3.0'" to load this file. \quit

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
