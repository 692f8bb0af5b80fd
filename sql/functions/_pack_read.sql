-- The bytes of a train_groups load reference ({fd, offset, bytes}), read back from the load
-- arena of the current transaction.
CREATE FUNCTION @extschema@._pack_read(ref int8[])
RETURNS bytea LANGUAGE C VOLATILE STRICT
AS 'MODULE_PATHNAME', 'groupml_pack_read';
COMMENT ON FUNCTION @extschema@._pack_read(int8[]) IS
  'Internal: the bytes a reference of groupml._pack_values or groupml._pack_rows names ({fd, offset, bytes}), read from the load arena of the transaction that loaded them.';
