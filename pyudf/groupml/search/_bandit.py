"""TuPAQ's bandit action elimination (Alg. 3) as an early-stopping wrapper.

TuPAQ's planner (Alg. 2) trains the active configurations ``partial_iters`` iterations
at a time and hands every partially trained model to the bandit allocation (Alg. 3),
which keeps a model only if its quality, with slack ``(1 + eps)``, beats the quality of
the best model in the history. We do the same at every checkpoint: whenever a trial has
trained a multiple of ``check_epoch`` blocks (``check_epoch * epoch_iters`` >=
``partial_iters`` iterations) and has not converged, it continues only if

    loss <= best   or   loss < best + epsilon * |best|

where ``best`` is the lowest loss reported by any trial at any block so far, this block
included -- trials that finished, converged or were eliminated count too. For positive
losses the second test is ``loss < (1 + eps) * best``, i.e. TuPAQ's
``quality(m) * (1 + eps) > quality(best)`` with ``quality = 1 / loss`` (TuPAQ reports
error as the inverse of quality; eps = 0.5 keeps models "within 50% of the error of the
best model trained so far"). The first test only matters at the boundary: a trial tied
with the best is never eliminated (also when the best loss is 0). The ``|best|`` form is
scale-free and also orders negative losses (e.g. -AUC) correctly.

Converged trials -- TuPAQ's "fully trained" models, which includes reaching the
iteration cap -- are never eliminated. The wrapped procedure decides everything else and
is told about eliminations through ``stopped``.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Iterable, List, Mapping, Optional

from ..engine import Decision
from ._base import Report, SearchProcedure, register


def bandit_keeps(loss: float, best: float, epsilon: float) -> bool:
    """TuPAQ Alg. 3's test for one partially trained model (see the module docstring)."""
    return loss <= best or loss < best + epsilon * abs(best)


@register("bandit")
class BanditStopping(SearchProcedure):
    def __init__(self, inner: SearchProcedure, *, epsilon: float = 0.5, check_epoch: int = 1):
        self.inner = inner
        self.epsilon = float(epsilon)
        self.check_epoch = int(check_epoch)
        self.best: Optional[float] = None
        self._eliminated: Dict[int, str] = {}
        self.checked = 0   # checks made (one per trial per checkpoint)
        self.stopped_count = 0

    def ask(self, n):
        return self.inner.ask(n)

    def is_checkpoint(self, epoch: int) -> bool:
        return epoch > 0 and epoch % self.check_epoch == 0

    def tell_block(self, reports: Iterable[Report]) -> Dict[int, Decision]:
        reports = sorted(reports, key=lambda r: r.trial_id)
        for r in reports:
            if self.best is None or r.score < self.best:
                self.best = float(r.score)
        out: Dict[int, Decision] = {}
        survivors: List[Report] = []
        for r in reports:
            if self.is_checkpoint(r.epoch) and not r.converged:
                self.checked += 1
                if not bandit_keeps(r.score, self.best, self.epsilon):
                    why = (f"bandit: loss {r.score:.6g} after {r.epoch} epochs is not within "
                           f"epsilon={self.epsilon:g} of the best loss so far {self.best:.6g}")
                    self._eliminated[r.trial_id] = why
                    self.stopped_count += 1
                    self.inner.stopped(r.trial_id, r.epoch, r.score, why)
                    out[r.trial_id] = Decision.STOP
                    continue
            survivors.append(r)
        if survivors:
            out.update(self.inner.tell_block(survivors))
        return out

    def stopped(self, trial_id, epoch, score, reason):
        self.inner.stopped(trial_id, epoch, score, reason)

    def finished(self):
        return self.inner.finished()

    def budget(self, trial_id):
        return self.inner.budget(trial_id)

    def reason(self, trial_id):
        return self._eliminated.get(trial_id) or self.inner.reason(trial_id)

    def running(self):
        return self.inner.running()

    def state_dict(self):
        return copy.deepcopy({
            "kind": self.kind, "inner": self.inner.state_dict(), "epsilon": self.epsilon,
            "check_epoch": self.check_epoch, "best": self.best, "checked": self.checked,
            "stopped_count": self.stopped_count,
            "eliminated": [[t, why] for t, why in sorted(self._eliminated.items())]})

    @classmethod
    def _load(cls, state: Mapping[str, Any]):
        proc = cls(SearchProcedure.from_state(state["inner"]), epsilon=state["epsilon"],
                   check_epoch=state["check_epoch"])
        proc.best = state["best"]
        proc.checked = int(state["checked"])
        proc.stopped_count = int(state["stopped_count"])
        proc._eliminated = {int(t): why for t, why in state["eliminated"]}
        return proc
