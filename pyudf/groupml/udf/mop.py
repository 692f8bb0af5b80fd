"""SQL entry points of model hopper parallelism (train_groups with strategy => 'mop'): replay a
trial, and steer a running run from another session (groupml.executor.steering)."""

from __future__ import annotations

from ..db import backend_session
from ..validation import check_number
from . import pinned, sql_entry
from ._catalog import check_catalog_privileges


@sql_entry
@pinned
def replay(run_id, trial_id, group_key) -> bytes:
    """``groupml.replay(run_id, trial_id, group_key)``: a trial's model retrained sequentially
    from the run's visit log (:func:`groupml.executor.replay.replay_trial`)."""
    from ..executor.replay import replay_trial

    rid = check_number(run_id, "run_id", "replay", ge=1, integer=True, hint="Pass a run_id of groupml.grouped_runs.")
    tid = check_number(trial_id, "trial_id", "replay", ge=0, integer=True,
                       hint="Pass a trial_id of groupml.trials for that run.")
    session = backend_session()
    check_catalog_privileges(session, "replay")
    return replay_trial(session, int(rid), int(tid), group_key)


def _steer(what: str, fn, *args):
    session = backend_session()
    check_catalog_privileges(session, what)
    return fn(session, *args)


@sql_entry
@pinned
def mop_add_trial(run_id, params) -> int:
    """``groupml.mop_add_trial(run_id, params)``: the id of the trial the run will add."""
    from ..executor.steering import file_add_trial

    return _steer("mop_add_trial", file_add_trial, run_id, params)


@sql_entry
@pinned
def mop_stop_trial(run_id, trial_id) -> int:
    """``groupml.mop_stop_trial(run_id, trial_id)``: the request's id."""
    from ..executor.steering import file_stop_trial

    return _steer("mop_stop_trial", file_stop_trial, run_id, trial_id)


@sql_entry
@pinned
def mop_add_workers(run_id, n) -> int:
    """``groupml.mop_add_workers(run_id, n)``: the request's id."""
    from ..executor.steering import file_add_workers

    return _steer("mop_add_workers", file_add_workers, run_id, n)
