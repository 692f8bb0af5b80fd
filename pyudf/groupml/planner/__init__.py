"""Planning for learning over groups: where rows go, which strategy, how long.

Pure Python, no database.  Placements, plans and cost-model state are plain data
(``to_dict()`` / ``state_dict()``), keyed by worker index 0..p-1, for the executor.

* placement: :func:`wrap_around` (Kingpin Alg. 1), :func:`constrained_wrap_around`
  (Alg. 2), plus :func:`whole_groups` (GTP) and :func:`even_split` (DP);
* invariants: :func:`check_placement` and friends;
* strategy: :func:`choose_strategy` over grouped / gtp / mtp / dp makespan estimates;
* :class:`CostModel`: time per pass (TuPAQ eq. 1), calibrated from measured runs,
  with :func:`choose_batch_size` and :func:`choose_workers`;
* :func:`calibrate_unit_costs`: the strategies' :class:`UnitCosts` measured from the
  tasks earlier runs executed (a :class:`Calibration` says which fields were measured);
* :func:`choose_backend`: one backend (helper processes, no snapshot) or worker backends,
  from :func:`estimate_one_backend` and the worker plan plus :func:`executor_overhead`.
"""

from ._backend import (ONE_BACKEND, HostCosts, best_one_backend, choose_backend, estimate_one_backend, executor_overhead,
                       run_overhead_from_runs,
                       host_costs_from_timings)
from ._calibrate import Calibration, backend_work_ratio, calibrate_unit_costs
from ._costmodel import (DEFAULT_COEFFICIENTS, TERMS, CostModel, check_run, choose_batch_size,
                         choose_workers, right_size, term_values)
from ._invariants import (PlacementInvariantError, check_placement, constrained_bound,
                          coverage_violations, placement_violations)
from ._placement import (CONSTRAINED, EVEN_SPLIT, WHOLE_GROUPS, WRAP_AROUND, Placement, Shard,
                         constrained_splits, constrained_wrap_around, even_split, place,
                         whole_groups, wrap_around, wrap_around_capacity)
from ._common import group_order
from ._strategy import (PATTERNS, STRATEGIES, Plan, StrategyEstimate, UnitCosts, Workload,
                        choose_strategy, estimate_dp, estimate_grouped, estimate_gtp, estimate_mtp,
                        estimate_strategy, grouped_placement, unit_costs_from_model)

__all__ = [
    "Shard", "Placement", "wrap_around", "constrained_wrap_around", "whole_groups", "even_split",
    "place", "wrap_around_capacity", "constrained_splits", "group_order",
    "WRAP_AROUND", "CONSTRAINED", "WHOLE_GROUPS", "EVEN_SPLIT",
    "check_placement", "placement_violations", "coverage_violations", "constrained_bound",
    "PlacementInvariantError",
    "UnitCosts", "Workload", "StrategyEstimate", "Plan", "choose_strategy", "estimate_strategy",
    "estimate_grouped", "estimate_gtp", "estimate_mtp", "estimate_dp", "grouped_placement",
    "unit_costs_from_model", "PATTERNS", "STRATEGIES",
    "CostModel", "choose_batch_size", "choose_workers", "right_size", "term_values", "check_run", "TERMS",
    "DEFAULT_COEFFICIENTS", "Calibration", "backend_work_ratio", "calibrate_unit_costs",
    "ONE_BACKEND", "HostCosts", "best_one_backend", "estimate_one_backend", "executor_overhead", "choose_backend",
    "run_overhead_from_runs",
    "host_costs_from_timings",
]
