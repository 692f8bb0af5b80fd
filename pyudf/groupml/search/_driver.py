"""The planner loop (TuPAQ Alg. 2): keep the trainer's slots full, one epoch block at a time."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..engine import Decision, Trainer, Trial
from ..errors import PrerequisiteStateError
from ..validation import check_number
from ._bandit import BanditStopping
from ._base import Report, SearchProcedure, _REGISTRY
from ._spec import SearchSpec


@dataclass
class EpochEvent:
    """What ``on_epoch`` receives after every block."""

    block: int                       # blocks run so far (1-based)
    passes: int                      # trainer passes so far in this search
    reports: List[Tuple[int, int, Optional[float], str]]  # (trial_id, epoch, score, CONTINUE|STOP|CONVERGED|FAILED)
    active: List[int]                # trials still in the trainer after this block
    trials: Dict[int, Trial]         # every trial so far (live objects; do not mutate)
    procedure: SearchProcedure       # e.g. to save ``procedure.state_dict()``
    requests: List[int] = field(default_factory=list)   # ids of the outside requests applied so far
    added: List[int] = field(default_factory=list)      # trials added by those requests


@dataclass
class SearchResult:
    trials: List[Trial]              # in trial_id order
    best: Optional[Trial]            # lowest final score; ties -> lowest trial_id
    passes: int                      # trainer passes used by this search
    blocks: int = 0                  # epoch blocks run
    procedure_state: Dict[str, Any] = field(default_factory=dict)


def make_procedure(spec: SearchSpec) -> SearchProcedure:
    """Build the procedure a spec asks for, wrapped in bandit early stopping when requested."""
    proc = _REGISTRY[spec.method](spec)
    if spec.early_stopping is not None:
        proc = BanditStopping(proc, epsilon=spec.early_stopping.epsilon, check_epoch=spec.partial_epochs)
    return proc


def best_trial(trials) -> Optional[Trial]:
    scored = [t for t in trials if t.scores and t.status != "failed"]
    if not scored:
        return None
    return min(scored, key=lambda t: (t.scores[-1], t.trial_id))


def search_state(event: EpochEvent) -> Dict[str, Any]:
    """The driver's state after the block of ``event`` (plain JSON, copied): the procedure's
    ``state_dict``, every trial, the active trials, blocks and passes so far. With the
    trainer restored to the same block, ``run_search(SearchProcedure.from_state(
    state["procedure"]), trainer, resume=state, ...)`` continues as if never stopped."""
    import json

    trials = [{"trial_id": t.trial_id, "params": t.params, "epochs": t.epochs, "scores": list(t.scores),
               "status": t.status, "stop_reason": t.stop_reason}
              for _, t in sorted(event.trials.items())]
    return json.loads(json.dumps({"procedure": event.procedure.state_dict(), "trials": trials,
                                  "active": list(event.active), "blocks": event.block,
                                  "passes": event.passes, "requests": list(event.requests),
                                  "added": list(event.added)}))


#: Why a trainer finished a configuration (its ``status``), as trial_info reports it
FINISH_REASONS = {
    "converged": "converged",
    "max_iter": "max_iter: it ran all its iterations (max_iter, epochs or boosting rounds) without reaching tol",
    "stalled": "stalled: the line search found no decrease (the last weights are kept)",
    "diverged": "diverged: a non-finite objective or step (the last finite weights are kept)",
}


def _finished(trainer, trial_id: int):
    """(status, stop_reason) of a configuration its trainer has finished: 'converged' only
    when it reached tol (or, LightGBM, no tree could split); a configuration that ran out of
    iterations, stalled or diverged says so."""
    status = trainer.status(trial_id)
    return status, FINISH_REASONS.get(status, status)


class _Outside:
    """Trials added and stopped from outside the procedure (a session steering the run),
    applied between blocks: ``requests()`` lists every request so far as mappings with
    ``request_id``, ``kind`` ('add_trial' | 'stop_trial'), ``trial_id`` and ``params``; each
    is applied once (its id is kept in the search state). An added trial is the driver's, not
    the procedure's: it takes no slot of the procedure, is never reported to it and runs
    until the trainer finishes it (or a stop request, or ``max_epochs``)."""

    def __init__(self, requests, resume):
        self.requests = requests
        self.applied: List[int] = [int(i) for i in (resume or {}).get("requests", [])]
        self.added: List[int] = [int(t) for t in (resume or {}).get("added", [])]

    def apply(self, procedure, trainer, trials, active, shown) -> None:
        if self.requests is None:
            return
        done = set(self.applied)
        for r in self.requests():
            rid = int(r["request_id"])
            if rid in done:
                continue
            tid = int(r["trial_id"])
            if r["kind"] == "add_trial" and tid not in trials:
                trials[tid] = Trial(tid, dict(r["params"]))
                trainer.add(tid, trials[tid].params)
                active.append(tid)
                self.added.append(tid)
            elif r["kind"] == "stop_trial" and tid in active:
                trial = trials[tid]
                why = f"stopped by request {rid} (groupml.mop_stop_trial) after {trial.epochs} epoch blocks"
                if tid not in self.added:
                    procedure.stopped(tid, trial.epochs, trial.scores[-1] if trial.scores else None, why)
                trial.status, trial.stop_reason = "stopped", why
                trainer.remove(tid)
                active.remove(tid)
                shown.append((tid, trial.epochs, trial.scores[-1] if trial.scores else None, "STOP"))
            self.applied.append(rid)
            done.add(rid)


def run_search(procedure: SearchProcedure, trainer: Trainer, *, slots: int, epoch_iters: int,
               max_epochs: Optional[int] = None,
               on_epoch: Optional[Callable[[EpochEvent], None]] = None,
               resume: Optional[Dict[str, Any]] = None,
               requests: Optional[Callable[[], List[Dict[str, Any]]]] = None) -> SearchResult:
    """Run ``procedure`` on ``trainer`` until it is finished and no trial is active.

    ``slots`` bounds the configs trained together (the batch size k); ``epoch_iters`` is
    the solver iterations per block; ``max_epochs`` (optional) is a hard cap per trial
    on top of the procedure's own budgets. ``on_epoch`` runs after every block;
    anything it raises propagates (cancellation, commit failures). ``resume`` is a
    :func:`search_state` to continue from (procedure and trainer restored to the same block).
    ``requests`` (optional): trials added and stopped from outside, applied before every
    block (see :class:`_Outside`); the ids applied are in every :class:`EpochEvent`.
    """
    slots = check_number(slots, "slots", "search", ge=1, integer=True)
    epoch_iters = check_number(epoch_iters, "epoch_iters", "search", ge=1, integer=True)
    if max_epochs is not None:
        max_epochs = check_number(max_epochs, "max_epochs", "search", ge=1, integer=True)
    trials: Dict[int, Trial] = {}
    active: List[int] = []
    start_passes = trainer.passes
    blocks = 0
    if resume is not None:
        for t in resume["trials"]:
            trials[int(t["trial_id"])] = Trial(int(t["trial_id"]), dict(t["params"]), int(t["epochs"]),
                                               [float(v) for v in t["scores"]], t["status"], t["stop_reason"])
        active = [int(tid) for tid in resume["active"]]
        blocks = int(resume["blocks"])
        start_passes = trainer.passes - int(resume["passes"])
    outside = _Outside(requests, resume)
    stopped_outside: List[Tuple[int, int, Optional[float], str]] = []
    while True:
        outside.apply(procedure, trainer, trials, active, stopped_outside)
        free = slots - len([t for t in active if t not in outside.added])
        if free > 0:
            for trial in procedure.ask(free):
                trials[trial.trial_id] = trial
                trainer.add(trial.trial_id, trial.params)
                active.append(trial.trial_id)
        if not active:
            if procedure.finished():
                if on_epoch is not None and blocks and stopped_outside:
                    # the last trials were stopped from outside: no block follows, so the
                    # requests applied go out with the last block's state once more
                    on_epoch(EpochEvent(blocks, trainer.passes - start_passes, [], [], trials, procedure,
                                        list(outside.applied), list(outside.added)))
                break
            raise PrerequisiteStateError(
                "The search procedure proposed no trial while none was running",
                hint="This is a bug in the search procedure; please report it with the search spec.")
        trainer.run(epoch_iters)
        blocks += 1
        reports = []
        converged = set()
        shown, stopped_outside = stopped_outside, []
        for tid in sorted(active):
            trial = trials[tid]
            score = float(trainer.score(tid))
            trial.epochs += 1
            if not math.isfinite(score):      # diverged: never rank it, never store NaN
                why = f"diverged (validation loss {score}) after {trial.epochs} epochs"
                if tid not in outside.added:
                    procedure.stopped(tid, trial.epochs, None, why)
                trial.status, trial.stop_reason = "failed", why
                trainer.remove(tid)
                active.remove(tid)
                shown.append((tid, trial.epochs, None, "FAILED"))
                continue
            trial.scores.append(score)
            if trainer.converged(tid):
                converged.add(tid)
            reports.append(Report(tid, trial.epochs, score, tid in converged))
        theirs = [r for r in reports if r.trial_id not in outside.added]
        decisions = procedure.tell_block(theirs) if theirs else {}
        for r in reports:
            trial = trials[r.trial_id]
            decision = Decision.CONTINUE if r.trial_id in outside.added else decisions.get(r.trial_id, Decision.STOP)
            if r.trial_id in converged:
                trial.status, trial.stop_reason = _finished(trainer, r.trial_id)
            elif decision is Decision.STOP:
                trial.status = "stopped"
                trial.stop_reason = procedure.reason(r.trial_id) or "stopped by the search procedure"
            elif max_epochs is not None and trial.epochs >= max_epochs:
                if r.trial_id not in outside.added:
                    procedure.stopped(r.trial_id, trial.epochs, r.score, "max_epochs")
                trial.status, trial.stop_reason = "stopped", "max_epochs"
            if trial.status != "running":
                trainer.remove(r.trial_id)
                active.remove(r.trial_id)
            shown.append((r.trial_id, r.epoch, r.score,
                          "CONVERGED" if r.trial_id in converged else
                          ("CONTINUE" if trial.status == "running" else "STOP")))
        if on_epoch is not None:
            on_epoch(EpochEvent(blocks, trainer.passes - start_passes, shown, sorted(active), trials,
                                procedure, list(outside.applied), list(outside.added)))
    for trial in trials.values():   # reasons can gain detail later (e.g. "retrained as trial 12")
        if trial.status == "stopped" and trial.trial_id not in outside.added:
            trial.stop_reason = procedure.reason(trial.trial_id) or trial.stop_reason
    ordered = [trials[t] for t in sorted(trials)]
    return SearchResult(ordered, best_trial(ordered), trainer.passes - start_passes, blocks,
                        procedure.state_dict())
