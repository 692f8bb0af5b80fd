CREATE FUNCTION @extschema@.simulate_scheduler(policy text DEFAULT 'hybrid', sigma_m float8 DEFAULT 0.5,
                                               alpha float8 DEFAULT 0.1, seeds integer DEFAULT 5,
                                               cost_aware boolean DEFAULT true, n_users integer DEFAULT 100,
                                               n_models integer DEFAULT 50, n_tenants integer DEFAULT 10,
                                               budget_fraction float8 DEFAULT 0.5, grid_points integer DEFAULT 50)
RETURNS TABLE (cost float8, avg_loss float8, worst_tenant_loss float8, worst_run_loss float8)
LANGUAGE plpython3u IMMUTABLE
AS $python$
from groupml.udf.tenancy import simulate_scheduler; return simulate_scheduler(policy, sigma_m, alpha, seeds, cost_aware, n_users, n_models, n_tenants, budget_fraction, grid_points)
$python$;
COMMENT ON FUNCTION @extschema@.simulate_scheduler(text, float8, float8, integer, boolean, integer, integer, integer, float8, integer) IS
  'Simulate the multi-tenant scheduler on the synthetic SYN(sigma_m, alpha) quality/cost matrices (no training) and return the accuracy-loss curve averaged over seeds: average, worst tenant, worst run, against cumulative cost. See groupml.help(''simulate_scheduler'').';
