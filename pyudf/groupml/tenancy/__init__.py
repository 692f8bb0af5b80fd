"""Multi-tenant model selection (ease.ml-style): which tenant to serve next, and which
of its candidate models to train.

Pure Python + numpy, no database. The public surface:

* :class:`Scheduler` -- policy + one cost-aware GP-UCB per tenant;
  ``next_step() -> (tenant, candidate) | None``, ``observe(...)``, ``observe_failure(...)``,
  ``state_dict()`` / ``Scheduler.from_state(...)``.
* tenant-picking policies behind :class:`TenantPolicy` (``make_policy(name)``):
  GREEDY, HYBRID, ROUNDROBIN, RANDOM, FCFS, and EIRATE (expected improvement per unit of
  cost; ours, not the paper's).
* GP helpers: :func:`estimate_prior`, :class:`TenantGP`, :func:`posterior_direct`.
* a job's candidates: :func:`expand_candidates` (the candidates jsonb into validated
  configurations), :func:`candidate_key`, :func:`canonical_params`; their cost estimate,
  :func:`estimated_cost`, in one unit for every learner family.
* simulation: :func:`simulate`, :func:`synthetic_dataset`, :func:`aggregate`,
  :func:`loss_on_grid`, :func:`cost_to_reach`, :func:`regret_trace`; :func:`tenant_sequences` and
  :func:`best_interleaving_cost` bound what any tenant-picking policy could gain.

See docs/multitenant.md for the algorithms and constants.
"""

from ._bandit import TenantBandit, beta, expected_improvement
from ._candidates import MAX_CANDIDATES, TASK_METRIC, candidate_key, canonical_params, expand_candidates
from ._costs import FAMILY_COST, LGBM_ROUND_COST, MLP_STEP_COST, MLP_WEIGHT_COST, estimated_cost
from ._gp import TenantGP, estimate_prior, history_matrix, posterior_direct
from ._policies import (FCFS, POLICIES, EIRate, Greedy, Hybrid, RandomPolicy, RoundRobin, TenantPolicy,
                        TenantView, greedy_candidate_set, make_policy)
from ._scheduler import Scheduler
from ._simulate import (SimulationResult, aggregate, best_interleaving_cost, cost_to_reach, loss_on_grid,
                        regret_trace, simulate, synthetic_dataset, tenant_sequences)

__all__ = [
    "Scheduler", "TenantPolicy", "TenantView", "Greedy", "Hybrid", "EIRate", "RoundRobin", "RandomPolicy", "FCFS",
    "POLICIES", "make_policy", "greedy_candidate_set", "TenantGP", "TenantBandit", "estimate_prior",
    "history_matrix", "posterior_direct", "beta", "expected_improvement", "simulate", "synthetic_dataset",
    "SimulationResult", "aggregate", "loss_on_grid", "cost_to_reach", "regret_trace", "tenant_sequences",
    "best_interleaving_cost", "expand_candidates", "candidate_key", "canonical_params", "estimated_cost",
    "TASK_METRIC", "MAX_CANDIDATES", "FAMILY_COST", "LGBM_ROUND_COST", "MLP_WEIGHT_COST", "MLP_STEP_COST",
]
