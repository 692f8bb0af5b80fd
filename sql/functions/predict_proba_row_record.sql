CREATE FUNCTION @extschema@.predict_proba_row(fit @extschema@.fit, columns anyelement)
RETURNS float8 LANGUAGE sql STABLE STRICT PARALLEL SAFE
AS $sql$ SELECT @extschema@.predict_proba_row(fit, pg_catalog.to_jsonb(columns)) $sql$;
COMMENT ON FUNCTION @extschema@.predict_proba_row(@extschema@.fit, anyelement) IS
  'Probability of class 1 for one row of raw columns with a fit whose model stores a transform (train_groups on raw feature columns), for classifiers. columns: a row -- a table row such as c, or ROW(a, b, ...) with the training columns in their order. See groupml.help(''transforms'').';
