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
