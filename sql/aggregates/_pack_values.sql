-- _pack_values: _pack_rows with a row's values passed as separate float8 arguments
-- (features, then the label) instead of an array, so no array is built per row; for rows
-- of up to 98 features (a function takes at most 100 arguments, the state included).
CREATE AGGREGATE @extschema@._pack_values(VARIADIC "values" "any") (
    SFUNC = @extschema@._pack_values_step, STYPE = bigint,
    FINALFUNC = @extschema@._pack_shared, FINALFUNC_MODIFY = READ_WRITE
);
COMMENT ON AGGREGATE @extschema@._pack_values("any") IS
  'Internal (train_groups): the group''s rows as native float8, each row its features then its label given as separate float8 arguments (at most 98 features), written to the load arena; returns {fd, offset, bytes} (groupml._pack_shared). A row with a NULL value is left out.';
