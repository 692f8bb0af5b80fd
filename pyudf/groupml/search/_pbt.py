"""Population based training (Jaderberg et al., 2017), synchronous, in epoch blocks.

A population of ``population`` configurations trains together. Every
``perturbation_interval`` blocks, once every running member has reported that block, the
members are ranked by validation loss; each member of the bottom ``quantile`` is stopped
and *exploited*: a member of the top quantile is drawn as its parent, and a new trial (the
child) starts from the parent's training state at that epoch with the parent's
hyperparameters *explored* (:func:`explore`). The child takes the stopped member's place.

A child is a new trial with ``parent_id`` and ``forked_at`` set; the driver asks the
trainer to ``fork`` it (copy the parent's state), so the child's epoch count continues from
``forked_at``. The decisions are pure: plain data in, decisions out, one seeded numpy
Generator (its state is saved with the procedure).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..engine import Decision, Trial
from ..validation import seeded_rng
from . import _space
from ._base import Report, register, rng_from_state, rng_state
from ._basic import FixedBudgetProcedure
from ._spec import SearchSpec

#: the factors a perturbed continuous or integer value is multiplied by (one drawn per dimension)
FACTORS = (0.8, 1.2)


def quantile_size(n: int, quantile: float) -> int:
    """Members in the top (and in the bottom) quantile of ``n``: ceil(n * quantile), at most
    n // 2, so that no member is both a parent and replaced; 0 with fewer than 2 members."""
    if n < 2:
        return 0
    return max(1, min(n // 2, math.ceil(n * quantile - 1e-9)))


def exploit(scores: Mapping[int, float], quantile: float, rng) -> List[Tuple[int, int]]:
    """``[(loser, parent)]``: each member of the bottom quantile of ``scores`` (trial id ->
    validation loss, lower is better; ties go to the lower trial id) with the member of the
    top quantile it copies, drawn uniformly with ``rng``. Losers come worst first."""
    ranked = sorted(scores, key=lambda t: (scores[t], t))
    q = quantile_size(len(ranked), quantile)
    if q == 0:
        return []
    top, bottom = ranked[:q], ranked[-q:][::-1]
    return [(loser, top[int(rng.integers(q))]) for loser in bottom]


def _perturb_number(dim, value, rng):
    factor = FACTORS[int(rng.integers(len(FACTORS)))]
    if isinstance(dim, _space.IntRange):
        return int(min(dim.high, max(dim.low, int(round(value * factor)))))
    return float(min(dim.high, max(dim.low, value * factor)))


def explore(params: Mapping[str, Any], space: _space.Space, rng, resample_probability: float) -> Dict[str, Any]:
    """The parent's ``params`` explored: for every dimension of ``space`` (in order), with
    probability ``resample_probability`` a fresh draw from the dimension, otherwise a
    perturbation -- a range value times 0.8 or 1.2 (clipped to the range; integers rounded),
    a list or choice value moved to a neighbouring item (clipped at the ends). Fixed values
    stay. Parameters outside the space are copied."""
    out = dict(params)
    for dim in space:
        if isinstance(dim, _space.Fixed):
            continue
        resample = float(rng.random()) < resample_probability
        if resample:
            out.update(_space.sample((dim,), rng))
        elif isinstance(dim, _space.DISTRIBUTIONS):
            out[dim.name] = _perturb_number(dim, out[dim.name], rng)
        else:
            items = list(dim.items)
            i = _index(items, out[dim.name])
            step = (-1, 1)[int(rng.integers(2))]
            out[dim.name] = items[min(len(items) - 1, max(0, i + step))]
    return out


def _index(items: Sequence[Any], value: Any) -> int:
    for i, item in enumerate(items):
        if item == value and isinstance(item, bool) == isinstance(value, bool):
            return i
    return 0


@register("pbt")
class PopulationBasedTraining(FixedBudgetProcedure):
    """Synchronous PBT over ``spec.population`` members for ``spec.max_epochs`` blocks each.

    The first ``population`` trials are drawn from the space; every later one is a child
    decided at a perturbation epoch and proposed at the next ``ask`` (before any training,
    so its parent is still at the fork epoch)."""

    forks = True          # proposes trials that continue another trial's training state

    def __init__(self, spec: SearchSpec):
        super().__init__(spec, spec.population)
        self._rng = seeded_rng(spec.seed)
        self._forks: List[int] = []                          # children decided, not yet proposed
        self._lineage: Dict[int, Tuple[int, int]] = {}        # child -> (parent, epoch it forked at)

    def _propose(self, trial_id):
        return _space.sample(self.spec.space, self._rng)

    def ask(self, n: int) -> List[Trial]:
        out = super().ask(n)
        while len(out) < n and self._forks:
            tid = self._forks.pop(0)
            parent, at = self._lineage[tid]
            out.append(Trial(tid, copy.deepcopy(self._trials[tid]["params"]), epochs=at, parent_id=parent,
                             forked_at=at))
        return out

    def tell_block(self, reports: Iterable[Report]) -> Dict[int, Decision]:
        out = super().tell_block(reports)
        for loser in self._perturb():
            out[loser] = Decision.STOP
        return out

    def _perturb(self) -> List[int]:
        """At a perturbation epoch reached by every running member: exploit and explore.
        Returns the members replaced."""
        running = self.running()
        if self._forks or not running or self._next_id < self.spec.population:
            return []
        epochs = {self._trials[t]["epoch"] for t in running}
        if len(epochs) != 1:
            return []
        epoch = epochs.pop()
        if epoch % self.spec.perturbation_interval or epoch >= self.spec.max_epochs:
            return []
        losers = []
        for loser, parent in exploit({t: self._trials[t]["score"] for t in running}, self.spec.quantile, self._rng):
            params = explore(self._trials[parent]["params"], self.spec.space, self._rng,
                             self.spec.resample_probability)
            child = self._next_id
            self._next_id += 1
            self._trials[child] = {"params": params, "state": "running", "epoch": epoch, "score": None,
                                   "reason": None}
            self._lineage[child] = (parent, epoch)
            self._forks.append(child)
            self._end(loser, f"exploited at epoch {epoch}: replaced by trial {child}, forked from trial {parent}")
            losers.append(loser)
        return losers

    def lineage(self, trial_id: int) -> Tuple[Optional[int], Optional[int]]:
        """(parent trial id, epoch it forked at) of a child; (None, None) for a first member."""
        return self._lineage.get(trial_id, (None, None))

    def _extra_state(self):
        return {"rng": rng_state(self._rng), "forks": list(self._forks),
                "lineage": [[c, p, at] for c, (p, at) in sorted(self._lineage.items())]}

    def _restore_extra(self, state):
        self._rng = rng_from_state(state["rng"])
        self._forks = [int(t) for t in state["forks"]]
        self._lineage = {int(c): (int(p), int(at)) for c, p, at in state["lineage"]}
