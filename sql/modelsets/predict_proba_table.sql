CREATE FUNCTION @extschema@.predict_proba_table(model_set text, source regclass, key_column text, features text[], group_by text[] DEFAULT NULL, on_missing text DEFAULT 'error')
RETURNS TABLE (row_key bigint, probability float8) LANGUAGE plpgsql STABLE PARALLEL UNSAFE
AS $plpgsql$
BEGIN RETURN QUERY EXECUTE @extschema@._predict_table_sql(model_set, source, key_column, features, group_by, on_missing, true); END
$plpgsql$;
COMMENT ON FUNCTION @extschema@.predict_proba_table(text, regclass, text, text[], text[], text) IS
  'Probability of class 1 for every row of a table or view with its group''s classifier in a model set''s active version: (row_key, probability) per row, row_key the integer key_column. Rows are read group by group as packed arrays and scored with numpy.';
