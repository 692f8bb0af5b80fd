"""The planner's unit costs for a train_groups call, calibrated from earlier runs (catalog I/O).

Reads, through the session, the executed tasks (``groupml.run_schedule``) of the most
recent planner-driven runs of the same model family -- bounded: at most ``MAX_RUNS`` runs
and ``MAX_TASKS`` task rows -- plus what the tasks do not say themselves (the runs'
feature counts and planned workloads, the trials' executed epochs and batch sizes), and
hands them to the pure :func:`groupml.planner.calibrate_unit_costs`. Fields the records
cannot measure fall back to the search issue's calibrated cost model (GLMs, when
``groupml.cost_runs`` has runs) or to the defaults.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Sequence

from ..planner import Calibration, UnitCosts, calibrate_unit_costs, unit_costs_from_model

MAX_RUNS = 5
MAX_TASKS = 20000

_RUNS_SQL = (
    "SELECT r.run_id, pg_catalog.cardinality(r.features) AS d, "
    "(r.status = 'done' AND r.source = $2 AND r.features OPERATOR(pg_catalog.=) $3::text[] AND r.search = $4::jsonb) AS same, "
    "g.plan -> 'workload' AS workload "
    "FROM groupml.runs r JOIN groupml.grouped_runs g ON g.run_id = r.run_id "
    "WHERE r.family = $1 AND EXISTS (SELECT 1 FROM groupml.run_schedule s WHERE s.run_id = r.run_id) "
    "ORDER BY r.run_id DESC LIMIT $5")
_TASKS_SQL = (
    "SELECT run_id, group_key::text AS group_key, kind, pass, worker, row_start, n_rows, trials, started, finished "
    "FROM groupml.run_schedule WHERE run_id = ANY ($1) ORDER BY run_id DESC, started LIMIT $2")
_TRIALS_SQL = (
    "SELECT run_id, group_key::text AS group_key, trial_id, (metrics ->> 'iterations')::bigint AS iterations, "
    "(metrics ->> 'passes')::bigint AS passes, params -> 'batch_size' AS batch_size, "
    "params -> 'num_boost_round' AS num_boost_round "
    "FROM groupml.trials WHERE run_id = ANY ($1) ORDER BY run_id DESC LIMIT $2")


def base_costs(session, model: str, pattern: str, d: int, n_configs: int):
    """(fallback UnitCosts, their source per field): the calibrated TuPAQ cost model of the
    search issue for GLMs when ``groupml.cost_runs`` holds runs, the defaults otherwise."""
    if pattern != "algebraic":
        return UnitCosts(), {}
    from ..udf.search import load_cost_model

    cm = load_cost_model(session, model)
    if not cm.fitted_terms:
        return UnitCosts(), {}
    base = unit_costs_from_model(cm, d, max(1, int(n_configs)))
    src = "cost model (groupml.cost_runs)"
    return base, {f: src for f in ("compute_per_row", "memory_per_row", "model_transfer", "sync_per_step",
                                    "task_startup")}


def load_calibration(session, *, model: str, pattern: str, source: str, features: Sequence[str],
                     search: Dict[str, Any], d: int, n_configs: int, max_runs: int = MAX_RUNS,
                     max_tasks: int = MAX_TASKS) -> Calibration:
    """The :class:`Calibration` for planning a run of ``model`` over ``source``: unit costs
    from the latest ``max_runs`` runs of the family; the work ratio only from the complete
    ones with the same source, features and search."""
    base, base_src = base_costs(session, model, pattern, d, n_configs)
    readable = session.query(
        "SELECT pg_catalog.has_table_privilege('groupml.runs', 'SELECT') AND "
        "pg_catalog.has_table_privilege('groupml.grouped_runs', 'SELECT') AND "
        "pg_catalog.has_table_privilege('groupml.run_schedule', 'SELECT') AND "
        "pg_catalog.has_table_privilege('groupml.trials', 'SELECT') AS ok")[0]["ok"]
    if not readable:                               # e.g. explain_train_groups by a role without catalog access
        cal = calibrate_unit_costs([], pattern=pattern, d=d, base=base, base_sources=base_src)
        cal.reason = "this role cannot read the run catalog"
        return cal
    runs = session.query(_RUNS_SQL, [model, source, list(features), json.dumps(search), int(max_runs)],
                         ["text", "text", "text[]", "text", "integer"])
    ids = [int(r["run_id"]) for r in runs]
    tasks = session.query(_TASKS_SQL, [ids, int(max_tasks)], ["bigint[]", "integer"]) if ids else []
    trials = []
    if ids:                 # GLM pass tasks list their configs; whole-group GLM tasks need the trials' passes
        for t in session.query(_TRIALS_SQL, [ids, int(max_tasks)], ["bigint[]", "integer"]):
            t = dict(t)
            t["params"] = {"batch_size": _num(t.pop("batch_size")), "num_boost_round": _num(t.pop("num_boost_round"))}
            trials.append(t)
    meta = []
    for r in runs:
        m: Dict[str, Any] = {"run_id": int(r["run_id"]), "d": int(r["d"] or 0) or None}
        wl = _json(r["workload"])
        if r["same"] and isinstance(wl, dict):
            m["n_configs"], m["epochs"] = wl.get("n_configs"), wl.get("epochs")
        meta.append(m)
    return calibrate_unit_costs(tasks, trials, meta, pattern=pattern, d=d, base=base, base_sources=base_src)


def _json(v) -> Optional[Any]:
    if v is None:
        return None
    if isinstance(v, (dict, list)):
        return v
    try:
        return json.loads(v)
    except (TypeError, ValueError):
        return None


def _num(v):
    v = _json(v)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
