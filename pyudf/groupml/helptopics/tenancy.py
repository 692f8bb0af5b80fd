"""Help topics of multi-tenant model selection (tenants, jobs, run_scheduler, pg_cron, infer)."""

from __future__ import annotations

TOPICS = {}

TOPICS["tenancy"] = """\
Multi-tenant model selection (ease.ml): several tenants share the server; a coordinator decides,
step by step, which tenant's job to serve and which candidate model to train for it, so that the
average best-model-so-far of all tenants improves as fast as possible for the compute spent.
  SELECT groupml.create_tenant('astro');                         -- bound to the calling role
  SELECT groupml.submit_job('astro', 'galaxies', ARRAY['f1','f2'], 'merger',
         '[{"model": "logistic", "search": {"l2": [0, 0.01, 0.1]}}, {"model": "svm"}]');
  CALL groupml.run_scheduler(max_steps => 50);                   -- as a groupml_admin member
  SELECT groupml.infer(1, ARRAY[0.3, 1.2]);
  SELECT * FROM groupml.scheduler_log ORDER BY step;
Tables: groupml.tenants, jobs, candidates, observations (row-level security: a role sees the rows
of the tenants it is a member of; groupml_admin members see all) and scheduler_state (admins).
Topics: create_tenant, submit_job, run_scheduler, schedule_with_cron, infer, scheduler_log,
simulate_scheduler, tenants, jobs, candidates, observations, scheduler_state, groupml_admin.
Algorithms and constants: docs/multitenant.md.
"""

TOPICS["create_tenant"] = """\
groupml.create_tenant(name text, role name DEFAULT current_user) -> bigint (tenant_id)
  Creates a tenant bound to a role: members of that role see and change the tenant's jobs,
  candidates, observations and models, nobody else does (except groupml_admin members).
  Binding a role you are not a member of needs groupml_admin. A group role (NOLOGIN, with the
  team's login roles as members) is fine; predefined roles (pg_monitor, ...) are refused.
  Errors: unknown role (42704), not a member (42501), name taken (42710), empty name or a
  predefined role (22023).
  Example:
    CREATE ROLE astro LOGIN;  SELECT groupml.create_tenant('astro', 'astro');
"""

TOPICS["submit_job"] = """\
groupml.submit_job(tenant text, source regclass, features text[], label text, candidates jsonb) -> bigint (job_id)
  Registers a model-selection job of a tenant. The tenant's role must be able to SELECT the source.
  The job's rows are read here, once, as the calling role (its policies apply; a view's functions
  run with its rights) and stored in groupml.job_data: the coordinator trains on them and never
  reads the source itself. Later changes to the source do not change the job; revoking the
  tenant's SELECT on it (or dropping it) fails the job's remaining candidates.
  features: numeric or boolean columns; label: 0/1 (classification) or a number (regression).
  candidates: a JSON array; each entry is
     "logistic"                                         one candidate with the family's defaults
     {"model": "svm", "params": {"l2": 0.1}}            one candidate
     {"model": "logistic", "search": {"l2": [0, 0.01, 0.1], "class_weight": [null, "balanced"]}}
     {"model": "logistic", "search": {"method": "random", "n_trials": 8, "space": {"l2": {"loguniform": [1e-4, 1]}}}}
  A search is expanded (grid or random only) into one candidate per configuration; at most 1000.
     {"model": "lightgbm", "search": {"num_leaves": [7, 31], "num_boost_round": [100]}}
     {"model": "mlp", "params": {"layers": [32], "epochs": 10}}
  Families: logistic, svm, mlp, lightgbm (classification, quality = validation accuracy) or
  linear, mlp_regressor, lightgbm_regressor (regression, quality = validation r2); one job is
  one task. Candidate keys 'family:{params}' are shared by all jobs, so what other jobs learned
  about a configuration shapes this job's GP prior.
  Estimated cost of a candidate, one unit for all families (the scheduler only uses ratios):
  GLMs rows x (features + 1) x factor (logistic 1, svm 1, linear 0.5) x max_iter / 100;
  LightGBM rows x (features + 1) x num_boost_round x max(8, num_leaves) / 31 x 0.35; MLP rows x epochs x
  (weights x 0.013 + 4900 / batch_size).
  Errors (nothing is written): unknown tenant (42704), source unreadable by the tenant's role or
  by the caller (42501), an index or other non-table (42809), unknown column (42703), non-numeric
  column (42804), empty or malformed candidates (22023), rows that cannot be read (the reading
  error's SQLSTATE, e.g. 22003 for a value beyond float8), no usable row, a classification
  label other than 0/1, or one label value in every row (22000: such a job could only fail
  in run_scheduler), and -- when a role outside the tenant (an administrator, a superuser that
  is not the tenant's role; members of the tenant's role submit as the tenant) submits for it --
  a view, a foreign table, a table whose row-level security applies to either role, or a source
  with user-defined functions attached to its indexes, partition key, statistics, constraints or
  defaults (0A000: submit as the tenant's role or a member). One configuration has one key
  however it is written ({} and {"l2": 0} alike; parameters training does not read left out).
"""

TOPICS["run_scheduler"] = """\
CALL groupml.run_scheduler(max_steps int DEFAULT NULL, max_seconds float8 DEFAULT NULL,
                           policy text DEFAULT 'hybrid', cost_aware boolean DEFAULT true)
  The coordinator. Each step: the scheduler (cost-aware GP-UCB per job, tenant-picking policy
  hybrid | greedy | eirate | roundrobin | random | fcfs; eirate = expected improvement per unit of
  cost, not part of ease.ml) picks (job, candidate); the candidate is trained on
  the job's rows (80/20 deterministic holdout, the foundation's learners); its validation quality
  and measured seconds are recorded in groupml.observations, the job's best model is updated and
  the step is COMMITTED. A failing candidate is recorded with status 'failed' and its error; the
  others continue. Stops after max_steps steps, after max_seconds (checked between steps), or when
  every candidate of every job is done. Cancel (pg_cancel_backend, statement_timeout) loses only
  the step in flight; the next call resumes exactly there (the state is in groupml.scheduler_state).
  Calling with another policy replays the recorded outcomes under the new policy.
  Needs groupml_admin (it reads the jobs' rows stored by submit_job in groupml.job_data).
  A tenant deleting a job or candidate while it trains waits for that step's commit.
  Example:  CALL groupml.run_scheduler(max_steps => 20, policy => 'hybrid');
"""

TOPICS["schedule_with_cron"] = """\
groupml.schedule_with_cron(schedule text, max_seconds float8 DEFAULT 50, policy text DEFAULT 'hybrid',
                           cost_aware boolean DEFAULT true, database text DEFAULT current_database(),
                           job_name text DEFAULT 'groupml_scheduler') -> bigint (cron jobid)
  Creates (or updates, by job_name) a pg_cron job that runs
  CALL groupml.run_scheduler(max_seconds => ..., policy => ..., cost_aware => ...) in `database`.
  pg_cron must be preloaded (shared_preload_libraries) and CREATE EXTENSION pg_cron done in this
  database (cron.database_name); otherwise an ERROR (55000) says what to do. Needs groupml_admin;
  a member who is not a superuser also needs pg_cron's grants (42501 names them): USAGE ON SCHEMA
  cron, and for another database EXECUTE on cron.schedule_in_database (superusers only by default).
  One job per database: a job_name already scheduled for another database is refused (42710; pg_cron
  would keep it there), so give each database's job its own name.
  Example:  SELECT groupml.schedule_with_cron('* * * * *', max_seconds => 50);
            SELECT cron.unschedule('groupml_scheduler');      -- stop it
"""

TOPICS["infer"] = """\
groupml.infer(job_id bigint, features float8[]) -> float8
  Predicts one row with the job's best model so far: the class (0/1) for classification, the value
  for regression. Features in the order given to submit_job. Row-level security applies.
  Errors: unknown or invisible job (42704), no model yet (55000), wrong length (2202E), NULL (22000).
  Example:  SELECT groupml.infer(1, ARRAY[f1, f2]) FROM galaxies;
"""

TOPICS["scheduler_log"] = """\
groupml.scheduler_log  (view, security_invoker: each role sees its own tenants' rows)
  step, tenant, job_id, candidate (key), family, params, status (ok | failed), quality, metric,
  cost_seconds (measured), estimated_cost, policy, error, started_at, finished_at,
  is_best (the job's current best model).
  Example:  SELECT step, tenant, candidate, quality, cost_seconds FROM groupml.scheduler_log ORDER BY step;
"""

TOPICS["simulate_scheduler"] = """\
groupml.simulate_scheduler(policy text DEFAULT 'hybrid', sigma_m float8 DEFAULT 0.5, alpha float8 DEFAULT 0.1,
                           seeds int DEFAULT 5, cost_aware boolean DEFAULT true, n_users int DEFAULT 100,
                           n_models int DEFAULT 50, n_tenants int DEFAULT 10, budget_fraction float8 DEFAULT 0.5,
                           grid_points int DEFAULT 50)
  -> TABLE (cost float8, avg_loss float8, worst_tenant_loss float8, worst_run_loss float8)
  Runs the same scheduler core on the synthetic SYN(sigma_m, alpha) quality and cost matrices
  (ease.ml appendix B; no training): n_tenants users are scheduled, the others are the history of
  the GP prior. Returns the accuracy loss (best possible quality - best so far) averaged over
  tenants and seeds, the worst tenant's loss and the worst seed's average, against cumulative cost
  (number of runs when cost_aware is false). n_users x n_models <= 1,000,000; cancel is noticed
  every step.
  Example:  SELECT * FROM groupml.simulate_scheduler('hybrid', 0.5, 1.0, seeds => 3);
"""

TOPICS["tenants"] = """\
groupml.tenants (tenant_id, name, role regrole, created_at, created_by)
  One row per tenant; row-level security: members of `role` and of groupml_admin see it.
"""

TOPICS["jobs"] = """\
groupml.jobs (job_id, tenant_id, owner_role, source regclass, features, label, task, metric, n_rows,
              best_observation_id, best_quality, submitted_at, submitted_by, submitted_xact)
  One row per submitted job; best_* point to the model groupml.infer uses. Row-level security.
"""

TOPICS["candidates"] = """\
groupml.candidates (candidate_id, job_id, owner_role, key, family, params, estimated_cost, status,
                    attempts: steps whose training of it a cancel or statement_timeout ended; after 3 it is
                    recorded as failed instead of retried on every call)
  The candidate models of each job; status pending | ok | failed. Row-level security. Tenants read
  and delete their candidates; only submit_job adds them (keys and costs steer the shared scheduler).
"""

TOPICS["observations"] = """\
groupml.observations (observation_id, job_id, candidate_id, owner_role, step, policy, status, quality,
                      cost_seconds, error, started_at, finished_at, model bytea)
  One row per trained candidate (never two for the same candidate), written by run_scheduler.
  Tenants may read and delete their rows; only groupml_admin writes. model is groupml's safe format.
"""

TOPICS["scheduler_state"] = """\
groupml.scheduler_state (name, policy, cost_aware, state jsonb, steps, updated_at)
  The coordinator's scheduler (groupml.tenancy.Scheduler.state_dict()), committed with every
  step. groupml_admin only. DELETE the row to start the decisions afresh (observations stay).
"""

TOPICS["groupml_admin"] = """\
groupml_admin (role, NOLOGIN, created by CREATE EXTENSION groupml when missing)
  Members see every tenant's rows, run groupml.run_scheduler and groupml.schedule_with_cron.
  Example:  CREATE ROLE coordinator LOGIN;  GRANT groupml_admin TO coordinator;
"""
