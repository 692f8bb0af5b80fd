-- The bytes of a float8[] as they are in memory (header, dimensions, then the values in the
-- server's byte order), copied into a bytea by the server's own byteasend (which returns a copy
-- of its argument): predict_table's query packs each group's rows of features with it, one
-- memcpy instead of array_send's call per value. Any float8[] is a valid input; the output is the caller's own
-- data.
CREATE FUNCTION @extschema@._float8_bytes(float8[])
RETURNS bytea LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE
AS 'byteasend';
COMMENT ON FUNCTION @extschema@._float8_bytes(float8[]) IS
  'Internal (predict_table): the bytes of a float8[] as the server holds it in memory (ArrayType header, dimensions, values in native byte order), read by numpy without a conversion per value.';
