"""From snapshot group sizes to the planner's Plan and per-group worker tasks (pure Python)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import GroupmlError
from ..fitting import budget_cap
from ..planner import (Calibration, Placement, UnitCosts, check_placement, choose_strategy, constrained_wrap_around,
                       even_split, whole_groups, wrap_around)
from ..search import search_budget
from .core import EXPLICIT_PATTERNS, PATTERN_STRATEGIES
from .snapshot import pieces_for

STRATEGY_CHOICES = ("auto", "grouped", "gtp", "mtp", "dp", "mop")


def workload_of(spec, family) -> Dict[str, int]:
    max_iter = budget_cap(spec.to_dict().get("space", {}), family)
    budget = search_budget(spec, max_iter=max_iter)
    k = max(1, int(budget.in_flight))
    per_config = -(-int(budget.epochs) * int(spec.epoch_iters) // k)
    epochs = max(1, min(per_config, max_iter))
    return {"n_configs": k, "epochs": epochs, "blocks": -(-epochs // max(1, int(spec.epoch_iters)))}


def pass_task_rows(exec_options: Mapping[str, Any], d: int, n_configs: int, epochs: int) -> float:
    """Training rows above which a GLM group kept whole on one worker runs a task per data pass
    (with epoch checkpoints) instead of its whole search as one task: 0 under
    ``whole_group_tasks => false``, else where rows x (features+1) x configs x iterations
    passes ``whole_group_max_work``. The executor and the planner both decide by it."""
    if not exec_options["whole_group_tasks"]:
        return 0.0
    return float(exec_options["whole_group_max_work"]) / ((int(d) + 1) * max(1, int(n_configs)) * max(1, int(epochs)))


def make_plan(group_sizes: Dict[int, int], n_configs: int, epochs: int, workers: int, strategy: str,
              costs: Optional[UnitCosts] = None, pattern: str = "algebraic", batch_size: Optional[int] = None,
              blocks: int = 1, calibration: Optional[Calibration] = None,
              pass_task_rows: float = math.inf, placement: str = "auto"):
    """The planner's Plan over the strategies the executor runs for ``pattern`` (``blocks``:
    epoch blocks per config, :func:`workload_of`).

    With a ``calibration`` (:func:`groupml.executor.costs.load_calibration`) its unit costs
    are used, the epochs (and blocks) expected per config are the budget's scaled by its
    measured work ratio, and the explanation says what was measured. ``pass_task_rows``: GLM
    groups kept whole with more training rows run a task per pass (:func:`pass_task_rows`).
    ``placement`` (``options.placement``): 'wrap_around' forces Kingpin's placement on grouped
    learning for the sequential and sampling patterns, and the grouped estimate is then of it
    (:func:`placement_for` without a plan); GLMs always run constrained wrap-around."""
    sizes = {g: n for g, n in group_sizes.items()}
    if pattern == "sequential" and batch_size is None:
        batch_size = 64
    if calibration is not None:
        costs = calibration.costs
        if calibration.work_ratio is not None:
            epochs = max(1, int(round(epochs * calibration.work_ratio)))
            blocks = max(1, int(round(blocks * calibration.work_ratio)))
    forced = placement_for("grouped", sizes, workers, pattern) if placement != "auto" and pattern != "algebraic" \
        else None
    explicit = strategy in EXPLICIT_PATTERNS
    plan = choose_strategy(sizes, n_configs, epochs, workers, costs, pattern=pattern,
                           strategy="gtp" if explicit else strategy,
                           batch_size=batch_size if pattern == "sequential" else None,
                           candidates=PATTERN_STRATEGIES[pattern], blocks=blocks,
                           pass_task_rows=pass_task_rows if pattern == "algebraic" else math.inf,
                           forced_placement=forced)
    if forced is not None and plan.strategy == "grouped":
        plan.explanation += f" Grouped runs the forced placement '{placement}' (options.placement), priced as such."
    if explicit:
        plan = _mop_plan(plan, sizes, workers)
    if calibration is not None:
        plan.explanation += " " + calibration.summary()
    return plan


def _mop_plan(gtp, sizes: Dict[int, int], workers: int):
    """Model hopper parallelism's plan: every group's training rows cut into ``workers``
    partitions (contiguous ranges of the snapshot's hash-shuffled rows), one per worker;
    its makespan is estimated as task parallelism's (MOP trains every config once per epoch
    over rows held 1/p per worker, so its time approaches task parallelism's)."""
    gtp.strategy = "mop"
    gtp.placement = even_split(sizes, workers)
    gtp.estimates["mop"] = dataclasses.replace(gtp.estimates["gtp"], strategy="mop", placement=gtp.placement)
    gtp.explanation = (f"mop was requested: every group is cut into {workers} partitions (hash buckets of the "
                       f"snapshot's shuffled rows, one per worker); configurations hop from partition to partition "
                       f"under Cerebro's randomized scheduler, so each worker holds 1/{workers} of the rows. Its "
                       f"time is estimated as task parallelism's ({gtp.makespan:.3g} s).")
    return gtp


def placement_for(strategy: str, group_sizes: Dict[int, int], workers: int, pattern: str = "algebraic",
                  plan=None) -> Placement:
    """The placement the executor runs for a strategy (grouped: constrained wrap-around, Alg. 2;
    for the sequential pattern wrap-around with group isolation, Alg. 1).  For the sequential
    and sampling patterns grouped runs the placement its estimate chose (``plan``): the cheaper
    of wrap-around and whole groups, since a split costs hop tasks or a distributed job there.
    GLMs always run constrained wrap-around, a function of the group sizes alone (a resumed
    group keeps its shards); the planner's grouped estimate is of that same placement
    (:func:`groupml.planner.grouped_placement`)."""
    if (strategy == "grouped" and pattern != "algebraic" and plan is not None
            and plan.strategy == "grouped" and plan.placement is not None):
        return plan.placement
    if strategy == "grouped" and pattern == "sequential":
        return wrap_around(group_sizes, workers, group_isolation=True)
    if strategy == "grouped":
        return constrained_wrap_around(group_sizes, workers)
    if strategy in ("dp", "mop"):
        return even_split(group_sizes, workers)
    return whole_groups(group_sizes, workers)


def resumed_plan(prev_strategy: Optional[str], prev_plan: Optional[Mapping[str, Any]], group_sizes: Dict[int, int],
                 workers: int, strategy: str) -> Optional[Tuple[str, Placement]]:
    """(strategy, placement) of a run's earlier attempt, to run again on resume; None when there
    is none or it does not fit this call (another worker count, another explicit strategy, a
    placement that does not cover the snapshot's groups). The plan is a function of unit costs
    measured from runs -- the interrupted attempt's own tasks included -- so planning again
    could move groups to other shards and their checkpoints would no longer apply."""
    if not prev_strategy or not prev_plan or not prev_plan.get("placement"):
        return None
    if strategy != "auto" and strategy != prev_strategy:
        return None
    try:
        placement = Placement.from_dict(prev_plan["placement"])
        if placement.n_workers != workers:
            return None
        check_placement(placement, group_sizes)
    except (GroupmlError, KeyError, TypeError, ValueError):
        return None
    return prev_strategy, placement


def group_tasks(strategy: str, placement: Placement, groups: List[Dict[str, Any]], workers: int,
                pattern: str = "algebraic") -> Dict[int, Dict]:
    """Per group_no: mode and shards [(worker, row_start, n_rows, pieces)] ordered by row_start.

    Modes: ``'configs'`` (mtp: one whole-group copy per worker; each config task goes to one
    of them), ``'steps'`` (dp for the sequential pattern: synchronous per-step data
    parallelism over the shards), ``'mop'`` (model hopper parallelism: configurations hop
    over the group's partitions under Cerebro's randomized scheduler), ``'shards'``
    (everything else)."""
    out: Dict[int, Dict] = {}
    by_no = {g["group_no"]: g for g in groups}
    index = placement.shard_index()
    for g in groups:
        gno = g["group_no"]
        if g["n_train"] <= 0:
            continue
        if strategy == "mtp":
            shards = [(w, 0, g["n_train"], pieces_for(g["train_rows"], 0, g["n_train"])) for w in range(workers)]
            out[gno] = {"mode": "configs", "shards": shards}
            continue
        shards = []
        for w, sh in index.get(gno, []):
            shards.append((w, sh.start, sh.rows, pieces_for(by_no[gno]["train_rows"], sh.start, sh.rows)))
        shards.sort(key=lambda s: s[1])
        mode = "steps" if strategy == "dp" and pattern == "sequential" else "shards"
        out[gno] = {"mode": "mop" if strategy == "mop" else mode, "shards": shards}
    return out
