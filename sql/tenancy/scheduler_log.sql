CREATE VIEW @extschema@.scheduler_log WITH (security_invoker = true) AS
SELECT o.step, t.name AS tenant, o.job_id, c.key AS candidate, c.family, c.params, o.status, o.quality,
       j.metric, o.cost_seconds, c.estimated_cost, o.policy, o.error, o.started_at, o.finished_at,
       (j.best_observation_id = o.observation_id) AS is_best
FROM @extschema@.observations o
JOIN @extschema@.candidates c USING (candidate_id)
JOIN @extschema@.jobs j ON j.job_id = o.job_id
JOIN @extschema@.tenants t ON t.tenant_id = j.tenant_id;
GRANT SELECT ON @extschema@.scheduler_log TO PUBLIC;
COMMENT ON VIEW @extschema@.scheduler_log IS
  'What the multi-tenant scheduler did, step by step: tenant served, job, candidate trained, status, quality, measured and estimated cost, timestamps. Row-level security of the underlying tables applies (security_invoker).';
