-- The group key reaches Python in its binary form (record_send of its values, each with its
-- type), so keys match by typed value whatever DateStyle, TimeZone or extra_float_digits are.
CREATE FUNCTION @extschema@.predict(model_set text, features float8[], group_key anycompatible, on_missing text DEFAULT 'error')
RETURNS float8 LANGUAGE sql STABLE PARALLEL UNSAFE
AS $sql$
SELECT @extschema@._predict_in_set(model_set, features, pg_catalog.record_send(ROW(group_key)), on_missing)
$sql$;
COMMENT ON FUNCTION @extschema@.predict(text, float8[], anycompatible, text) IS
  'Predict one row with its group''s model in a model set''s active version: group_key is the value of the group column, or ROW(a, b, ...) for several. on_missing: error | null, for a group the version has no model of.';
