-- Transition functions of learn_over_groups, one per aggregate signature: C (groupml.so). Each
-- appends one row to its group's buffer in backend memory and returns the buffer's handle (the
-- aggregate state); it checks no user input: the final function raises what a row broke.
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model @extschema@.model_family, search jsonb)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, @extschema@.model_family, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label), in C: buffers the row.';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label float8, model @extschema@.model_family, search jsonb, options jsonb)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], float8, @extschema@.model_family, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (float8 label, with options), in C: buffers the row.';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model @extschema@.model_family, search jsonb)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, @extschema@.model_family, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label), in C: buffers the row.';
CREATE FUNCTION @extschema@._learn_step(state bigint, features float8[], label boolean, model @extschema@.model_family, search jsonb, options jsonb)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._learn_step(bigint, float8[], boolean, @extschema@.model_family, jsonb, jsonb) IS
  'Internal: transition function of groupml.learn_over_groups (boolean label, with options), in C: buffers the row.';
