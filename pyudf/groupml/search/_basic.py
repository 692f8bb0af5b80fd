"""Procedures that train every proposed config to the full budget: grid and random."""

from __future__ import annotations

import copy
from typing import Any, Dict, Iterable, List, Mapping, Optional

from ..engine import Decision, Trial
from ..validation import seeded_rng
from . import _space
from ._base import Report, SearchProcedure, register, rng_from_state, rng_state
from ._spec import SearchSpec, parse_saved_search


class FixedBudgetProcedure(SearchProcedure):
    """Shared bookkeeping: ``limit`` configs, each trained ``max_epochs`` blocks unless stopped.

    Subclasses implement ``_propose()`` (next params) and may hook ``_complete``.
    """

    def __init__(self, spec: SearchSpec, limit: int):
        self.spec = spec
        self.limit = limit
        self._next_id = 0
        self._trials: Dict[int, Dict[str, Any]] = {}

    # subclass hooks
    def _propose(self, trial_id: int) -> Dict[str, Any]:
        raise NotImplementedError

    def _complete(self, trial_id: int, score: Optional[float]) -> None:
        """Called once when a trial ends (budget, convergence or outside stop)."""

    def _extra_state(self) -> Dict[str, Any]:
        return {}

    def _restore_extra(self, state: Mapping[str, Any]) -> None:
        pass

    # interface
    def ask(self, n: int) -> List[Trial]:
        out = []
        while len(out) < n and self._next_id < self.limit:
            tid = self._next_id
            params = self._propose(tid)
            self._next_id += 1
            self._trials[tid] = {"params": params, "state": "running", "epoch": 0, "score": None,
                                 "reason": None}
            out.append(Trial(tid, copy.deepcopy(params)))
        return out

    def _end(self, tid: int, reason: str) -> None:
        rec = self._trials[tid]
        rec["state"], rec["reason"] = "done", reason
        self._complete(tid, rec["score"])

    def tell_block(self, reports: Iterable[Report]) -> Dict[int, Decision]:
        out = {}
        for r in sorted(reports, key=lambda r: r.trial_id):
            rec = self._trials[r.trial_id]
            rec["epoch"], rec["score"] = r.epoch, float(r.score)
            if rec["state"] != "running":
                out[r.trial_id] = Decision.STOP
            elif r.converged:
                self._end(r.trial_id, "converged")
                out[r.trial_id] = Decision.STOP
            elif r.epoch >= self.spec.max_epochs:
                self._end(r.trial_id, "budget")
                out[r.trial_id] = Decision.STOP
            else:
                out[r.trial_id] = Decision.CONTINUE
        return out

    def stopped(self, trial_id, epoch, score, reason):
        rec = self._trials[trial_id]
        if rec["state"] == "running":
            rec["epoch"] = epoch
            if score is not None:
                rec["score"] = float(score)
            self._end(trial_id, reason)

    def finished(self) -> bool:
        return self._next_id >= self.limit and not self.running()

    def budget(self, trial_id: int) -> int:
        return self.spec.max_epochs

    def reason(self, trial_id: int):
        return self._trials[trial_id]["reason"]

    def running(self) -> List[int]:
        return sorted(t for t, rec in self._trials.items() if rec["state"] == "running")

    def state_dict(self) -> Dict[str, Any]:
        state = {"kind": self.kind, "spec": self.spec.to_dict(), "next_id": self._next_id,
                 "trials": [dict(rec, id=tid) for tid, rec in sorted(self._trials.items())]}
        state.update(self._extra_state())
        return copy.deepcopy(state)

    @classmethod
    def _load(cls, state):
        proc = cls(parse_saved_search(state["spec"]))
        proc._next_id = int(state["next_id"])
        proc._trials = {}
        for rec in copy.deepcopy(state["trials"]):
            tid = int(rec.pop("id"))
            proc._trials[tid] = rec
        proc._restore_extra(state)
        return proc


@register("grid")
class GridSearch(FixedBudgetProcedure):
    """Every grid point once, in enumeration order (last dimension fastest)."""

    def __init__(self, spec: SearchSpec):
        self._points = list(_space.iter_grid(spec.space))
        super().__init__(spec, len(self._points))

    def _propose(self, trial_id):
        return copy.deepcopy(self._points[trial_id])


@register("random")
class RandomSearch(FixedBudgetProcedure):
    """``n_trials`` configs drawn with a seeded numpy Generator (nested choices included)."""

    def __init__(self, spec: SearchSpec):
        super().__init__(spec, spec.n_trials)
        self._rng = seeded_rng(spec.seed)

    def _propose(self, trial_id):
        return _space.sample(self.spec.space, self._rng)

    def _extra_state(self):
        return {"rng": rng_state(self._rng)}

    def _restore_extra(self, state):
        self._rng = rng_from_state(state["rng"])
