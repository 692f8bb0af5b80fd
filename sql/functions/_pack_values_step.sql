-- Transition function of groupml._pack_values (train_groups' load), in C: appends one row,
-- given as separate float8 values (features, then the label), to its group's native buffer.
CREATE FUNCTION @extschema@._pack_values_step(state bigint, VARIADIC "values" "any")
RETURNS bigint LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_pack_step';
COMMENT ON FUNCTION @extschema@._pack_values_step(bigint, "any") IS
  'Internal: transition function of groupml._pack_values, in C: buffers the row (float8 features, then the label, as separate arguments) as native float8; a row with a NULL value is counted as skipped, not buffered.';
