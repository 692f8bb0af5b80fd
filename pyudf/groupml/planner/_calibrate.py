"""Unit costs measured from the tasks earlier runs executed (``groupml.run_schedule``).

The strategy estimators (:mod:`._strategy`) price a run with :class:`UnitCosts`. This
module derives those unit times from what the workers actually did: every task record
says what ran (``kind``), on how many rows, for which configurations, where and from
when to when. Pure Python: plain records in, a :class:`Calibration` out.

Model of one task's duration (seconds), fitted by non-negative least squares on relative
errors, with outliers trimmed::

    t = a[kind]                          fixed cost of a task of this kind
      + compute * rows * configs*epochs  (scaled by d_run / d when runs had other features)
      + update  * model updates          (mini-batches or boosting rounds in the task)
      + load    * rows, first touch      (the first task of a worker on a shard loads it)
      + warm    * first training task of a worker (backend start-up, first import of
                                           numpy / torch / lightgbm; 'stats' tasks excluded)

A column enters the fit only when enough tasks exercise it and it is not (almost) a
linear combination of the others; otherwise its field keeps the fallback (``base``) and
its assumed part is subtracted from the durations first. :attr:`Calibration.sources`
tells, per field, whether it was measured and how.

A second, separate measurement is the **work ratio**: the row-weighted share of the
planned config-epochs (``n_configs x epochs`` per group, the search budget) that the
searches of earlier runs with the same workload really executed -- L-BFGS converging
early, bandits and Hyperband stopping configs. It scales the epochs the planner expects.
Runs on worker backends give it through their tasks; runs in one backend, which record no
tasks, through their trials' configuration-passes (:func:`backend_work_ratio`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np

from ..validation import check_choice, check_number
from ._common import nnls
from ._strategy import PATTERNS, UnitCosts

OWNER = "unit cost calibration"

#: per pattern, the kinds whose fixed cost is ``task_startup`` (first measured wins)
STARTUP_KINDS = {"algebraic": ("pass", "fit"), "sequential": ("fit", "block", "visit"),
                 "sampling": ("fit", "boost", "rank")}

COLUMNS = ("work", "updates", "load", "warm")
COLUMN_FIELD = {"work": "compute_per_row", "updates": "update", "load": "load_per_row",
                "warm": "worker_startup"}


@dataclass
class Calibration:
    """Calibrated unit costs and where each value comes from.

    ``sources[field]`` is ``'measured: ...'`` (derived from task records; the text says
    how), or the fallback's name (``'default'``, ``'cost model'``). ``work_ratio`` is None
    when no comparable earlier run was measured."""

    costs: UnitCosts
    sources: Dict[str, str]
    pattern: str
    n_runs: int = 0
    n_tasks: int = 0
    n_dropped: int = 0
    n_outliers: int = 0
    kinds: Dict[str, int] = field(default_factory=dict)
    coefficients: Dict[str, float] = field(default_factory=dict)
    work_ratio: Optional[float] = None
    ratio_runs: int = 0
    reason: Optional[str] = None

    @property
    def measured(self) -> List[str]:
        return [f for f, s in self.sources.items() if s.startswith("measured")]

    @property
    def calibrated(self) -> bool:
        return bool(self.measured)

    def to_dict(self) -> Dict[str, Any]:
        return {"calibrated": self.calibrated, "pattern": self.pattern, "costs": self.costs.to_dict(),
                "sources": dict(self.sources), "runs": self.n_runs, "tasks": self.n_tasks,
                "dropped": self.n_dropped, "outliers": self.n_outliers, "kinds": dict(self.kinds),
                "coefficients": dict(self.coefficients), "work_ratio": self.work_ratio,
                "ratio_runs": self.ratio_runs}

    def summary(self) -> str:
        """One sentence for explanations: which unit costs were measured, which not."""
        if not self.calibrated:
            why = self.reason
            if why is None:
                why = (f"{self.n_tasks} usable task record(s) of {self.n_runs} earlier run(s) are too few"
                       if self.n_runs else "no earlier run of this model family recorded its tasks")
            text = f"Unit costs are not calibrated ({why}): {_fallback_names(self.sources)}"
        else:
            c = self.costs.to_dict()
            shown = ", ".join(f"{f} {c[f]:.3g} s" for f in self.measured)
            rest = [f for f in self.sources if f not in self.measured]
            text = (f"Unit costs calibrated from {self.n_tasks} task(s) of {self.n_runs} earlier run(s) "
                    f"(groupml.run_schedule): {shown}")
            if rest:
                text += f"; not measured, {_fallback_names({f: self.sources[f] for f in rest})}"
        if self.work_ratio is not None:
            text += (f"; earlier runs of this search ran {self.work_ratio:.0%} of the planned config-epochs "
                     f"({self.ratio_runs} run(s)), so the estimate expects as much")
        return text + "."


def _fallback_names(sources: Mapping[str, str]) -> str:
    by: Dict[str, List[str]] = defaultdict(list)
    for f, s in sources.items():
        by[s].append(f)
    return "; ".join(f"{s} values for {', '.join(fs)}" for s, fs in by.items())


# ---------------------------------------------------------------------------- records
def _clean_tasks(tasks: Iterable[Mapping[str, Any]]) -> Tuple[List[Dict[str, Any]], int]:
    """Valid task records as plain dicts; the count of records left out (missing fields,
    non-finite or negative durations, empty row ranges, malformed trial lists)."""
    out, dropped = [], 0
    for t in tasks:
        try:
            started, finished = float(t["started"]), float(t["finished"])
            rows, start = int(t["n_rows"]), int(t.get("row_start", 0) or 0)
            trials = [int(x) for x in (t.get("trials") or [])]
            rec = {"run_id": t["run_id"], "group_key": str(t["group_key"]), "kind": str(t.get("kind") or "pass"),
                   "pass": int(t.get("pass", 0) or 0), "worker": int(t["worker"]), "row_start": start,
                   "n_rows": rows, "trials": trials, "started": started, "finished": finished}
        except (KeyError, TypeError, ValueError):
            dropped += 1
            continue
        dur = finished - started
        if not (math.isfinite(started) and math.isfinite(dur)) or dur <= 0 or rows <= 0 or start < 0:
            dropped += 1
            continue
        rec["seconds"] = dur
        out.append(rec)
    return out, dropped


def _trial_index(trials: Iterable[Mapping[str, Any]]) -> Dict[tuple, Dict[str, Any]]:
    """(run_id, group_key, trial_id) -> {iterations, batch_size, rounds} (ill-formed records skipped)."""
    out = {}
    for t in trials:
        try:
            key = (t["run_id"], str(t["group_key"]), int(t["trial_id"]))
            params = t.get("params") or {}
            it = t.get("iterations")
            ps = t.get("passes")
            rec = {"iterations": None if it is None else int(it),
                   "passes": None if ps is None else int(ps),
                   "batch_size": params.get("batch_size"), "rounds": params.get("num_boost_round")}
            for k in ("batch_size", "rounds"):
                v = rec[k]
                rec[k] = int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1 else None
            if rec["iterations"] is not None and rec["iterations"] < 0:
                continue
        except (KeyError, TypeError, ValueError):
            continue
        out[key] = rec
    return out


def _block_epochs(tasks: List[Dict[str, Any]], tinfo) -> Dict[int, int]:
    """Epochs each MTP 'block' task trained: up to the config's next block, the last one
    up to the config's executed epochs (``iterations``)."""
    per: Dict[tuple, List[int]] = defaultdict(list)
    for i, t in enumerate(tasks):
        if t["kind"] == "block" and len(t["trials"]) == 1:
            per[(t["run_id"], t["group_key"], t["trials"][0])].append(i)
    out = {}
    for key, idx in per.items():
        idx.sort(key=lambda i: tasks[i]["pass"])
        total = (tinfo.get(key) or {}).get("iterations")
        for a, b in zip(idx, idx[1:] + [None]):
            end = tasks[b]["pass"] if b is not None else total
            if end is not None and end > tasks[a]["pass"]:
                out[a] = end - tasks[a]["pass"]
    return out


def _task_terms(tasks, tinfo, pattern: str, d_ratio: Mapping[Any, float]):
    """Per task: (work rows x config-epochs, model updates, load rows, warm 0/1), or None
    for work kinds whose amount of work is unknown (no trial records)."""
    group_trials: Dict[tuple, List[Dict[str, Any]]] = defaultdict(list)
    for (run, gkey, _tid), rec in tinfo.items():
        group_trials[(run, gkey)].append(rec)
    blocks = _block_epochs(tasks, tinfo)
    first_touch, first_task = set(), set()
    for i in sorted(range(len(tasks)), key=lambda i: tasks[i]["started"]):   # keys hold the run
        t = tasks[i]
        shard = (t["run_id"], t["worker"], t["group_key"], t["row_start"], t["n_rows"])
        if shard not in first_touch:
            first_touch.add(shard)
            t["_first"] = True
        # the first task that trains (or scores) on a worker also loads the learning library
        # (torch, lightgbm); 'stats' tasks need numpy only, 'ports' tasks (free ports for
        # LightGBM ranks) nothing
        if t["kind"] not in ("stats", "ports") and (t["run_id"], t["worker"]) not in first_task:
            first_task.add((t["run_id"], t["worker"]))
            t["_warm"] = True
    out = []
    for i, t in enumerate(tasks):
        rows, kind, dr = t["n_rows"], t["kind"], d_ratio.get(t["run_id"], 1.0)
        work = upd = 0.0
        ok = True
        if kind in ("pass", "visit"):
            if not t["trials"]:
                ok = False
            else:
                work = rows * len(t["trials"])
                if kind == "visit":
                    b = (tinfo.get((t["run_id"], t["group_key"], t["trials"][0])) or {}).get("batch_size")
                    upd = math.ceil(rows / b) if b else math.nan
        elif kind == "block":
            e = blocks.get(i)
            b = (tinfo.get((t["run_id"], t["group_key"], t["trials"][0])) or {}).get("batch_size") \
                if t["trials"] else None
            ok = e is not None
            if ok:
                work = rows * e
                upd = e * math.ceil(rows / b) if b else math.nan
        elif kind == "fit" and pattern == "algebraic":
            # a GLM group's whole search: its work is the configuration-passes of its trials
            recs = group_trials.get((t["run_id"], t["group_key"]), [])
            ps = [r.get("passes") for r in recs]
            ok = bool(recs) and all(x is not None for x in ps)
            if ok:
                work = rows * sum(ps)
        elif kind == "fit":
            recs = group_trials.get((t["run_id"], t["group_key"]), [])
            its = [r["iterations"] for r in recs]
            ok = bool(recs) and all(x is not None for x in its)
            if ok:
                work = rows * sum(its)
                if pattern == "sequential":
                    bs = [r["batch_size"] for r in recs]
                    upd = sum(x * math.ceil(rows / b) for x, b in zip(its, bs)) if all(bs) else math.nan
                else:
                    upd = float(sum(its))
        elif kind in ("rank", "boost"):
            rec = tinfo.get((t["run_id"], t["group_key"], t["trials"][0])) if t["trials"] else None
            rounds = None if rec is None else (rec["rounds"] or rec["iterations"])
            ok = bool(rounds)
            if ok:
                work, upd = rows * rounds, float(rounds)
        if not ok:
            out.append(None)
            continue
        # a whole-group GLM task reads its rows once and then trains a similar number of
        # configuration-passes in every group: its load cannot be told from its compute
        # (collinear columns; NNLS then zeroes one of them at random), so it counts as compute
        load = rows * dr if t.get("_first") and not (kind == "fit" and pattern == "algebraic") else 0.0
        out.append((work * dr, upd, load, 1.0 if t.get("_warm") else 0.0))
    return out


# ---------------------------------------------------------------------------- fitting
def _identifiable(A: np.ndarray, j: int, others: List[int], tol: float) -> bool:
    """Column j of the (weighted) design is not (almost) a combination of ``others``."""
    x = A[:, j]
    nx = np.linalg.norm(x)
    if nx == 0:
        return False
    if not others:
        return True
    B = A[:, others]
    coef, *_ = np.linalg.lstsq(B, x, rcond=None)
    return float(np.linalg.norm(x - B @ coef) / nx) > tol


def _nnls_relative(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin over x >= 0 of sum(((A x - y) / y)^2), columns scaled to unit norm."""
    W = A / y[:, None]
    scale = np.linalg.norm(W, axis=0)
    scale[scale == 0] = 1.0
    sol, _ = nnls(W / scale, np.ones_like(y))
    return sol / scale


def _robust_fit(A: np.ndarray, y: np.ndarray, rounds: int = 2, cut: float = 4.0, max_trim: float = 0.2):
    """NNLS on relative errors, refitted after trimming tasks whose relative residual is
    more than ``cut`` robust standard deviations (1.4826 MAD) off (at most ``max_trim``
    of the tasks per round). Returns (coefficients, kept mask)."""
    keep = np.ones(len(y), dtype=bool)
    sol = _nnls_relative(A, y)
    for _ in range(rounds):
        r = (A @ sol - y) / y
        med = np.median(r[keep])
        mad = 1.4826 * np.median(np.abs(r[keep] - med))
        bad = keep & (np.abs(r - med) > max(cut * mad, 0.05))
        if not bad.any():
            break
        limit = int(max_trim * keep.sum())
        if bad.sum() > limit:
            worst = np.argsort(-np.abs(r - med) * keep)[:limit]
            bad = np.zeros_like(keep)
            bad[worst] = True
        if not bad.any():
            break
        keep &= ~bad
        sol = _nnls_relative(A[keep], y[keep])
    return sol, keep


def calibrate_unit_costs(tasks: Iterable[Mapping[str, Any]], trials: Iterable[Mapping[str, Any]] = (),
                         runs: Iterable[Mapping[str, Any]] = (), *, pattern: str = "algebraic",
                         d: Optional[int] = None, base: Optional[UnitCosts] = None,
                         base_sources: Optional[Mapping[str, str]] = None, min_tasks: int = 8,
                         min_obs: int = 5, collinear_tol: float = 0.05) -> Calibration:
    """:class:`UnitCosts` for ``pattern`` from executed task records.

    ``tasks``: ``groupml.run_schedule`` rows (``run_id, group_key, kind, pass, worker,
    row_start, n_rows, trials, started, finished``). ``trials``: ``run_id, group_key,
    trial_id, iterations`` (GLMs: ``passes``, configuration-passes) and ``params`` (``batch_size``, ``num_boost_round``) -- needed
    for the tasks that do not list their epochs (``fit``, ``block``, ``rank``, ``boost``,
    MLP ``visit`` mini-batches). ``runs``: ``run_id`` with optional ``d`` (features; the
    work of a run with other features is scaled by ``d_run / d``) and optional planned
    ``n_configs`` and ``epochs`` (only for runs of the same workload: they give the work
    ratio; only complete runs belong here).

    Fields that cannot be measured keep ``base`` (default :class:`UnitCosts`), named by
    ``base_sources`` (default ``'default'``). Records with missing fields, non-positive
    or non-finite durations or empty row ranges are ignored (``n_dropped``); fewer than
    ``min_tasks`` usable tasks calibrate nothing. A coefficient counts as measured when at
    least ``min_obs`` tasks exercise it (2 first tasks of workers for ``worker_startup``).
    """
    check_choice(pattern, "pattern", OWNER, PATTERNS)
    min_tasks = check_number(min_tasks, "min_tasks", OWNER, ge=1, integer=True)
    min_obs = check_number(min_obs, "min_obs", OWNER, ge=1, integer=True)
    d = None if d is None else check_number(d, "d", OWNER, ge=1, integer=True)
    base = base or UnitCosts()
    costs = UnitCosts(**base.to_dict())
    sources = {f: (base_sources or {}).get(f, "default") for f in costs.to_dict()}
    runs = list(runs)
    d_ratio = {}
    for r in runs:
        rd = r.get("d")
        if d is not None and isinstance(rd, (int, float)) and rd >= 1:
            d_ratio[r["run_id"]] = float(rd) / d
    clean, dropped = _clean_tasks(tasks)
    tinfo = _trial_index(trials)
    terms = _task_terms(clean, tinfo, pattern, d_ratio)
    used = [(t, x) for t, x in zip(clean, terms) if x is not None]
    dropped += len(clean) - len(used)
    cal = Calibration(costs, sources, pattern, n_runs=len({t["run_id"] for t, _ in used}), n_tasks=len(used),
                      n_dropped=dropped)
    cal.kinds = dict(sorted(_count(t["kind"] for t, _ in used).items()))
    _work_ratio(cal, clean, tinfo, runs)
    if len(used) < min_tasks:
        return cal

    y = np.array([t["seconds"] for t, _ in used])
    X = {c: np.array([x[i] for _, x in used], dtype=float) for i, c in enumerate(COLUMNS)}
    kinds = sorted(cal.kinds)
    K = {k: np.array([1.0 if t["kind"] == k else 0.0 for t, _ in used]) for k in kinds}
    # a column is fitted if enough tasks exercise it, it is known for all of them and it is
    # not (almost) a combination of the others; else its assumed part is taken off y
    fitted: List[str] = []
    for c in COLUMNS:
        col = X[c]
        need = 2 if c == "warm" else min_obs
        if np.isfinite(col).all() and int((col > 0).sum()) >= need:
            fitted.append(c)
    Aw = np.column_stack([K[k] for k in kinds] + [np.nan_to_num(X[c]) for c in fitted]) / y[:, None]
    for c in ("updates", "load", "warm", "work"):     # work is the last to give way
        if c not in fitted:
            continue
        j = len(kinds) + fitted.index(c)
        others = [i for i in range(Aw.shape[1]) if i != j]
        if not _identifiable(Aw, j, others, collinear_tol):
            Aw = np.delete(Aw, j, axis=1)
            fitted.remove(c)
    unresolved = False
    while True:                 # at most twice: again without 'work' when the fit puts it at 0
        target = y.copy()
        for c in COLUMNS:
            if c in fitted or c == "updates":
                continue
            col = np.nan_to_num(X[c])
            on = col > 0
            name = COLUMN_FIELD[c]
            if on.any():
                # a fallback value that alone would take more than half of the measured time of
                # the tasks it applies to contradicts them: cap it there
                cap = 0.5 * float(np.median(y[on] / col[on]))
                if getattr(costs, name) > cap:
                    setattr(costs, name, cap)
                    sources[name] = f"{sources[name]}, capped at half the measured time of the tasks"
            target = target - getattr(costs, name) * col
        A = np.column_stack([K[k] for k in kinds] + [X[c] for c in fitted])
        # the durations the fitted columns explain must stay positive for a relative fit
        ok = target > 0.05 * y
        if int(ok.sum()) < min_tasks:
            cal.reason = (f"the fallback values explain almost all of the measured time of {int((~ok).sum())} of "
                          f"{len(y)} task(s)")
            return cal
        sol, keep = _robust_fit(A[ok], target[ok])
        if "work" in fitted and sol[len(kinds) + fitted.index("work")] <= 0:
            # the tasks' times do not resolve a per-row cost (their per-row part is lost in
            # the noise of the fixed part, and NNLS put it at 0): a measured 0 would price
            # every row as free, so the fallback (capped as above) stands instead
            fitted.remove("work")
            unresolved = True
            continue
        break
    if unresolved:
        sources["compute_per_row"] += " (the measured tasks do not resolve a per-row cost)"
    cal.n_outliers = int((~keep).sum()) + int((~ok).sum())
    coef = {f"fixed:{k}": float(sol[i]) for i, k in enumerate(kinds)}
    coef.update({c: float(sol[len(kinds) + i]) for i, c in enumerate(fitted)})
    cal.coefficients = coef
    counts = cal.kinds
    measured_fixed = {k: coef[f"fixed:{k}"] for k in kinds if counts[k] >= min_obs}

    def put(name, value, how):
        setattr(costs, name, float(max(0.0, value)))
        sources[name] = "measured: " + how

    if "work" in fitted:
        put("compute_per_row", coef["work"], "seconds per row, config and epoch of the tasks that train")
        put("memory_per_row", 0.0, "included in compute_per_row")
    if "load" in fitted:
        put("load_per_row", coef["load"], "extra seconds per row of a worker's first task on a shard")
    if "warm" in fitted:
        put("worker_startup", coef["warm"], "extra seconds of each worker's first training task in a run")
    if "updates" in fitted:
        put("update", coef["updates"], "seconds per mini-batch step or boosting round")
    elif "work" in fitted and pattern != "algebraic":
        put("update", 0.0, "per-step cost included in compute_per_row (not separable)")
    startup = next((k for k in STARTUP_KINDS[pattern] if k in measured_fixed), None)
    if startup is not None:
        put("task_startup", measured_fixed[startup], f"fixed seconds of a '{startup}' task")
    if pattern == "algebraic" and "pass" in measured_fixed:
        passes = [t for t, _ in used if t["kind"] == "pass"]
        kbar = float(np.mean([len(t["trials"]) for t in passes]))
        a = measured_fixed["pass"]
        # the executor sends one pass task per group (per shard) with all k configs; the
        # estimators charge updates and transfers per config and epoch
        put("update", a / kbar, f"a pass task's fixed seconds over its {kbar:.3g} config(s)")
        put("model_transfer", a / (2 * kbar), "half a pass task's fixed seconds per config (out and back)")
        spread = _straggler(passes)
        if len(spread) >= min_obs:
            put("sync_per_step", float(np.median(spread)) / kbar,
                "median wait for the slowest shard of a split pass, per config")
    if pattern == "sequential" and "visit" in measured_fixed and sources["task_startup"].startswith("measured"):
        put("model_transfer", measured_fixed["visit"] - costs.task_startup,
            "fixed seconds of a hop ('visit') beyond task_startup")
    if pattern == "sequential":
        period = _round_period(clean)
        if len(period) >= min_obs:
            steps = [t for t in clean if t["kind"] == "step"]
            kbar = max(1.0, float(np.mean([max(1, len(t["trials"])) for t in steps])))
            put("sync_per_step", float(np.median(period)) / kbar,
                "median period of a data-parallel step round, per config")
    return cal


def _count(items) -> Dict[str, int]:
    out: Dict[str, int] = defaultdict(int)
    for x in items:
        out[x] += 1
    return dict(out)


def _straggler(passes: List[Dict[str, Any]]) -> List[float]:
    """Per pass of a split group: last shard's finish minus the first shard's."""
    by: Dict[tuple, List[float]] = defaultdict(list)
    for t in passes:
        by[(t["run_id"], t["group_key"], t["pass"])].append(t["finished"])
    return [max(v) - min(v) for v in by.values() if len(v) > 1]


def _round_period(tasks: List[Dict[str, Any]]) -> List[float]:
    """DP step rounds: time from one round's start to the next one's, per group."""
    starts: Dict[tuple, Dict[int, float]] = defaultdict(dict)
    for t in tasks:
        if t["kind"] == "step":
            g = starts[(t["run_id"], t["group_key"])]
            g[t["pass"]] = min(g.get(t["pass"], math.inf), t["started"])
    out = []
    for g in starts.values():
        rounds = sorted(g)
        out += [g[b] - g[a] for a, b in zip(rounds, rounds[1:]) if b == a + 1 and g[b] > g[a]]
    return out


def _work_ratio(cal: Calibration, tasks, tinfo, runs) -> None:
    """Median over runs with a planned workload of: executed row-config-epochs / planned."""
    by_run: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
    for t in tasks:
        by_run[t["run_id"]].append(t)
    group_trials: Dict[tuple, Dict[int, Dict[str, Any]]] = defaultdict(dict)
    for (run, gkey, tid), rec in tinfo.items():
        group_trials[(run, gkey)][tid] = rec
    ratios = []
    for r in runs:
        s, h = r.get("n_configs"), r.get("epochs")
        mine = by_run.get(r.get("run_id"), [])
        if not mine or not isinstance(s, (int, float)) or not isinstance(h, (int, float)) or s < 1 or h < 1:
            continue
        planned = executed = 0.0
        groups: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
        for t in mine:
            groups[t["group_key"]].append(t)
        for gkey, ts in groups.items():
            n = max(t["row_start"] + t["n_rows"] for t in ts)
            passes = {(t["pass"], tid) for t in ts if t["kind"] == "pass" for tid in t["trials"]}
            if passes:                      # GLM: every (pass, config) is one config-epoch
                done = len(passes)
            else:                           # the searches' own count; rank/boost train every round
                recs = group_trials.get((r["run_id"], gkey), {})
                full = {tid for t in ts if t["kind"] in ("rank", "boost") for tid in t["trials"]}
                its = [(v["rounds"] or v["iterations"]) if tid in full else v["iterations"]
                       for tid, v in recs.items()]
                if not its or any(x is None for x in its):
                    continue
                done = sum(its)
            planned += n * s * h
            executed += n * done
        if planned > 0 and executed > 0:
            ratios.append(executed / planned)
    if ratios:
        cal.work_ratio = float(min(100.0, max(1e-3, np.median(ratios))))
        cal.ratio_runs = len(ratios)


def backend_work_ratio(records: Iterable[Mapping[str, Any]], n_configs: int,
                       epochs: int) -> Tuple[Optional[float], int]:
    """(work ratio, runs measured) from earlier runs of the same search trained in one backend:
    the median over runs of the row-weighted config-epochs executed over those planned
    (``n_configs x epochs`` per training row); (None, 0) without a usable run.

    ``records``: one per run, ``rows`` (the training rows of its groups) and ``executed``
    (the sum over its groups of training rows x the configuration-passes of the group's
    trials). Records with missing, negative or non-finite values are ignored."""
    s = check_number(n_configs, "n_configs", OWNER, ge=1, integer=True)
    h = check_number(epochs, "epochs", OWNER, ge=1, integer=True)
    ratios = []
    for r in records:
        rows, done = r.get("rows"), r.get("executed")
        if not isinstance(rows, (int, float)) or not isinstance(done, (int, float)):
            continue
        rows, done = float(rows), float(done)
        if math.isfinite(rows) and math.isfinite(done) and rows > 0 and done > 0:
            ratios.append(done / (rows * s * h))
    if not ratios:
        return None, 0
    return float(min(100.0, max(1e-3, np.median(ratios)))), len(ratios)
