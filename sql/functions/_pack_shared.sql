-- Final function of train_groups' load aggregates (_pack_values, _pack_rows), in C: writes the
-- group's rows to the transaction's load arena (a memory file) and returns where they are.
CREATE FUNCTION @extschema@._pack_shared(handle bigint)
RETURNS int8[] LANGUAGE C VOLATILE
AS 'MODULE_PATHNAME', 'groupml_pack_shared';
COMMENT ON FUNCTION @extschema@._pack_shared(bigint) IS
  'Internal: final function of groupml._pack_values and groupml._pack_rows, in C: writes the group''s rows (native float8, features then the label) to the transaction''s load arena, a memory file, and returns {fd, offset, bytes}; fd is the arena''s descriptor in this backend (-1 for a group without rows) until the transaction ends.';
