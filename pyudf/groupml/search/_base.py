"""The one search-procedure interface (Cerebro's epoch template, Ray Tune's CONTINUE/STOP)."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional

from ..engine import Decision, Trial

_REGISTRY: Dict[str, type] = {}


def register(kind: str):
    def deco(cls):
        cls.kind = kind
        _REGISTRY[kind] = cls
        return cls
    return deco


@dataclass(frozen=True)
class Report:
    """One trial's result after an epoch block. ``epoch`` counts blocks done (1-based)."""

    trial_id: int
    epoch: int
    score: float                 # validation loss, lower is better
    converged: bool = False      # the trainer says more training will not change the model


class SearchProcedure(abc.ABC):
    """Proposes trials and decides, after every epoch block, which continue.

    Life cycle (driven by :func:`groupml.search.run_search`):

    * ``ask(n)`` returns up to ``n`` new :class:`Trial` objects (fewer, or none, when the
      procedure waits for results);
    * after each block the driver reports every active trial with ``tell_block`` (or
      ``tell`` for one) and removes trials answered ``STOP`` or reported converged;
    * ``stopped(...)`` tells the procedure a trial was ended by someone else (an
      early-stopping wrapper, a global epoch cap);
    * ``finished()`` is True when nothing more will be proposed and no trial is running.

    ``state_dict()`` is plain JSON; ``SearchProcedure.from_state(state)`` rebuilds a
    procedure that makes exactly the decisions the original would have made.
    """

    kind = "abstract"

    # -- proposals ---------------------------------------------------------------
    @abc.abstractmethod
    def ask(self, n: int) -> List[Trial]:
        ...

    # -- results -------------------------------------------------------------------
    @abc.abstractmethod
    def tell_block(self, reports: Iterable[Report]) -> Dict[int, Decision]:
        """Record one block's results (all trials of the block together) and decide each."""

    def tell(self, trial_id: int, epoch: int, score: float, *, converged: bool = False) -> Decision:
        return self.tell_block([Report(trial_id, epoch, float(score), converged)])[trial_id]

    @abc.abstractmethod
    def stopped(self, trial_id: int, epoch: int, score: Optional[float], reason: str) -> None:
        """A trial was stopped from outside the procedure; forget it as running."""

    @abc.abstractmethod
    def finished(self) -> bool:
        ...

    # -- introspection -------------------------------------------------------------
    @abc.abstractmethod
    def budget(self, trial_id: int) -> int:
        """Epoch blocks the trial is currently allowed (its next decision point)."""

    @abc.abstractmethod
    def reason(self, trial_id: int) -> Optional[str]:
        """Why the trial stopped (None while it runs)."""

    @abc.abstractmethod
    def running(self) -> List[int]:
        """Trials proposed and not yet finished, in id order."""

    # -- persistence -----------------------------------------------------------------
    @abc.abstractmethod
    def state_dict(self) -> Dict[str, Any]:
        ...

    @staticmethod
    def from_state(state: Mapping[str, Any]) -> "SearchProcedure":
        kind = state.get("kind")
        if kind not in _REGISTRY:
            from ..errors import PrerequisiteStateError
            raise PrerequisiteStateError(f"Unknown search state kind {kind!r}",
                                         hint="The saved search state was written by another groupml version.")
        return _REGISTRY[kind]._load(state)

    @classmethod
    @abc.abstractmethod
    def _load(cls, state: Mapping[str, Any]) -> "SearchProcedure":
        ...


def rng_state(rng) -> Dict[str, Any]:
    return rng.bit_generator.state


def rng_from_state(state: Mapping[str, Any]):
    import numpy as np

    rng = np.random.default_rng(0)
    rng.bit_generator.state = dict(state)
    return rng
