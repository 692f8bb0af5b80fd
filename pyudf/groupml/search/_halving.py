"""Successive halving, Hyperband (Li et al.) and ASHA, all in epoch blocks.

Synchronous rungs (SH, Hyperband): a rung is decided when its last member reports.
Members that reach the rung's budget in the same block as the last one are simply
continued (warm, no retraining). A member that reaches the rung budget while the
rung is still incomplete -- which happens when there are fewer slots than configs --
is *paused*: it is stopped so its slot can be refilled, and if the rung later
promotes it, it is proposed again as a new trial with the same params that trains
from scratch to the next rung's budget (Hyperband's resource model; no checkpoint
is assumed). A converged member needs no more training: if promoted, its final
score counts for the next rung at once.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Dict, Iterable, List, Tuple

from ..engine import Decision, Trial
from ..validation import seeded_rng
from . import _space
from ._base import Report, SearchProcedure, register, rng_from_state, rng_state
from ._brackets import halving_rungs, hyperband_brackets
from ._spec import SearchSpec, parse_saved_search


class _Synchronous(SearchProcedure):
    """Shared engine: several brackets of synchronous rungs run concurrently."""

    def __init__(self, spec: SearchSpec, brackets: List[List[Tuple[int, int]]]):
        self.spec = spec
        self._rng = seeded_rng(spec.seed)
        self._next_id = 0
        # bracket: {"rungs": [[n_i, r_i]], "issued": fresh configs handed out,
        #           "results": [{tid: score}] per rung, "decided": [bool] per rung}
        self._brackets = [{"rungs": [list(r) for r in rungs], "issued": 0,
                           "results": [{} for _ in rungs], "decided": [False] * len(rungs)}
                          for rungs in brackets]
        # trial: params, bracket, rung, epoch, score, state (running|waiting|done), active, converged
        self._trials: Dict[int, Dict[str, Any]] = {}
        self._restarts: List[List[Any]] = []   # [bracket, rung, origin trial id]
        self._reasons: Dict[int, str] = {}

    # -- proposals -----------------------------------------------------------------------
    def _new(self, params, b, rung) -> Trial:
        tid = self._next_id
        self._next_id += 1
        self._trials[tid] = {"params": params, "bracket": b, "rung": rung, "epoch": 0, "score": None,
                             "state": "running", "active": True, "converged": False}
        return Trial(tid, copy.deepcopy(params))

    def ask(self, n: int) -> List[Trial]:
        out: List[Trial] = []
        while len(out) < n and self._restarts:
            b, rung, origin = self._restarts.pop(0)
            trial = self._new(copy.deepcopy(self._trials[origin]["params"]), b, rung)
            self._reasons[origin] += f"; promoted, retrained as trial {trial.trial_id}"
            out.append(trial)
        for b, br in enumerate(self._brackets):
            while len(out) < n and br["issued"] < br["rungs"][0][0]:
                br["issued"] += 1
                out.append(self._new(_space.sample(self.spec.space, self._rng), b, 0))
        return out

    # -- results ------------------------------------------------------------------------
    def _arrive(self, tid: int, score: float) -> None:
        rec = self._trials[tid]
        rec["state"], rec["score"] = "waiting", score
        self._brackets[rec["bracket"]]["results"][rec["rung"]][str(tid)] = score

    def _settle(self) -> None:
        """Decide every complete rung; repeat while promotions of converged trials complete more."""
        changed = True
        while changed:
            changed = False
            for b, br in enumerate(self._brackets):
                for i, (n_i, r_i) in enumerate(br["rungs"]):
                    if br["decided"][i] or len(br["results"][i]) < n_i:
                        continue
                    br["decided"][i] = True
                    changed = True
                    ranked = sorted(br["results"][i].items(),
                                    key=lambda kv: (math.inf if kv[1] is None else kv[1], int(kv[0])))
                    last = i == len(br["rungs"]) - 1
                    keep = 0
                    if not last:   # stopped-from-outside members (None) are never promoted
                        alive = sum(1 for _, v in ranked if v is not None)
                        keep = br["rungs"][i + 1][0] = min(br["rungs"][i + 1][0], alive)
                    for pos, (key, _) in enumerate(ranked):
                        self._decide(int(key), b, i, promote=pos < keep, last=last)

    def _decide(self, tid: int, b: int, i: int, *, promote: bool, last: bool) -> None:
        rec = self._trials[tid]
        if rec["state"] == "dead":
            return
        where = f"rung {i} ({self._brackets[b]['rungs'][i][1]} epochs) of bracket {b}"
        if not promote:
            rec["state"] = "done"
            if not rec["converged"]:
                self._reasons[tid] = "budget" if last else f"not promoted at {where}"
            return
        if rec["converged"]:
            rec["state"], rec["rung"] = "waiting", i + 1
            self._brackets[b]["results"][i + 1][str(tid)] = rec["score"]
        elif rec["active"]:
            rec["state"], rec["rung"] = "running", i + 1
        else:  # paused earlier: retrain from scratch in the next rung
            rec["state"] = "done"
            self._restarts.append([b, i + 1, tid])

    def tell_block(self, reports: Iterable[Report]) -> Dict[int, Decision]:
        reports = sorted(reports, key=lambda r: r.trial_id)
        for r in reports:
            rec = self._trials[r.trial_id]
            rec["epoch"], rec["score"] = r.epoch, float(r.score)
            if rec["state"] != "running":
                continue
            if r.converged:
                rec["converged"] = True
                self._reasons[r.trial_id] = "converged"
            target = self._brackets[rec["bracket"]]["rungs"][rec["rung"]][1]
            if r.converged or r.epoch >= target:
                self._arrive(r.trial_id, float(r.score))
        self._settle()
        out = {}
        for r in reports:
            rec = self._trials[r.trial_id]
            if rec["state"] == "running" and rec["active"] and not rec["converged"]:
                out[r.trial_id] = Decision.CONTINUE
                continue
            if rec["state"] == "waiting" and not rec["converged"]:
                i = rec["rung"]
                self._reasons[r.trial_id] = (f"paused at rung {i} "
                                             f"({self._brackets[rec['bracket']]['rungs'][i][1]} epochs) "
                                             f"of bracket {rec['bracket']}")
            rec["active"] = False
            out[r.trial_id] = Decision.STOP
        return out

    def stopped(self, trial_id, epoch, score, reason):
        rec = self._trials[trial_id]
        if not rec["active"]:
            return
        rec["active"] = False
        rec["epoch"] = epoch
        if rec["state"] == "running":
            rec["state"] = "dead"   # ranks last in its rung (None), never promoted
            self._brackets[rec["bracket"]]["results"][rec["rung"]][str(trial_id)] = None
        self._reasons[trial_id] = reason
        self._settle()

    def finished(self) -> bool:
        return not self._restarts and all(all(br["decided"]) for br in self._brackets)

    def budget(self, trial_id: int) -> int:
        rec = self._trials[trial_id]
        rungs = self._brackets[rec["bracket"]]["rungs"]
        return rungs[min(rec["rung"], len(rungs) - 1)][1]

    def reason(self, trial_id: int):
        return self._reasons.get(trial_id)

    def running(self) -> List[int]:
        return sorted(t for t, rec in self._trials.items() if rec["active"])

    @property
    def brackets(self) -> List[List[Tuple[int, int]]]:
        return [[tuple(r) for r in br["rungs"]] for br in self._brackets]

    def state_dict(self) -> Dict[str, Any]:
        return copy.deepcopy({
            "kind": self.kind, "spec": self.spec.to_dict(), "next_id": self._next_id,
            "rng": rng_state(self._rng), "brackets": self._brackets,
            "trials": [dict(rec, id=tid) for tid, rec in sorted(self._trials.items())],
            "restarts": self._restarts,
            "reasons": [[tid, why] for tid, why in sorted(self._reasons.items())]})

    @classmethod
    def _load(cls, state):
        proc = cls(parse_saved_search(state["spec"]))
        proc._next_id = int(state["next_id"])
        proc._rng = rng_from_state(state["rng"])
        proc._brackets = copy.deepcopy(state["brackets"])
        proc._trials = {}
        for rec in copy.deepcopy(state["trials"]):
            proc._trials[int(rec.pop("id"))] = rec
        proc._restarts = copy.deepcopy(state["restarts"])
        proc._reasons = {int(t): why for t, why in state["reasons"]}
        return proc


@register("successive_halving")
class SuccessiveHalving(_Synchronous):
    """One bracket: ``n_trials`` configs at ``R * eta**-s`` blocks, best 1/eta kept each rung."""

    def __init__(self, spec: SearchSpec):
        super().__init__(spec, [halving_rungs(spec.n_trials, spec.max_epochs, spec.eta, spec.min_epochs)])


@register("hyperband")
class Hyperband(_Synchronous):
    """All Hyperband brackets for R = ``max_epochs``, run concurrently (bracket s_max fills slots first)."""

    def __init__(self, spec: SearchSpec):
        super().__init__(spec, hyperband_brackets(spec.max_epochs, spec.eta, spec.min_epochs))


@register("asha")
class ASHA(SearchProcedure):
    """Asynchronous successive halving, decided the moment a rung result arrives.

    Rungs at ``min_epochs * eta**k`` blocks (below ``max_epochs``) and a last rung at
    ``max_epochs``. A trial reaching rung k continues iff its rank among all results
    recorded at rung k so far (this block's included; ties by trial id) is below
    ``max(1, m // eta)`` for m recorded results. Nothing waits, so no trial is paused.
    """

    def __init__(self, spec: SearchSpec):
        self.spec = spec
        self._rng = seeded_rng(spec.seed)
        rungs, r = [], spec.min_epochs
        while r < spec.max_epochs:
            rungs.append(r)
            r *= spec.eta
        self.rungs: List[int] = rungs + [spec.max_epochs]
        self._results: List[List[List[Any]]] = [[] for _ in self.rungs]   # [[tid, score]] per rung
        self._trials: Dict[int, Dict[str, Any]] = {}
        self._next_id = 0

    def ask(self, n):
        out = []
        while len(out) < n and self._next_id < self.spec.n_trials:
            tid = self._next_id
            self._next_id += 1
            params = _space.sample(self.spec.space, self._rng)
            self._trials[tid] = {"params": params, "rung": 0, "epoch": 0, "score": None,
                                 "state": "running", "reason": None}
            out.append(Trial(tid, copy.deepcopy(params)))
        return out

    def tell_block(self, reports):
        reports = sorted(reports, key=lambda r: r.trial_id)
        arrived = []
        out = {}
        for r in reports:
            rec = self._trials[r.trial_id]
            rec["epoch"], rec["score"] = r.epoch, float(r.score)
            if rec["state"] != "running":
                out[r.trial_id] = Decision.STOP
                continue
            if r.converged or r.epoch >= self.rungs[rec["rung"]]:
                self._results[rec["rung"]].append([r.trial_id, float(r.score)])
                arrived.append(r)
            if r.converged:
                rec["state"], rec["reason"] = "done", "converged"
                out[r.trial_id] = Decision.STOP
            else:
                out[r.trial_id] = Decision.CONTINUE
        for r in arrived:
            rec = self._trials[r.trial_id]
            if rec["state"] != "running":
                continue
            k = rec["rung"]
            if k == len(self.rungs) - 1:
                rec["state"], rec["reason"] = "done", "budget"
                out[r.trial_id] = Decision.STOP
                continue
            # a trial stopped by a wrapper (the bandit) counts at its rung, ranked last (None)
            ranked = sorted(self._results[k], key=lambda ts: (ts[1] is None, ts[1] or 0.0, ts[0]))
            rank = [t for t, _ in ranked].index(r.trial_id)
            if rank < max(1, len(ranked) // self.spec.eta):
                rec["rung"] = k + 1
            else:
                rec["state"] = "done"
                rec["reason"] = (f"not promoted at rung {k} ({self.rungs[k]} epochs): "
                                 f"rank {rank + 1} of {len(ranked)}")
                out[r.trial_id] = Decision.STOP
        return out

    def stopped(self, trial_id, epoch, score, reason):
        rec = self._trials[trial_id]
        if rec["state"] == "running":
            rec["state"], rec["reason"], rec["epoch"] = "done", reason, epoch
            if score is not None:
                rec["score"] = float(score)
            results = self._results[rec["rung"]]
            if all(t != trial_id for t, _ in results):
                results.append([trial_id, None])    # ranks last at its rung, as in SH and Hyperband

    def finished(self):
        return self._next_id >= self.spec.n_trials and not self.running()

    def budget(self, trial_id):
        return self.rungs[self._trials[trial_id]["rung"]]

    def reason(self, trial_id):
        return self._trials[trial_id]["reason"]

    def running(self):
        return sorted(t for t, rec in self._trials.items() if rec["state"] == "running")

    def state_dict(self):
        return copy.deepcopy({
            "kind": self.kind, "spec": self.spec.to_dict(), "next_id": self._next_id,
            "rng": rng_state(self._rng), "results": self._results,
            "trials": [dict(rec, id=tid) for tid, rec in sorted(self._trials.items())]})

    @classmethod
    def _load(cls, state):
        proc = cls(parse_saved_search(state["spec"]))
        proc._next_id = int(state["next_id"])
        proc._rng = rng_from_state(state["rng"])
        proc._results = copy.deepcopy(state["results"])
        proc._trials = {}
        for rec in copy.deepcopy(state["trials"]):
            proc._trials[int(rec.pop("id"))] = rec
        return proc
