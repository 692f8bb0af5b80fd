CREATE VIEW @extschema@.trial_lineage WITH (security_invoker = true) AS
SELECT c.run_id, c.group_key, c.trial_id, c.parent_trial_id, c.forked_at_epoch,
       p.params AS parent_params, c.params,
       (SELECT pg_catalog.jsonb_object_agg(e.key, e.value)
          FROM pg_catalog.jsonb_each(c.params) AS e(key, value)
         WHERE (p.params OPERATOR(pg_catalog.->) e.key) IS DISTINCT FROM e.value) AS explored,
       c.status, c.stop_reason, c.score
FROM @extschema@.trials c
JOIN @extschema@.trials p ON p.run_id = c.run_id AND p.group_key = c.group_key AND p.trial_id = c.parent_trial_id;
COMMENT ON VIEW @extschema@.trial_lineage IS
  'Population based training (search method ''pbt''): one row per forked trial -- its parent trial, the parent''s epoch count at the fork, both trials'' params and the params the fork explored (perturbed or resampled). Follow parent_trial_id back to a trial with no parent for a whole lineage.';
GRANT SELECT ON @extschema@.trial_lineage TO groupml_admin;
