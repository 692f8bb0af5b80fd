-- The live learn_over_groups buffers of this backend: what the final function reads besides
-- the rows (counts, the anomaly a row recorded, the first row's model, search and options).
CREATE FUNCTION @extschema@._learn_buffers(handle bigint DEFAULT NULL)
RETURNS TABLE(handle bigint, d integer, n_rows bigint, skipped bigint, anomaly text, found integer,
              stmt timestamptz, model text, search jsonb, options jsonb)
LANGUAGE C VOLATILE ROWS 100
AS 'MODULE_PATHNAME', 'groupml_learn_buffers';
COMMENT ON FUNCTION @extschema@._learn_buffers(bigint) IS
  'Internal: the learn_over_groups row buffers alive in this backend (only the given handle''s when one is given): features per row, rows, skipped rows, the first anomaly (empty, length with the length found, nested), the statement start, and the first row''s model, search and options.';
