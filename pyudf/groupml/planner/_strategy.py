"""Makespan estimates for learning over groups (after Kingpin section 3) and the
choice among grouped learning, GTP, MTP and DP.

Every estimator simulates the strategy's placement and returns the estimated busy
time of each worker, so ``explain_train_groups`` can show per-worker load.  Unit
times (seconds) come from :class:`UnitCosts`; they can be measured directly or
derived from the calibrated TuPAQ-style :class:`~groupml.planner.CostModel`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Hashable, List, Mapping, Optional, Sequence

from ._common import DEFAULT_OWNER, check_group_sizes, check_workers, group_order, key_to_json
from ._placement import (Placement, constrained_wrap_around, even_split, whole_groups,
                         wrap_around)
from ..errors import InvalidParameterError
from ..validation import check_choice, check_keys, check_number, fail

PATTERNS = ("algebraic", "sequential", "sampling")
STRATEGIES = ("grouped", "gtp", "mtp", "dp")


@dataclass
class UnitCosts:
    """Unit times in seconds (the paper's f_* functions, assumed linear).

    compute_per_row  one row's gradient work for one config (f_grad(1))
    memory_per_row   reading one cached row for one config (f_mem(1))
    update           one model update step (f_update)
    load_per_row     fetching one row from the snapshot onto a worker (f_network(1))
    disk_per_row     re-reading one row of a local copy (f_disk(1), MTP only)
    sync_per_step    one synchronous aggregation round across workers (DP)
    model_transfer   shipping one model or partial gradient between workers (GAP)
    task_startup     starting one task on a worker (charged per task the executor starts)
    epoch_barrier    one end-of-epoch barrier (grouped learning's f_sync)
    worker_startup   readying one worker backend for a run (connection, first import of
                     the training code); paid once by every worker whatever the strategy
    """

    compute_per_row: float = 1e-6
    memory_per_row: float = 0.0
    update: float = 1e-4
    load_per_row: float = 1e-6
    disk_per_row: float = 0.0
    sync_per_step: float = 1e-3
    model_transfer: float = 1e-4
    task_startup: float = 1e-2
    epoch_barrier: float = 1e-3
    worker_startup: float = 0.0

    def __post_init__(self):
        for name, value in asdict(self).items():
            setattr(self, name, check_number(value, name, "unit costs", ge=0))

    def to_dict(self) -> Dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "UnitCosts":
        check_keys(d, "unit costs", cls.__dataclass_fields__.keys(), cls=InvalidParameterError)
        return cls(**d)


@dataclass
class Workload:
    """What is trained: ``n_configs`` configs for every group, ``epochs`` passes each.

    ``batch_size`` (rows per mini-batch) is required for the sequential pattern,
    whose every mini-batch is one model update (and one sync round under DP).
    ``blocks`` (sequential pattern): the epoch blocks of a config's search; under MTP each
    block is a task of its own that ships the config's training state to its worker and
    back (default 1: one task per group and config).
    ``pass_task_rows`` (algebraic pattern): a group kept whole with more rows than this runs
    one task per data pass, like a split one (the executor's ``whole_group_tasks => false``
    is 0, its ``whole_group_max_work`` a finite bound); up to it the group's whole search
    is one task.
    """

    group_sizes: Dict[Hashable, int]
    n_configs: int
    epochs: int
    pattern: str = "algebraic"
    batch_size: Optional[int] = None
    blocks: int = 1
    pass_task_rows: float = math.inf

    def __post_init__(self):
        owner = DEFAULT_OWNER
        self.group_sizes = check_group_sizes(self.group_sizes, owner)
        self.n_configs = check_number(self.n_configs, "n_configs", owner, ge=1, integer=True)
        self.epochs = check_number(self.epochs, "epochs", owner, ge=1, integer=True)
        check_choice(self.pattern, "pattern", owner, PATTERNS)
        if self.pattern == "sequential" or self.batch_size is not None:
            self.batch_size = check_number(self.batch_size, "batch_size", owner, ge=1, integer=True,
                                           hint="Mini-batch training needs a batch size in rows.")
        self.blocks = check_number(self.blocks, "blocks", owner, ge=1, integer=True,
                                   hint="Epoch blocks per config (tasks per config under MTP for SGD).")
        if not isinstance(self.pass_task_rows, (int, float)) or not self.pass_task_rows >= 0:   # inf: never
            fail("pass_task_rows", owner, "a number >= 0 (inf: never)", self.pass_task_rows,
                 hint="Rows above which a whole GLM group runs a task per pass.")

    def whole_group_tasks(self, rows: int) -> int:
        """Tasks of a GLM group of ``rows`` rows kept whole: 1, or one per pass above ``pass_task_rows``."""
        return self.epochs if (self.pattern == "algebraic" and rows > self.pass_task_rows) else 1

    def steps(self, rows: int) -> int:
        """Model updates per epoch per config over ``rows`` rows."""
        if rows <= 0:
            return 0
        return math.ceil(rows / self.batch_size) if self.pattern == "sequential" else 1

    def to_dict(self) -> Dict[str, Any]:
        return {"group_sizes": [[key_to_json(k), v] for k, v in self.group_sizes.items()],
                "n_configs": self.n_configs, "epochs": self.epochs, "pattern": self.pattern,
                "batch_size": self.batch_size, "blocks": self.blocks}


@dataclass
class StrategyEstimate:
    """One strategy's estimate: busy seconds per worker and a cost breakdown (seconds,
    summed over workers)."""

    strategy: str
    per_worker: List[float]
    makespan: float
    breakdown: Dict[str, float]
    placement: Optional[Placement] = None
    details: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"strategy": self.strategy, "per_worker": list(self.per_worker),
                "makespan": self.makespan, "breakdown": dict(self.breakdown),
                "placement": self.placement.to_dict() if self.placement else None,
                "details": dict(self.details)}


def _row_cost(c: UnitCosts) -> float:
    return c.compute_per_row + c.memory_per_row


def _finish(strategy, per_worker, parts, placement=None, details=None, floor=0.0):
    breakdown = {k: float(sum(v)) for k, v in parts.items()}
    makespan = max(max(per_worker, default=0.0), floor)
    return StrategyEstimate(strategy, [float(x) for x in per_worker], float(makespan), breakdown,
                            placement, details or {})


def estimate_gtp(workload: Workload, n_workers: int, costs: UnitCosts) -> StrategyEstimate:
    """GTP: each group's whole search is one task on one worker; the group's rows are
    loaded once and cached; groups are placed largest first on the least loaded worker."""
    p = check_workers(n_workers)
    w, s, h = workload, workload.n_configs, workload.epochs
    pl = whole_groups(w.group_sizes, p)
    parts = {k: [0.0] * p for k in ("compute", "load", "startup")}
    for k, shards in enumerate(pl.workers):
        parts["startup"][k] += costs.worker_startup
        for sh in shards:
            parts["load"][k] += costs.load_per_row * sh.rows
            parts["startup"][k] += costs.task_startup * w.whole_group_tasks(sh.rows)
            parts["compute"][k] += s * h * (_row_cost(costs) * sh.rows + w.steps(sh.rows) * costs.update)
    per = [sum(parts[x][k] for x in parts) for k in range(p)]
    return _finish("gtp", per, parts, pl)


#: Most (group, configuration) tasks MTP plans: its plan lists every one of them.
MAX_MTP_TASKS = 1_000_000


def _check_mtp_size(n_groups: int, n_configs: int) -> None:
    if n_groups * n_configs > MAX_MTP_TASKS:
        raise InvalidParameterError(
            f"The 'mtp' strategy plans one task per group and configuration, at most {MAX_MTP_TASKS}; got "
            f"{n_groups} groups x {n_configs} configurations = {n_groups * n_configs}",
            hint="Use strategy 'grouped', 'gtp' or 'dp' (or 'auto', which leaves mtp out here), or search fewer "
                 "configurations.")


def estimate_mtp(workload: Workload, n_workers: int, costs: UnitCosts) -> StrategyEstimate:
    """MTP: each (group, config) is one unit of work; units go largest first to the worker that
    would finish them first, counting the data it must fetch.  A worker copies a group's rows once (network) and re-reads its local copy
    from disk for every further config of that group it trains.  A unit is one task, but for
    the sequential pattern a config's ``blocks`` epoch blocks are tasks of their own (each
    starts a task and ships the training state there and back: 2 model transfers), and for
    the algebraic pattern every data pass of a config is a task of its own (the backend's
    L-BFGS sends the weights to the worker holding the copy and gets the gradient back: 2
    model transfers), after one statistics task per group (its columns' moments, on the
    first copy)."""
    p = check_workers(n_workers)
    w, s, h = workload, workload.n_configs, workload.epochs
    _check_mtp_size(len(w.group_sizes), s)
    parts = {k: [0.0] * p for k in ("compute", "load", "disk", "startup")}
    n_tasks = w.blocks if w.pattern == "sequential" else h if w.pattern == "algebraic" else 1
    start = n_tasks * costs.task_startup + (2 * n_tasks * costs.model_transfer if w.pattern != "sampling" else 0.0)
    tasks = []
    for key in group_order(w.group_sizes):
        rows = w.group_sizes[key]
        t = start + h * (_row_cost(costs) * rows + w.steps(rows) * costs.update)
        tasks += [(t, key, j) for j in range(s)]
    parts["startup"] = [costs.worker_startup] * p
    busy = [costs.worker_startup] * p
    hosted: List[Dict[Hashable, int]] = [{} for _ in range(p)]
    assignment: List[List[Any]] = [[] for _ in range(p)]
    for t, key, j in tasks:  # already largest first (stable within a group)
        rows = w.group_sizes[key]

        def data_cost(k):
            return (costs.disk_per_row if key in hosted[k] else costs.load_per_row) * rows

        k = min(range(p), key=lambda k: (busy[k] + t + data_cost(k), k))
        dc = data_cost(k)
        if w.pattern == "algebraic" and not any(key in hk for hk in hosted):
            dc += costs.task_startup            # the group's statistics task, on its first copy
        parts["startup"][k] += start
        parts["compute"][k] += t - start
        parts["disk" if key in hosted[k] else "load"][k] += dc
        hosted[k][key] = hosted[k].get(key, 0) + 1
        assignment[k].append([key_to_json(key), j])
        busy[k] += t + dc
    per = [sum(parts[x][k] for x in parts) for k in range(p)]
    copied = sum(w.group_sizes[g] for hk in hosted for g in hk)
    return _finish("mtp", per, parts, None, {"tasks": assignment, "rows_copied": copied})


def estimate_dp(workload: Workload, n_workers: int, costs: UnitCosts) -> StrategyEstimate:
    """DP: every group is cut across all workers; every config of every group runs on
    all workers at once, one synchronous aggregation round per update step, so each
    step lasts as long as the largest shard.  Every holder of a group starts the group's
    tasks: a task per pass (GLMs), a rank per config (LightGBM), a statistics task and a task
    per mini-batch round (MLP); a group of one shard is one task (its whole search)."""
    p = check_workers(n_workers)
    w, s, h = workload, workload.n_configs, workload.epochs
    pl = even_split(w.group_sizes, p)
    sync = costs.sync_per_step if p > 1 else 0.0
    parts = {k: [0.0] * p for k in ("compute", "load", "sync", "startup")}
    for k in range(p):
        parts["startup"][k] = costs.worker_startup
        parts["load"][k] = costs.load_per_row * sum(sh.rows for sh in pl.workers[k])
    # task starts per group, on every holder, as the executor runs them
    for key, holders in pl.shard_index().items():
        rows = w.group_sizes[key]
        if w.pattern == "sequential":    # a stats task, then a task per round (one step of all configs)
            n_tasks = 1 + h * w.steps(rows)
        elif len(holders) == 1:          # one shard: the whole search is one task (GLMs: pass_task_rows)
            n_tasks = w.whole_group_tasks(rows)
        elif w.pattern == "sampling":    # LightGBM's data-parallel mode: a rank job per config
            n_tasks = s
        else:                            # GLMs: a task per pass
            n_tasks = h
        for k, _ in holders:
            parts["startup"][k] += n_tasks * costs.task_startup
    for key in group_order(w.group_sizes):
        rows = w.group_sizes[key]
        biggest = math.ceil(rows / p)
        steps = w.steps(rows)
        for k in range(p):
            parts["compute"][k] += s * h * (_row_cost(costs) * biggest + steps * costs.update)
            parts["sync"][k] += s * h * steps * sync
    per = [sum(parts[x][k] for x in parts) for k in range(p)]
    return _finish("dp", per, parts, pl)


def grouped_placement(workload: Workload, n_workers: int, *, order: str = "size",
                      **kwargs) -> Placement:
    """The placement grouped learning uses for the workload's access pattern:
    sequential -> wrap-around with group isolation (Alg. 1 as published);
    sampling -> constrained wrap-around (Alg. 2: equal shards for LightGBM);
    algebraic -> constrained wrap-around too, the placement the executor runs for GLMs: it
    depends on the group sizes alone (a resumed group continues over the same shards, so its
    partial sums add up in the same order) and cuts only groups of 1.5 n/p rows or more (a
    split GLM group runs a task per pass instead of one task for its whole search)."""
    if workload.pattern == "sequential":
        return wrap_around(workload.group_sizes, n_workers, group_isolation=True, order=order)
    return constrained_wrap_around(workload.group_sizes, n_workers, **kwargs)


def estimate_grouped(workload: Workload, n_workers: int, costs: UnitCosts,
                     placement: Optional[Placement] = None) -> StrategyEstimate:
    """Grouped learning (wrap-around + GAP): each worker loads only its shards once and
    trains every config on them; a split group ships partial gradients/models between
    its holders (2(k-1) transfers per config and epoch for algebraic/sampling, k-1 hops
    for sequential); one barrier per epoch.  Under group isolation (sequential) a group's
    configs run one at a time, so the largest group bounds the makespan from below.
    Without an explicit placement the estimate is of :func:`grouped_placement`, the one the
    executor runs; for the sequential and sampling patterns also of whole groups (and for
    sequential of wrap-around in key order), the cheapest kept -- the executor runs the
    plan's placement there."""
    p = check_workers(n_workers)
    if placement is None:
        options = [grouped_placement(workload, p)]
        if workload.pattern == "sequential":
            # the row guarantees hold in any visiting order
            options.append(grouped_placement(workload, p, order="key"))
        if workload.pattern != "algebraic":
            # splitting a group costs a task per hop (sequential) or a distributed job
            # (sampling): wrap-around with a capacity no group exceeds -- every group whole,
            # largest first -- is the no-split end of the same family
            options.append(whole_groups(workload.group_sizes, p))
        best = None
        for pl in options:
            est = estimate_grouped(workload, p, costs, pl)
            if best is None or est.makespan < best.makespan:
                best = est
        return best
    w, s, h = workload, workload.n_configs, workload.epochs
    pl = placement
    parts = {k: [0.0] * p for k in ("compute", "load", "transfer", "sync", "startup")}
    for k, shards in enumerate(pl.workers):
        # task starts per group below: a whole group is one task (its whole search; for GLMs
        # above pass_task_rows a task per pass), a split one a task per pass on every holder
        # (GLMs), per hop (MLP) or a rank per config on every holder (LightGBM)
        parts["startup"][k] = costs.worker_startup
        parts["sync"][k] = h * costs.epoch_barrier if p > 1 else 0.0
        for sh in shards:
            parts["load"][k] += costs.load_per_row * sh.rows
            parts["compute"][k] += s * h * _row_cost(costs) * sh.rows
            if w.pattern == "sequential":
                parts["compute"][k] += s * h * w.steps(sh.rows) * costs.update
    index = pl.shard_index()
    for key in group_order(w.group_sizes):
        holders = index.get(key, [])
        if not holders:
            continue
        if w.pattern != "sequential":
            parts["compute"][holders[-1][0]] += s * h * costs.update
        if w.pattern == "algebraic":
            n_tasks = h if len(holders) > 1 else w.whole_group_tasks(w.group_sizes[key])
            for k, _ in holders:
                parts["startup"][k] += n_tasks * costs.task_startup
        elif len(holders) == 1:
            parts["startup"][holders[0][0]] += costs.task_startup
        hops = len(holders) - 1
        if hops:
            if w.pattern == "sequential":      # every visit is a task of its own
                per_hop = costs.model_transfer + costs.task_startup
                each = s * h * hops * per_hop / len(holders)
            elif w.pattern == "sampling":      # one distributed job (a rank task per holder) per config
                each = s * (costs.task_startup + 2 * hops * h * costs.model_transfer / len(holders))
            else:
                each = s * h * 2 * hops * costs.model_transfer / len(holders)
            for k, _ in holders:
                parts["transfer"][k] += each
    per = [sum(parts[x][k] for x in parts) for k in range(p)]
    floor = 0.0
    if w.pattern == "sequential" and w.group_sizes:
        floor = costs.worker_startup + max(s * h * (_row_cost(costs) * r + w.steps(r) * costs.update)
                                           for r in w.group_sizes.values())
    return _finish("grouped", per, parts, pl, {"split_groups": len(pl.split_groups())}, floor)


ESTIMATORS = {"grouped": estimate_grouped, "gtp": estimate_gtp, "mtp": estimate_mtp,
              "dp": estimate_dp}


def estimate_strategy(strategy: str, workload: Workload, n_workers: int,
                      costs: UnitCosts) -> StrategyEstimate:
    check_choice(strategy, "strategy", DEFAULT_OWNER, STRATEGIES)
    return ESTIMATORS[strategy](workload, n_workers, costs)


@dataclass
class Plan:
    """The chosen strategy, its per-worker estimate, every candidate's makespan and why."""

    strategy: str
    makespan: float
    per_worker: List[float]
    explanation: str
    estimates: Dict[str, StrategyEstimate]
    placement: Optional[Placement]
    workload: Workload
    n_workers: int

    def to_dict(self) -> Dict[str, Any]:
        return {"strategy": self.strategy, "makespan": self.makespan,
                "per_worker": list(self.per_worker), "explanation": self.explanation,
                "estimates": {k: v.to_dict() for k, v in self.estimates.items()},
                "placement": self.placement.to_dict() if self.placement else None,
                "workload": self.workload.to_dict(), "n_workers": self.n_workers}


def _explain(best: StrategyEstimate, ests: Dict[str, StrategyEstimate], workload: Workload,
             p: int, forced: bool) -> str:
    n = sum(workload.group_sizes.values())
    nmax = max(workload.group_sizes.values(), default=0)
    ranked = sorted(ests.values(), key=lambda e: e.makespan)
    head = (f"{best.strategy} was requested" if forced else f"{best.strategy} has the lowest estimate")
    others = ", ".join(
        f"{e.strategy} {e.makespan:.3g} s ({e.makespan / best.makespan:.2f}x)" if best.makespan > 0
        else f"{e.strategy} {e.makespan:.3g} s" for e in ranked if e is not best)
    text = f"{head}: {best.makespan:.3g} s on {p} worker(s)"
    if others:
        text += f"; {others}"
    share = (nmax / n) if n else 0.0
    text += (f". Largest group holds {share:.0%} of {n} rows (a worker's fair share is {1 / p:.0%})")
    facts = []
    if share > 1 / p and "gtp" in ests:
        facts.append("whole-group placement leaves workers idle behind the largest group")
    if "dp" in ests and ests["dp"].breakdown.get("sync", 0) > 0.2 * sum(ests["dp"].breakdown.values()):
        facts.append("DP spends most of its extra time in per-step synchronisation")
    if "mtp" in ests and ests["mtp"].details.get("rows_copied", 0) > n:
        facts.append(f"MTP copies {ests['mtp'].details['rows_copied']} rows for {n} distinct rows")
    if "grouped" in ests and ests["grouped"].details.get("split_groups"):
        facts.append(f"grouped splits {ests['grouped'].details['split_groups']} group(s) across workers")
    if facts:
        text += "; " + "; ".join(facts)
    return text + "."


def choose_strategy(group_sizes: Mapping[Hashable, int], n_configs: int, epochs: int,
                    n_workers: int, costs: Optional[UnitCosts] = None, *,
                    pattern: str = "algebraic", batch_size: Optional[int] = None,
                    strategy: str = "auto",
                    candidates: Sequence[str] = STRATEGIES, blocks: int = 1,
                    pass_task_rows: float = math.inf,
                    forced_placement: Optional[Placement] = None) -> Plan:
    """Estimate every candidate strategy and pick the cheapest (``strategy='auto'``) or
    the requested one.  Ties go to the earlier name in ``grouped, gtp, mtp, dp``.
    ``forced_placement``: the placement grouped learning is forced to run (priced instead of
    the cheapest of its own options)."""
    p = check_workers(n_workers)
    check_choice(strategy, "strategy", DEFAULT_OWNER, ("auto",) + STRATEGIES)
    for c in candidates:
        check_choice(c, "strategy", DEFAULT_OWNER, STRATEGIES)
    if not candidates:
        fail("candidates", DEFAULT_OWNER, "a non-empty list of strategies", "[]")
    costs = costs if costs is not None else UnitCosts()
    workload = Workload(group_sizes, n_configs, epochs, pattern, batch_size, blocks, pass_task_rows)
    names = list(dict.fromkeys(list(candidates) + ([strategy] if strategy != "auto" else [])))
    names.sort(key=STRATEGIES.index)
    if "mtp" in names and len(group_sizes) * n_configs > MAX_MTP_TASKS:
        if strategy == "mtp":
            _check_mtp_size(len(group_sizes), n_configs)
        names.remove("mtp")             # auto: too many tasks to plan one by one
        if not names:
            _check_mtp_size(len(group_sizes), n_configs)
    ests = {name: ESTIMATORS[name](workload, p, costs) if name != "grouped" or forced_placement is None
            else estimate_grouped(workload, p, costs, forced_placement) for name in names}
    if strategy == "auto":
        best = min(ests.values(), key=lambda e: (e.makespan, STRATEGIES.index(e.strategy)))
    else:
        best = ests[strategy]
    return Plan(best.strategy, best.makespan, best.per_worker,
                _explain(best, ests, workload, p, strategy != "auto"), ests, best.placement,
                workload, p)


def unit_costs_from_model(model, d: int, k: int = 1, base: Optional[UnitCosts] = None) -> UnitCosts:
    """Derive the per-row and per-transfer unit times from a calibrated CostModel for
    data of ``d`` features trained ``k`` configs per pass; other fields from ``base``.

    compute_per_row = c_compute*d + c_memory*d/k  (one row, one config, batch of k)
    model_transfer  = c_network*d                 (one model of d values)
    sync_per_step   = c_per_worker + c_network*d  (one round: scheduling + exchange)
    task_startup    = c_fixed
    """
    c = model.coefficients
    d = check_number(d, "d", "cost model", ge=1, integer=True)
    k = check_number(k, "k", "cost model", ge=1, integer=True)
    out = UnitCosts(**(base or UnitCosts()).to_dict())
    out.compute_per_row = c["compute"] * d + c["memory"] * d / k + c["elementwise"]
    out.memory_per_row = 0.0
    out.model_transfer = c["network"] * d
    out.sync_per_step = c["per_worker"] + c["network"] * d
    out.task_startup = c["fixed"]
    return out
