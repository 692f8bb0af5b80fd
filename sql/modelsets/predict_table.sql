CREATE FUNCTION @extschema@.predict_table(model_set text, source regclass, key_column text, features text[], group_by text[] DEFAULT NULL, on_missing text DEFAULT 'error')
RETURNS TABLE (row_key bigint, prediction float8) LANGUAGE plpgsql STABLE PARALLEL UNSAFE
AS $plpgsql$
BEGIN RETURN QUERY EXECUTE @extschema@._predict_table_sql(model_set, source, key_column, features, group_by, on_missing, false); END
$plpgsql$;
COMMENT ON FUNCTION @extschema@.predict_table(text, regclass, text, text[], text[], text) IS
  'Score every row of a table or view with its group''s model in a model set''s active version: (row_key, prediction) per row, row_key the integer key_column. Rows are read group by group as packed arrays and scored with numpy.';
