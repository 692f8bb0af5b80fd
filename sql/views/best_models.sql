CREATE VIEW @extschema@.best_models WITH (security_invoker = true) AS
SELECT m.model_id, m.run_id, m.group_key, (m.fit).status, (m.fit).family, (m.fit).params,
       (m.fit).metric, (m.fit).score, (m.fit).metrics, (m.fit).n_train, (m.fit).n_validation,
       (m.fit).n_skipped, m.created_at
FROM @extschema@.models m;
COMMENT ON VIEW @extschema@.best_models IS
  'The catalog without model bytes: the selected configuration and validation score per run and group.';
GRANT SELECT ON @extschema@.best_models TO groupml_admin;
