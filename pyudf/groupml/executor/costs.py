"""The planner's unit costs for a train_groups call, calibrated from earlier runs (catalog I/O).

Reads, through the session, the executed tasks (``groupml.run_schedule``) of the most
recent planner-driven runs of the same model family -- bounded: at most ``MAX_RUNS`` runs
and ``MAX_TASKS`` task rows -- plus what the tasks do not say themselves (the runs'
feature counts and planned workloads, the trials' executed epochs and batch sizes), and
hands them to the pure :func:`groupml.planner.calibrate_unit_costs`. Fields the records
cannot measure fall back to the calibrated GLM cost model (:func:`load_cost_model`, when
``groupml.cost_runs`` has runs) or to the defaults.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Sequence

from .. import catalog
from ..errors import GroupmlError
from ..fitting import default_cost_model
from ..planner import Calibration, UnitCosts, calibrate_unit_costs, check_run, unit_costs_from_model

MAX_RUNS = 5
MAX_TASKS = 20000

#: cost runs the GLM cost model is refitted on (the newest)
MAX_COST_RUNS = 1000


def load_cost_model(session, family: Optional[str] = None, before_run: Optional[int] = None):
    """The cost model refitted on the newest recorded runs (all families when ``family`` is
    None or has no runs of its own); the priors when the table is empty. ``before_run`` (a
    groupml.runs id) counts only runs recorded before that run started: a run resumed later
    plans its groups with the model its first attempt had (the batch size k steers the search)."""
    rows = []
    if family is not None:
        rows = catalog.recent_cost_runs(session, MAX_COST_RUNS, family=family, before_run=before_run)
    if len(rows) < 3:
        rows = catalog.recent_cost_runs(session, MAX_COST_RUNS, before_run=before_run)
    model = default_cost_model()
    model.max_runs = MAX_COST_RUNS
    runs = []
    for r in reversed(rows):
        run = {"n": int(r["n"]), "d": int(r["d"]), "k": int(r["k"]), "workers": int(r["workers"]),
               "seconds": float(r["seconds"]) / int(r["passes"])}
        try:
            runs.append(check_run(run))
        except GroupmlError:
            pass     # a row written by hand (NaN, infinite seconds): planning must not fail on it
    if runs:
        model.add_runs(runs)
    return model


def base_costs(session, model: str, pattern: str, d: int, n_configs: int):
    """(fallback UnitCosts, their source per field): the calibrated TuPAQ cost model for GLMs
    when ``groupml.cost_runs`` holds runs, the defaults otherwise."""
    if pattern != "algebraic":
        return UnitCosts(), {}
    cm = load_cost_model(session, model)
    if not cm.fitted_terms:
        return UnitCosts(), {}
    base = unit_costs_from_model(cm, d, max(1, int(n_configs)))
    src = "cost model (groupml.cost_runs)"
    return base, {f: src for f in ("compute_per_row", "memory_per_row", "model_transfer", "sync_per_step",
                                    "task_startup")}


def load_calibration(session, *, model: str, pattern: str, source: str, features: Sequence[str],
                     search: Dict[str, Any], d: int, n_configs: int, epochs: Optional[int] = None,
                     base: Optional[tuple] = None, max_runs: int = MAX_RUNS,
                     max_tasks: int = MAX_TASKS) -> Calibration:
    """The :class:`Calibration` for planning a run of ``model`` over ``source``: unit costs
    from the latest ``max_runs`` runs of the family; the work ratio only from the complete
    ones with the same source, features and search -- runs on worker backends first, else
    (given the planned ``epochs`` per config) the runs trained in one backend. ``base``: what
    :func:`base_costs` returns for the request, when the caller has it already."""
    cal = _load_calibration(session, model=model, pattern=pattern, source=source, features=features, search=search,
                            d=d, n_configs=n_configs, max_runs=max_runs, max_tasks=max_tasks, base=base)
    if cal.work_ratio is None and epochs is not None and cal.reason is None:
        from ..planner import backend_work_ratio

        records = catalog.backend_runs_work(session, family=model, source=source, features=features, search=search,
                                            limit=max_runs)
        cal.work_ratio, cal.ratio_runs = backend_work_ratio(records, n_configs, epochs)
    return cal


def _load_calibration(session, *, model: str, pattern: str, source: str, features: Sequence[str],
                      search: Dict[str, Any], d: int, n_configs: int, max_runs: int,
                      max_tasks: int, base: Optional[tuple]) -> Calibration:
    base, base_src = base if base is not None else base_costs(session, model, pattern, d, n_configs)
    if not catalog.can_read_run_records(session):   # e.g. explain_train_groups by a role without catalog access
        cal = calibrate_unit_costs([], pattern=pattern, d=d, base=base, base_sources=base_src)
        cal.reason = "this role cannot read the run catalog"
        return cal
    runs = catalog.recent_family_runs(session, family=model, source=source, features=features, search=search,
                                      limit=max_runs)
    ids = [int(r["run_id"]) for r in runs]
    tasks = catalog.runs_tasks(session, ids, max_tasks) if ids else []
    trials = []
    if ids:                 # GLM pass tasks list their configs; whole-group GLM tasks need the trials' passes
        for t in catalog.runs_trials(session, ids, max_tasks):
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


#: a packing scan of synthetic rows (the shape of train_groups' load query): rows, values per row
_SCAN_ROWS, _SCAN_VALUES = 40000, 11
_SCAN_SQL = ("SELECT pg_catalog.count(*) AS n, pg_catalog.sum(pg_catalog.length(b)) AS bytes FROM (SELECT g % 8 AS k, "
             "pg_catalog.string_agg(" + " || ".join(f"pg_catalog.float8send((g * {j + 1})::float8)"
                                                   for j in range(_SCAN_VALUES)) +
             ", ''::bytea) AS b FROM pg_catalog.generate_series(1, " + str(_SCAN_ROWS) + ") g GROUP BY 1) s")

_host_costs = None


def host_costs(session):
    """This host's :class:`~groupml.planner.HostCosts`: the packing scan measured once per
    backend (a scan of synthetic rows, a few tens of milliseconds); the other fields their
    defaults."""
    import time

    from ..planner import host_costs_from_timings

    global _host_costs
    if _host_costs is None:
        t0 = time.perf_counter()
        session.query(_SCAN_SQL)
        _host_costs = host_costs_from_timings(scan_seconds=time.perf_counter() - t0,
                                              scan_values=_SCAN_ROWS * _SCAN_VALUES)
    return _host_costs


def host_costs_for(session, family: str):
    """(:func:`host_costs` with ``run_overhead`` measured from ``family``'s latest complete runs
    on worker backends, the number of runs measured; 0: the default kept -- no such run, or
    a role that cannot read the run catalog)."""
    from ..planner import HostCosts, run_overhead_from_runs

    host = host_costs(session)
    if not catalog.can_read_run_records(session):
        return host, 0
    measured, runs = run_overhead_from_runs(catalog.recent_worker_overheads(session, family, MAX_RUNS), host)
    if measured is None:
        return host, 0
    return HostCosts(**dict(host.to_dict(), run_overhead=measured)), runs
