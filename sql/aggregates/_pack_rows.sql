-- _pack_rows: a group's rows packed as native float8 (features, then the label; rows with a
-- NULL left out) for train_groups' load, from an array of features per row: one C append per
-- row, then the rows go to the load arena ({fd, offset, bytes}, groupml._pack_shared).
CREATE AGGREGATE @extschema@._pack_rows(features float8[], label float8) (
    SFUNC = @extschema@._pack_step, STYPE = bigint,
    FINALFUNC = @extschema@._pack_shared, FINALFUNC_MODIFY = READ_WRITE
);
COMMENT ON AGGREGATE @extschema@._pack_rows(float8[], float8) IS
  'Internal (train_groups): the group''s rows as native float8, each row its features then its label, written to the load arena; returns {fd, offset, bytes} (groupml._pack_shared). A row with a NULL value is left out.';
