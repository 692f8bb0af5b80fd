"""SQL entry points of model hopper parallelism (train_groups with strategy => 'mop')."""

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
