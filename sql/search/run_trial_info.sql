CREATE VIEW @extschema@.run_trial_info WITH (security_invoker = true) AS
SELECT t.run_id, t.group_key, t.trial_id, t.params, t.score,
       pg_catalog.cardinality(t.epoch_scores) AS epochs, (t.metrics ->> 'iterations')::integer AS iterations,
       t.status, t.stop_reason,
       t.epoch_scores AS epoch_losses,
       (t.metrics ->> 'passes')::bigint AS passes, (t.metrics ->> 'seconds')::float8 AS seconds,
       coalesce((t.metrics ->> 'is_best')::boolean,
                t.trial_id = (SELECT min(t2.trial_id) FROM @extschema@.trials t2
                              WHERE t2.run_id = t.run_id AND t2.group_key = t.group_key
                                AND t2.params = (m.fit).params AND t2.score IS NOT DISTINCT FROM (m.fit).score),
                false) AS is_best
FROM @extschema@.trials t
LEFT JOIN @extschema@.models m ON m.run_id = t.run_id AND m.group_key = t.group_key;
COMMENT ON VIEW @extschema@.run_trial_info IS
  'Every trial of the catalog-writing runs (groupml.trials) in the shape of groupml.trial_info(fit): params, score, epochs, iterations, status, stop reason, per-epoch losses, cost, and whether it was selected.';
GRANT SELECT ON @extschema@.run_trial_info TO groupml_admin;
