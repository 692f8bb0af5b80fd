"""One backend or worker backends: the estimate of training every group in the calling
backend (helper processes, no snapshot) beside the worker strategies' (pure Python).

The worker strategies' makespans (:mod:`._strategy`) price the training tasks; a run on
worker backends also builds a training snapshot (one scan that splits, shuffles and packs
every row, shared by the workers) and coordinates its workers. One backend instead reads
every group packed in one scan and trains the groups, largest first, in ``helpers`` helper
processes: the GTP placement over the helpers, without the snapshot, the worker start-up or
the per-task round trips. :func:`choose_backend` compares the two totals.

The fixed costs come from :class:`HostCosts`, measured on the host at first use
(:func:`host_costs_from_timings`); the defaults are one 2-core x86 host's figures.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from ._common import check_workers
from ._placement import whole_groups
from ._strategy import Plan, StrategyEstimate, UnitCosts, Workload, _finish, _row_cost
from ..errors import InvalidParameterError
from ..validation import check_keys, check_number

#: the name the one-backend estimate goes by in plans and explanations
ONE_BACKEND = "backend"


@dataclass
class HostCosts:
    """Costs outside the strategies' tasks, in seconds.

    scan_per_value      one backend's packing scan, per value read (rows x (features + 1))
    snapshot_per_value  building a training snapshot, per value (scan, split, shuffle, pack and
                        write; the workers build it in parallel)
    helper_startup      starting one backend's helper processes (they start together, while
                        the scan runs)
    run_overhead        a run on worker backends beyond its tasks: connecting the workers,
                        planning, recording the plan and schedule
    """

    scan_per_value: float = 1.0e-7
    snapshot_per_value: float = 2.5e-7
    helper_startup: float = 0.6
    run_overhead: float = 0.4

    def __post_init__(self):
        for name, value in asdict(self).items():
            setattr(self, name, check_number(value, name, "host costs", ge=0))

    def to_dict(self) -> Dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "HostCosts":
        check_keys(d, "host costs", cls.__dataclass_fields__.keys(), cls=InvalidParameterError)
        return cls(**d)


def host_costs_from_timings(*, scan_seconds: float, scan_values: int, snapshot_seconds: Optional[float] = None,
                            snapshot_values: Optional[int] = None, helper_seconds: Optional[float] = None,
                            base: Optional[HostCosts] = None) -> HostCosts:
    """:class:`HostCosts` from first-use measurements: a packing scan of ``scan_values``
    values that took ``scan_seconds`` (and, when given, a snapshot-like pack and a helper
    start); fields not measured keep ``base``'s (the defaults). A snapshot not measured is
    priced at the defaults' ratio to the scan."""
    base = base or HostCosts()
    scan_values = check_number(scan_values, "scan_values", "host costs", ge=1, integer=True)
    scan = check_number(scan_seconds, "scan_seconds", "host costs", ge=0) / scan_values
    out = HostCosts(**base.to_dict())
    ratio = base.snapshot_per_value / base.scan_per_value if base.scan_per_value > 0 else 1.0
    out.scan_per_value = scan
    out.snapshot_per_value = scan * ratio
    if snapshot_seconds is not None and snapshot_values:
        out.snapshot_per_value = check_number(snapshot_seconds, "snapshot_seconds", "host costs", ge=0) / \
            check_number(snapshot_values, "snapshot_values", "host costs", ge=1, integer=True)
    if helper_seconds is not None:
        out.helper_startup = check_number(helper_seconds, "helper_seconds", "host costs", ge=0)
    return out


def run_overhead_from_runs(records: Iterable[Mapping[str, Any]], host: HostCosts) -> Tuple[Optional[float], int]:
    """(``run_overhead`` measured, runs used) from earlier runs on worker backends: the median
    over runs of what a run spent beyond its training (``overhead``) less its snapshot as
    ``host`` prices it (``snapshot_per_value`` x ``n_rows`` x (``d`` + 1) / ``workers``), at
    least 0; (None, 0) without a usable record (missing, negative or non-finite values)."""
    got = []
    for r in records:
        vals = [r.get(k) for k in ("overhead", "workers", "d", "n_rows")]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
            continue
        overhead, workers, d, n_rows = (float(v) for v in vals)
        if overhead < 0 or workers < 1 or d < 0 or n_rows < 0:
            continue
        got.append(max(0.0, overhead - host.snapshot_per_value * n_rows * (d + 1) / workers))
    if not got:
        return None, 0
    return float(statistics.median(got)), len(got)


def estimate_one_backend(workload: Workload, helpers: int, costs: UnitCosts, host: HostCosts,
                         d: int) -> StrategyEstimate:
    """Every group trained in the calling backend: one packing scan of all rows, then the
    groups' whole searches placed largest first on ``helpers`` helper processes (started
    while the scan runs, so the start costs max(scan, start)). Per-helper busy seconds;
    ``makespan`` counts the scan."""
    h = check_workers(helpers, name="helpers")
    d = check_number(d, "d", "one-backend estimate", ge=1, integer=True)
    w, s, e = workload, workload.n_configs, workload.epochs
    n_rows = sum(w.group_sizes.values())
    scan = host.scan_per_value * n_rows * (d + 1)
    start = max(scan, host.helper_startup if h > 1 else 0.0)
    pl = whole_groups(w.group_sizes, h)
    parts = {"compute": [0.0] * h, "load": [0.0] * h}
    for k, shards in enumerate(pl.workers):
        for sh in shards:
            parts["compute"][k] += s * e * (_row_cost(costs) * sh.rows + w.steps(sh.rows) * costs.update)
    per = [parts["compute"][k] for k in range(h)]
    parts["load"][0] = start
    est = _finish(ONE_BACKEND, per, parts, pl, {"helpers": h, "scan_seconds": scan})
    est.makespan = float(start + max(per, default=0.0))
    return est


def best_one_backend(workload: Workload, max_helpers: int, costs: UnitCosts, host: HostCosts,
                     d: int) -> StrategyEstimate:
    """The cheaper :func:`estimate_one_backend` of training in the backend itself (1, no
    helper to start) and in ``max_helpers`` helper processes; its ``details['helpers']``
    says which (ties go to fewer processes)."""
    best = estimate_one_backend(workload, 1, costs, host, d)
    h = check_workers(max_helpers, name="helpers")
    if h > 1:
        par = estimate_one_backend(workload, h, costs, host, d)
        if par.makespan < best.makespan:
            best = par
    return best


def executor_overhead(n_rows: int, d: int, workers: int, host: HostCosts) -> float:
    """Seconds a run on ``workers`` worker backends spends beyond its tasks: the snapshot of
    ``n_rows`` rows (built by the workers in parallel) and the run's fixed coordination."""
    p = check_workers(workers)
    return host.snapshot_per_value * n_rows * (d + 1) / p + host.run_overhead


def choose_backend(one: StrategyEstimate, plan: Plan, overhead: float, overhead_runs: int = 0) -> Dict[str, Any]:
    """One backend when its estimate is no more than the worker plan's makespan plus
    ``overhead`` (:func:`executor_overhead`; its coordination measured from
    ``overhead_runs`` earlier runs, 0: the default); returns {'backend': bool, 'one':
    seconds, 'workers': seconds, 'explanation': text}."""
    total = plan.makespan + overhead
    backend = one.makespan <= total
    h = one.details.get("helpers", len(one.per_worker))
    where = f"{h} helper processes" if h > 1 else "in the backend itself"
    what = (f"one backend ({where}, no snapshot) estimated {one.makespan:.3g} s "
            f"against {plan.strategy} on {plan.n_workers} worker backend(s) {total:.3g} s (tasks {plan.makespan:.3g} s "
            f"+ snapshot and coordination {overhead:.3g} s"
            + (f", coordination measured from {overhead_runs} earlier run(s))" if overhead_runs else ")"))
    return {"backend": backend, "one": one.makespan, "workers": total,
            "explanation": ("one backend is cheapest: " if backend else "worker backends are cheaper: ") + what}
