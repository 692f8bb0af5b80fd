"""Help topics of the search engine objects (explain_search, trial_info, cost model calibration)."""

from __future__ import annotations

TOPICS = {}

TOPICS["explain_search"] = """\
groupml.explain_search(source regclass, features text[], label text, model text, search jsonb,
                       group_by text[] DEFAULT '{}', options jsonb DEFAULT '{}')
  -> TABLE (item text, value text, detail text)
  The plan of a search, without training anything: the procedure and its early stopping,
  the number of configurations, the budget in epoch blocks and data passes, the batch size k
  (configurations trained together per data pass) and why the planner chose it, the number of
  groups and rows, and the estimated seconds for all groups and for the largest one.
  Reads the catalog and runs one count query; the spec is validated exactly as
  learn_over_groups / train_groups validate it (same ERRORs).
  The estimate comes from the cost model refitted on groupml.cost_runs (TuPAQ eq. 1); on a fresh
  install run SELECT * FROM groupml.calibrate_cost_model(); first. It is an upper bound:
  converged and early-stopped configurations free their slot before their budget.

  Example:
    SELECT * FROM groupml.explain_search('clicks', ARRAY['f1', 'f2', 'f3'], 'clicked', 'logistic',
      '{"method": "tpe", "n_trials": 40, "space": {"l2": {"loguniform": [1e-6, 1]}},
        "early_stopping": {"method": "bandit", "epsilon": 0.5, "partial_iters": 10}}', ARRAY['country']);
"""

TOPICS["trial_info"] = """\
groupml.trial_info(fit groupml.fit)
  -> TABLE (trial_id, params jsonb, score, epochs, iterations, status, stop_reason,
            epoch_losses float8[], passes bigint, seconds, is_best boolean)
  One row per configuration tried for a fit, like BigQuery's ML.TRIAL_INFO.
  score        the selection metric on the validation rows (natural units, e.g. accuracy)
  epochs       epoch blocks trained; epoch_losses the validation loss (lower is better) after each
  status       how it ended: converged (reached tol) | max_iter (ran all its iterations without
               reaching tol) | stalled | diverged (its trainer finished it) | stopped (the search
               procedure did) | failed (non-finite validation loss); stop_reason says why, e.g.
               'bandit: loss 0.31 after 1 epochs is not within epsilon=0.5 of the best loss so far 0.19',
               'not promoted at rung 0 (1 epochs) of bracket 0', 'paused at rung 0 ...', 'converged',
               'budget' (it used the epochs the procedure gave it: max_epochs, a rung's budget)
  passes       data passes the configuration took part in (shared with the others of its batch)
  seconds      its share of the training time; is_best marks the selected configuration
  For catalog runs (train_groups) the view groupml.run_trial_info has the same columns plus
  run_id and group_key.

  Example:
    SELECT country, t.* FROM country_models, groupml.trial_info(fit) t ORDER BY country, t.score DESC;
"""

TOPICS["run_trial_info"] = """\
groupml.run_trial_info  (view)
  Every trial of the catalog-writing runs (groupml.trials joined with groupml.models):
  run_id, group_key, trial_id, params, score, epochs, iterations, status, stop_reason,
  epoch_losses, passes, seconds, is_best. Same meaning as groupml.trial_info(fit).

  Example:
    SELECT group_key, trial_id, params, score, stop_reason FROM groupml.run_trial_info
    WHERE run_id = 1 ORDER BY group_key, score DESC;
"""

TOPICS["calibrate_cost_model"] = """\
groupml.calibrate_cost_model(sizes jsonb DEFAULT NULL, model text DEFAULT 'logistic', passes integer DEFAULT 5)
  -> TABLE (n, d, k, measured_passes, seconds_per_pass, estimated_seconds_per_pass)
  Measures `passes` real batched training passes in this backend on synthetic data of a few
  sizes (n rows, d features, k configurations per pass), stores them in groupml.cost_runs and
  returns each measurement beside the estimate of the cost model refitted on the table
  (TuPAQ eq. 1: t = c_fixed + c_compute*n*d*k + c_memory*n*d, NNLS on relative error).
  Needs INSERT on groupml.cost_runs (42501 otherwise). Takes a few seconds with the default sizes. Catalog-writing runs add their own measured runs,
  so the model follows the machine as runs accumulate (the newest 1000 are used).
  The planner (explain_search, and learn_over_groups / train_groups when the search spec has no
  "slots") picks the batch size k from this model.

  Examples:
    SELECT * FROM groupml.calibrate_cost_model();
    SELECT * FROM groupml.calibrate_cost_model('[{"n": 100000, "d": 50, "k": 1}, {"n": 100000, "d": 50, "k": 10}]');
"""

TOPICS["cost_runs"] = """\
groupml.cost_runs  (table)
  run_id, n (training rows), d (features), k (configurations per pass), workers, passes,
  seconds (wall time of all those passes), family, source, created_at.
  The measurements the planner's cost model is refitted on. Rows come from
  groupml.calibrate_cost_model() and from training runs; delete rows to forget a machine.
  Every role reads it (planning); only the catalog's writers (the extension's owner, or roles
  an administrator grants INSERT) add rows, so no role can steer another's batch sizes.
  Rows the model cannot use (non-finite seconds) are skipped when it is refitted.
"""
