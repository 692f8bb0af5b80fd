-- _pack_rows: a group's rows packed as native float8 (features, then the label; rows with a
-- NULL left out), for train_groups' load: one C append per row and one copy at the end.
CREATE AGGREGATE @extschema@._pack_rows(features float8[], label float8) (
    SFUNC = @extschema@._pack_step, STYPE = bigint,
    FINALFUNC = @extschema@._learn_rows
);
COMMENT ON AGGREGATE @extschema@._pack_rows(float8[], float8) IS
  'Internal (train_groups): the group''s rows as one bytea of native float8, each row its features then its label; a row with a NULL value is left out.';
