-- The group key reaches Python in its binary form, as for predict with a model set.
CREATE FUNCTION @extschema@.predict_proba(model_set text, features float8[], group_key anycompatible, on_missing text DEFAULT 'error')
RETURNS float8 LANGUAGE sql STABLE PARALLEL UNSAFE
AS $sql$
SELECT @extschema@._predict_proba_in_set(model_set, features, pg_catalog.record_send(ROW(group_key)), on_missing)
$sql$;
COMMENT ON FUNCTION @extschema@.predict_proba(text, float8[], anycompatible, text) IS
  'Probability of class 1 for one row with its group''s classifier in a model set''s active version: group_key is the value of the group column, or ROW(a, b, ...) for several. on_missing: error | null, for a group the version has no model of.';
