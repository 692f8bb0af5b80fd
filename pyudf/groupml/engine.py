"""Contracts between the three pure-Python layers that meet in a training run.

* a **Trainer** (``groupml.learners``) owns one dataset (a group's train/validation
  split) and advances many configurations together, one block of data passes at a
  time -- TuPAQ's batching (W is d x k) and Cerebro's epoch granularity;
* a **SearchProcedure** (``groupml.search``) proposes configurations, receives each
  one's validation score after every block, and answers CONTINUE or STOP for it
  (Ray Tune's TrialScheduler shape, Cerebro's epoch-level template);
* the **driver** (``groupml.search.run_search``) loops the two (TuPAQ Alg. 2): fill
  free slots with proposals, run a block, report, drop stopped/converged configs.

Executors that place work on other backends or servers (Kingpin's GAP, MOP) wrap a
Trainer; they never change these signatures. Scores are *losses*: lower is better.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Protocol, runtime_checkable


class Decision(str, enum.Enum):
    CONTINUE = "CONTINUE"
    STOP = "STOP"


@dataclass
class Trial:
    """One configuration under search. ``params`` are the learner's hyperparameters."""

    trial_id: int
    params: Dict[str, Any]
    epochs: int = 0                       # blocks completed
    scores: List[float] = field(default_factory=list)  # validation loss after each block
    status: str = "running"               # running | stopped | converged | failed
    stop_reason: str | None = None
    parent_id: int | None = None          # set on a trial that continues another one's training state
    forked_at: int | None = None          # (population based training): the parent's epoch count then


@runtime_checkable
class Model(Protocol):
    family: str

    def predict(self, X) -> Any: ...          # ndarray (n,)

    def to_bytes(self) -> bytes: ...          # safe format, never pickle


@runtime_checkable
class Trainer(Protocol):
    """Trains many configs over one dataset; every `run` pass is shared by all active configs."""

    passes: int  # data passes performed so far (all active configs share a pass)

    def add(self, trial_id: int, params: Mapping[str, Any]) -> None: ...

    def remove(self, trial_id: int) -> None: ...

    def active(self) -> List[int]: ...

    def run(self, iterations: int) -> None:
        """Advance every active, unconverged config by up to ``iterations`` solver iterations."""

    def converged(self, trial_id: int) -> bool: ...

    def status(self, trial_id: int) -> str:
        """'running', or why the config finished: 'converged', 'max_iter', 'stalled', 'diverged'."""

    def score(self, trial_id: int) -> float:
        """Validation loss of the config's current model (lower is better)."""

    def metrics(self, trial_id: int) -> Dict[str, float]:
        """All validation metrics of the current model, e.g. accuracy, auc, logloss."""

    def model(self, trial_id: int) -> Model: ...

    # Optional (trainers whose configurations' training state can be copied; the search
    # procedures with ``forks = True`` need it): add ``trial_id`` with ``params`` starting
    # from ``parent_id``'s current state, which must have ``epochs`` blocks done.
    # def fork(self, trial_id: int, params: Mapping[str, Any], parent_id: int, epochs: int) -> None: ...
