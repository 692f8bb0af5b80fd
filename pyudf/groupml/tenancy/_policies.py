"""Tenant-picking policies (the user-picking phase).

A policy sees a read-only :class:`TenantView` per *active* tenant (one that still has
untried candidates) and answers which tenant to serve. After every recorded outcome
the scheduler calls :meth:`TenantPolicy.after_observe` so a policy can update its small
JSON-serializable state (round-robin pointer, HYBRID stall counter). ``select`` never
mutates state, so asking twice gives the same answer.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..errors import InvalidParameterError
from ..validation import check_keys, check_number


@dataclass(frozen=True)
class TenantView:
    name: str
    order: int                     # arrival order
    n_obs: int                     # successful observations so far
    gap: Optional[float]           # empirical gap (sigma bar); None before the first observation
    best: Optional[float]          # best quality so far; None before the first observation
    top_ucb: Optional[float] = None        # largest UCB score among untried candidates
    candidate: Optional[str] = None        # the candidate GP-UCB would train next
    gain_rate: Optional[float] = None      # EIRATE only: max over untried candidates of expected
                                           # improvement / normalized cost; None before the first
                                           # observation or when the policy does not ask for it


def _by_order(view: Sequence[TenantView]) -> List[TenantView]:
    return sorted(view, key=lambda v: v.order)


def greedy_candidate_set(view: Sequence[TenantView]) -> List[str]:
    """Tenants whose gap is at or above the average gap (served tenants only), by arrival."""
    served = [v for v in view if v.gap is not None]
    if not served:
        return []
    gaps = np.array([v.gap for v in served])
    avg = float(gaps.mean())
    tol = 1e-12 * max(1.0, abs(avg))
    return [v.name for v in _by_order(served) if v.gap >= avg - tol]


class TenantPolicy(abc.ABC):
    """Contract: ``select(view, rng) -> tenant name``; state in plain dicts."""

    name = "abstract"
    #: True when the policy reads ``TenantView.gain_rate`` (the scheduler computes it only then).
    needs_gain = False

    @abc.abstractmethod
    def select(self, view: Sequence[TenantView], rng: np.random.Generator) -> str:
        """Pick one tenant among ``view`` (never empty)."""

    def after_observe(self, view: Sequence[TenantView], served: str, served_order: int,
                      total_best: float) -> None:
        """Called after an outcome for tenant ``served`` (arrival ``served_order``) was
        recorded; ``view`` lists the active tenants afterwards, ``total_best`` is the sum
        of best-so-far qualities over all tenants."""

    def on_tenant_added(self) -> None:
        """Called when a tenant joins (the scheduler's tenant set changed)."""

    def state_dict(self) -> Dict[str, Any]:
        return {}

    def load_state(self, state: Dict[str, Any]) -> None:
        check_keys(state, f"{self.name} policy state", [], cls=InvalidParameterError)


class FCFS(TenantPolicy):
    """First come, first served: the earliest tenant until its candidates run out."""

    name = "fcfs"

    def select(self, view, rng):
        return _by_order(view)[0].name


class RandomPolicy(TenantPolicy):
    """Uniformly random active tenant (seeded by the scheduler's per-step generator)."""

    name = "random"

    def select(self, view, rng):
        ordered = _by_order(view)
        return ordered[int(rng.integers(len(ordered)))].name


class RoundRobin(TenantPolicy):
    """Cycle through tenants in arrival order, skipping exhausted ones."""

    name = "roundrobin"

    def __init__(self):
        self.last_order = -1

    def select(self, view, rng):
        ordered = _by_order(view)
        for v in ordered:
            if v.order > self.last_order:
                return v.name
        return ordered[0].name

    def after_observe(self, view, served, served_order, total_best):
        self.last_order = served_order

    def state_dict(self):
        return {"last_order": self.last_order}

    def load_state(self, state):
        check_keys(state, "roundrobin policy state", ["last_order"], cls=InvalidParameterError)
        self.last_order = int(state.get("last_order", -1))


class Greedy(TenantPolicy):
    """ease.ml GREEDY: unserved tenants first; then among tenants whose gap is at or
    above the average, the one with the largest (top UCB - best so far)."""

    name = "greedy"

    def select(self, view, rng):
        fresh = [v for v in _by_order(view) if v.gap is None]
        if fresh:
            return fresh[0].name
        names = set(greedy_candidate_set(view))
        best_v, best_score = None, -np.inf
        for v in _by_order(view):
            if v.name not in names:
                continue
            score = v.top_ucb - v.best
            if score > best_score:
                best_v, best_score = v, score
        return best_v.name


class EIRate(TenantPolicy):
    """Cost-aware tenant picking by expected improvement per unit of cost (not in ease.ml).

    Unserved tenants first (arrival order), as GREEDY. Afterwards the tenant whose best
    untried candidate promises the largest expected improvement of its best quality per
    unit of normalized cost, max_k EI_k / c_k (``TenantView.gain_rate``; EI from the
    tenant's GP posterior, clipped at the scheduler's ``quality_max``); ties: earlier
    arrival. No β enters the comparison between tenants, and the costs are the same
    normalized costs for everybody, so the index is "quality per unit of compute". Model
    picking is unchanged (the tenant then trains its GP-UCB candidate). A view without
    ``gain_rate`` counts as unserved."""

    name = "eirate"
    needs_gain = True

    def select(self, view, rng):
        ordered = _by_order(view)
        fresh = [v for v in ordered if v.gap is None or v.gain_rate is None]
        if fresh:
            return fresh[0].name
        best_v, best_score = ordered[0], -np.inf
        for v in ordered:
            if v.gain_rate > best_score:
                best_v, best_score = v, v.gain_rate
        return best_v.name


class Hybrid(TenantPolicy):
    """GREEDY until the candidate set stays the same and the sum of best-so-far
    qualities does not rise for ``patience`` consecutive outcomes; round-robin after."""

    name = "hybrid"

    def __init__(self, patience: int = 10):
        self.patience = check_number(patience, "patience", "hybrid policy", ge=1, integer=True,
                                     hint="Use the number of stalled steps before switching, e.g. 10.")
        self.mode = "greedy"
        self.stall = 0
        self.prev_set: Optional[List[str]] = None
        self.prev_total: Optional[float] = None
        self._greedy = Greedy()
        self._rr = RoundRobin()

    def select(self, view, rng):
        if self.mode == "roundrobin":
            return self._rr.select(view, rng)
        return self._greedy.select(view, rng)

    def on_tenant_added(self):
        # A new tenant ends any freezing stage: the candidate set is about to change and the
        # newcomer's regret is all to be gained. Back to GREEDY with a fresh stall counter
        # (ease.ml assumes all users arrive together; a long-running server does not).
        self.mode = "greedy"
        self.stall = 0
        self.prev_set = None
        self.prev_total = None

    def after_observe(self, view, served, served_order, total_best):
        self._rr.after_observe(view, served, served_order, total_best)
        if self.mode != "greedy":
            return
        cset = greedy_candidate_set(view)
        improved = self.prev_total is None or total_best > self.prev_total + 1e-12
        if cset == self.prev_set and not improved:
            self.stall += 1
        else:
            self.stall = 0
        self.prev_set, self.prev_total = cset, total_best
        if self.stall >= self.patience:
            self.mode = "roundrobin"

    def state_dict(self):
        return {"mode": self.mode, "stall": self.stall, "prev_set": self.prev_set,
                "prev_total": self.prev_total, "last_order": self._rr.last_order}

    def load_state(self, state):
        check_keys(state, "hybrid policy state",
                   ["mode", "stall", "prev_set", "prev_total", "last_order"], cls=InvalidParameterError)
        self.mode = state.get("mode", "greedy")
        self.stall = int(state.get("stall", 0))
        self.prev_set = state.get("prev_set")
        self.prev_total = state.get("prev_total")
        self._rr.last_order = int(state.get("last_order", -1))


POLICIES = {"greedy": Greedy, "hybrid": Hybrid, "eirate": EIRate, "roundrobin": RoundRobin,
            "random": RandomPolicy, "fcfs": FCFS}


def make_policy(name: str, **options) -> TenantPolicy:
    from ..validation import check_choice

    check_choice(name, "policy", "the scheduler", POLICIES,
                 hint="Pick one of the listed tenant-picking policies; 'hybrid' is the default.")
    if name == "hybrid":
        check_keys(options, "hybrid policy options", ["patience"], cls=InvalidParameterError)
        return Hybrid(**options)
    check_keys(options, f"{name} policy options", [], cls=InvalidParameterError)
    return POLICIES[name]()
