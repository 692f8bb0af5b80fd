"""Estimated training cost of a candidate, in one unit for every learner family.

Pure Python: a family name, its params and the job's shape in, a cost out. The scheduler
divides by these estimates (cost-aware GP-UCB, EIRATE), so only their ratios matter; the
constants and how they were measured are in docs/multitenant.md.
"""

from __future__ import annotations

import math
from typing import Any, Dict

from ..errors import InvalidParameterError
from ..learners import get_learner_family

#: Relative cost of one solver iteration over one row-feature, per GLM family (estimated cost unit).
FAMILY_COST = {"logistic": 1.0, "svm": 1.0, "linear": 0.5}
# The other families in the same unit, measured with fit_group on one thread (2,000-16,000
# rows, 10-60 features; docs/multitenant.md): a GLM unit took 55-90 ns (gradient descent,
# 1500 iterations), a LightGBM row x (features + 1) x round 10-26 ns at 31 leaves, an MLP optimizer step
# about 0.5 ms whatever the layer widths at these sizes (PyTorch's per-step overhead, with
# autograd); the MLP constants are scaled by 1/1.56 for fit_group's MLP, whose steps use no
# autograd (its measured speed-up over six sizes, 1.2-2.2x).
#: LightGBM: cost units per row x (features + 1) x boosting round of a 31-leaf tree (a round
#: costs in proportion to its leaves, at least 8: 7, 15, 31 and 63 leaves measured).
LGBM_ROUND_COST = 0.35
#: MLP: cost units per row x weight x epoch, and per optimizer step (rows x epochs / batch_size).
MLP_WEIGHT_COST = 0.013
MLP_STEP_COST = 4900.0


def estimated_cost(family: str, params: Dict[str, Any], n_rows: int, n_features: int) -> float:
    """Estimated training cost in one unit for every family (docs/multitenant.md).

    GLMs: rows x (features + 1) x family factor x max_iter / 100.  LightGBM: rows x
    (features + 1) x rounds x max(8, leaves) / 31 x LGBM_ROUND_COST.  MLP: rows x epochs x (weights x
    MLP_WEIGHT_COST + MLP_STEP_COST / batch_size).  The constants were measured against
    the GLM unit on groupml's own training code (one thread).
    """
    fam = get_learner_family(family)
    p = fam.validate_params(params)
    rows = max(1.0, float(n_rows))
    try:
        if family in FAMILY_COST:
            cost = rows * (n_features + 1) * FAMILY_COST[family] * float(p["max_iter"]) / 100.0
        elif fam.pattern == "sampling":
            leaves = max(8.0, float(p["num_leaves"])) / 31.0
            cost = rows * (n_features + 1) * float(p["num_boost_round"]) * leaves * LGBM_ROUND_COST
        else:
            widths = [n_features] + list(p["layers"]) + [1]
            weights = sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:]))
            cost = rows * float(p["epochs"]) * (weights * MLP_WEIGHT_COST + MLP_STEP_COST / float(p["batch_size"]))
    except OverflowError:
        cost = math.inf
    if not math.isfinite(cost):
        raise InvalidParameterError(
            f"The estimated cost of a {family} candidate must be a finite number; got {cost}",
            hint="Lower its iterations (max_iter, num_boost_round or epochs).")
    return cost
