-- Transition function of groupml._pack_rows (train_groups' load): the C step of
-- learn_over_groups without a model, buffering each row natively under a handle.
CREATE FUNCTION @extschema@._pack_step(state bigint, features float8[], label float8)
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_learn_step';
COMMENT ON FUNCTION @extschema@._pack_step(bigint, float8[], float8) IS
  'Internal: transition function of groupml._pack_rows, in C: buffers the row (features, then the label) as native float8; rows with a NULL are counted as skipped, not buffered.';
