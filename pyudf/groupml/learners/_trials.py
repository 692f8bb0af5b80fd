"""The per-trial accessors every trainer of ``groupml.engine.Trainer`` shares.

A trainer keeps one record per trial (a config object, a run, a dict); it says how to read
one through :meth:`TrialAccessors._trial_record`, and gets ``converged``, ``status``,
``iterations`` and ``params`` from here. A trial is finished once its status is no longer
``'running'`` (converged, max_iter, stalled or diverged).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, NamedTuple

from ..errors import PrerequisiteStateError, UndefinedObjectError


class TrialRecord(NamedTuple):
    status: str                     # 'running' until the trial is finished
    iterations: int                 # iterations (epochs, boosting rounds) it has run
    params: Mapping[str, Any]       # its validated parameters


def find_trial(active: Mapping[int, Any], retired: Mapping[int, Any], trial_id: int, active_only: bool = False):
    """The record of ``trial_id`` among a trainer's ``active`` trials (and, unless
    ``active_only``, its ``retired`` ones); 42704 when it has none."""
    record = active.get(trial_id)
    if record is None and not active_only:
        record = retired.get(trial_id)
    if record is None:
        raise UndefinedObjectError(f"Trial {trial_id} is not in this trainer",
                                   hint="Add the configuration with add() first.")
    return record


def check_fork(trial_id: int, parent_id: int, done: int, epochs: int) -> None:
    """A fork (population based training) starts from its parent's state after ``epochs``
    epochs: refuse it when the parent has trained ``done`` != ``epochs``."""
    if int(done) != int(epochs):
        raise PrerequisiteStateError(f"Trial {parent_id} has trained {done} epochs, not the {epochs} its fork "
                                     f"{trial_id} starts from", hint="Fork a configuration between epoch blocks.")


class TrialAccessors:
    """``converged``, ``status``, ``iterations`` and ``params`` of an engine.Trainer, read
    from the trial's :class:`TrialRecord` (an unknown trial raises from ``_trial_record``)."""

    def _trial_record(self, trial_id: int) -> TrialRecord:
        raise NotImplementedError

    def converged(self, trial_id: int) -> bool:
        """True once the trial is finished."""
        return self._trial_record(trial_id).status != "running"

    def status(self, trial_id: int) -> str:
        return self._trial_record(trial_id).status

    def iterations(self, trial_id: int) -> int:
        return int(self._trial_record(trial_id).iterations)

    def params(self, trial_id: int) -> Dict[str, Any]:
        return dict(self._trial_record(trial_id).params)
