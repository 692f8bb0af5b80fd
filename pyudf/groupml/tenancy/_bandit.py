"""Cost-aware GP-UCB for one tenant (model-picking phase).

Score of an untried candidate k at the tenant's t-th pick::

    ucb(k) = mean(k) + sqrt(beta_t / c_k) * std(k)
    beta_t = beta_scale * 2 * c_max * log(pi^2 * K * t^2 / (6 * delta))      (Theorem 1)

``c_k`` is the candidate's *normalized* estimated cost (divided by the largest estimated
cost over all tenants, so ``c_max == 1``; 1 everywhere when cost-oblivious) and ``K``
the tenant's candidate count (the scheduler's ``beta_rule`` also offers the multi-tenant
Theorems 2-3, with ``n * K_max`` in the logarithm, and the line of Algorithms 1-2). A candidate
already trained (or failed) for the tenant gets score -inf and is never picked again.

The bandit also keeps the empirical confidence bound used by the GREEDY user picker:
after observing quality y for the candidate whose UCB was B at pick time::

    ecb   <- min(ecb, B)       (starts at +inf)
    gap   <- ecb - y           ("sigma bar": how much the tenant may still gain)

For the EIRATE tenant picker it also gives the expected improvement of each untried
candidate over the tenant's best quality so far, per unit of normalized cost
(:meth:`TenantBandit.gain_rates`, :func:`expected_improvement`).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

import numpy as np

from ._gp import TenantGP


def beta(t: int, n_tenants: int, k_max: int, delta: float, c_max: float = 1.0,
         scale: float = 1.0) -> float:
    """Exploration weight 2 c_max log(pi^2 n K t^2 / (6 delta)) (tenant-local step ``t`` >= 1):
    Theorem 1 with ``n_tenants`` = 1, Theorems 2-3 with the number of tenants and the
    largest candidate count."""
    return scale * 2.0 * c_max * math.log(math.pi ** 2 * n_tenants * k_max * t * t / (6.0 * delta))


_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function, vectorized in numpy (no scipy import in a backend):
    the Chebyshev fit of Numerical Recipes (erfcc), relative error < 1.2e-7 everywhere."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    ans = t * np.exp(poly)
    return np.where(x >= 0, ans, 2.0 - ans)


def _ei_unit(z: np.ndarray) -> np.ndarray:
    """E[(Z - (-z))^+] for standard normal Z, i.e. phi(z) + z * Phi(z)."""
    return _INV_SQRT_2PI * np.exp(-0.5 * z * z) + z * 0.5 * _erfc(-z / _SQRT2)


def expected_improvement(mean, std, best: float, cap: Optional[float] = None) -> np.ndarray:
    """Expected improvement over ``best`` of qualities y ~ N(mean, std^2):
    E[(y - best)^+] = std * (phi(z) + z Phi(z)), z = (mean - best) / std.

    With ``cap`` (the largest quality the metric allows, e.g. 1.0 for accuracy) the
    improvement is that of the clipped quality min(y, cap): E[(min(y, cap) - best)^+] =
    EI(best) - EI(cap), which is 0 once ``best`` >= ``cap``. Never negative."""
    mean = np.asarray(mean, dtype=float)
    std = np.asarray(std, dtype=float)
    if cap is not None and best >= cap:
        return np.zeros_like(mean)
    safe = np.maximum(std, 1e-12)
    out = safe * _ei_unit((mean - best) / safe)
    if cap is not None:
        out = out - safe * _ei_unit((mean - cap) / safe)
    # std == 0: the improvement is certain
    flat = np.maximum(np.minimum(mean, cap) if cap is not None else mean, best) - best
    return np.maximum(np.where(std > 1e-12, out, flat), 0.0)


class TenantBandit:
    """One tenant: candidate keys, normalized costs, GP posterior, tried set, ECB."""

    def __init__(self, name: str, keys: Sequence[str], est_costs: Sequence[float], order: int):
        self.name = name
        self.keys: List[str] = list(keys)
        self.index: Dict[str, int] = {k: i for i, k in enumerate(self.keys)}
        self.est_costs = np.asarray(est_costs, dtype=float)
        self.order = order                     # arrival order (FCFS / round-robin)
        self.gp: Optional[TenantGP] = None
        self.tried = np.zeros(len(self.keys), dtype=bool)
        self.failed: List[str] = []
        self.retired: List[str] = []           # withdrawn without training (their rows were deleted)
        self.best = -math.inf                  # best quality so far
        self.ecb = math.inf                    # empirical confidence bound
        self.gap: Optional[float] = None       # sigma bar; None until first observation
        self.last_y: Optional[float] = None

    @property
    def n_obs(self) -> int:
        return len(self.gp.observed) if self.gp is not None else 0

    @property
    def active(self) -> bool:
        return not bool(self.tried.all())

    def scores(self, beta_t: float, norm_costs: np.ndarray) -> np.ndarray:
        """UCB score per candidate; -inf for tried ones."""
        s = self.gp.mean + np.sqrt(beta_t / norm_costs) * self.gp.std
        return np.where(self.tried, -np.inf, s)

    def gain_rates(self, norm_costs: np.ndarray, cap: Optional[float] = None) -> np.ndarray:
        """Expected improvement over the best quality so far per unit of normalized cost,
        per candidate; -inf for tried ones, +inf for all untried ones before the first
        observation (nothing to improve on yet)."""
        if not math.isfinite(self.best):
            return np.where(self.tried, -np.inf, np.inf)
        ei = expected_improvement(self.gp.mean, self.gp.std, self.best, cap)
        return np.where(self.tried, -np.inf, ei / norm_costs)

    def record(self, index: int, quality: float, ucb_at_pick: float) -> None:
        self.gp.add(index, quality)
        self.tried[index] = True
        self.best = max(self.best, quality)
        self.ecb = min(self.ecb, ucb_at_pick)
        self.gap = self.ecb - quality
        self.last_y = quality

    def record_failure(self, index: int) -> None:
        self.tried[index] = True
        self.failed.append(self.keys[index])

    def retire(self, index: int) -> None:
        self.tried[index] = True
        self.retired.append(self.keys[index])
