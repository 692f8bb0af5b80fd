"""groupml.report(run_id, format) and groupml.scheduler_report(format): the catalog reads.

Everything is read as the calling role through ordinary queries, so the catalog's
row-level security decides what a caller sees (a run of another role is as unknown as a
run that does not exist). The pages are drawn by :mod:`groupml.report` from plain data.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict

from .. import catalog
from ..errors import InvalidParameterError, UndefinedObjectError
from ..validation import shown
from . import pinned, sql_entry

STEPS_SQL = """
SELECT step, tenant, job_id, candidate, family, status, quality, metric, cost_seconds, policy
FROM groupml.scheduler_log ORDER BY step"""


def read_run(session, run_id: int) -> Dict[str, Any]:
    """The plain data of :func:`groupml.report.render_run` for one run, as the caller sees it."""
    rows = catalog.report_run(session, run_id)
    if not rows:
        raise UndefinedObjectError(
            f"No run {run_id} in groupml.runs (or it belongs to a role you may not read)",
            hint="SELECT run_id, kind, source, status FROM groupml.runs ORDER BY run_id DESC; lists the runs you "
                 "may read.")
    run = dict(rows[0])

    def loads(text):
        return None if text is None else json.loads(text)
    trials = [dict(t, params=loads(t["params"]), epoch_scores=list(t["epoch_scores"] or []))
              for t in catalog.report_trials(session, run_id)]
    models = [dict(m, params=loads(m["params"])) for m in catalog.report_models(session, run_id)]
    phases = []
    if run.get("seconds") is not None:
        phases.append(["run (wall clock of its calls)", run["seconds"]])
    if run.get("train_seconds") is not None:
        phases.append(["training (measured)", run["train_seconds"]])
        if run.get("seconds") is not None and run["seconds"] >= run["train_seconds"]:
            phases.append(["reading, planning and writing", run["seconds"] - run["train_seconds"]])
    if run.get("estimated_seconds") is not None:
        phases.append(["training (planner's estimate)", run["estimated_seconds"]])
    for t in catalog.report_task_times(session, run_id):
        phases.append([f"worker tasks '{t['kind']}' ({t['n']}), summed", t["seconds"]])
    return {"run": run, "trials": trials, "models": models, "phases": phases}


def read_scheduler(session) -> Dict[str, Any]:
    """The plain data of :func:`groupml.report.render_scheduler`: the scheduler_log rows the caller may read."""
    return {"observations": [dict(r, params=None) for r in session.query(STEPS_SQL)]}


def _out(data: Dict[str, Any], fmt: str, render) -> str:
    """The page, or with format 'json' the data it is drawn from (NaN and infinities as null)."""
    return json.dumps(_json_safe(data), default=str, sort_keys=True) if fmt == "json" else render(data)


def _json_safe(v):
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


@sql_entry
@pinned
def run_report(run_id, fmt):
    from ..db import backend_session
    from ..report import check_format, render_run

    fmt = check_format(fmt)
    if run_id is None:
        raise InvalidParameterError(f"The 'run_id' value of report must be a run id; got {shown(run_id)}",
                                    hint="SELECT run_id FROM groupml.runs ORDER BY run_id DESC; lists the runs.")
    return _out(read_run(backend_session(), int(run_id)), fmt, render_run)


@sql_entry
@pinned
def scheduler_report(fmt):
    from ..db import backend_session
    from ..report import check_format, render_scheduler

    fmt = check_format(fmt, "scheduler_report")
    return _out(read_scheduler(backend_session()), fmt, render_scheduler)
