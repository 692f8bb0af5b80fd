-- The packed rows of one learn_over_groups buffer, for the final function: native float8,
-- d features then the label per row. C (groupml.so).
CREATE FUNCTION @extschema@._learn_rows(handle bigint)
RETURNS bytea LANGUAGE C VOLATILE STRICT
AS 'MODULE_PATHNAME', 'groupml_learn_rows';
COMMENT ON FUNCTION @extschema@._learn_rows(bigint) IS
  'Internal: the rows buffered under a learn_over_groups handle in this backend, packed as native float8 (d features, then the label); NULL for an unknown handle; an error (2202E, 22000) for a buffer whose rows stopped at an empty, ragged or nested array.';
