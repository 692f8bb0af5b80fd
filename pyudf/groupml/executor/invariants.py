"""Invariants of grouped learning, checked on an *executed* schedule (pure Python).

A schedule entry is one task a worker ran: ``group_key, pass, worker, shard, row_start,
n_rows, trials, started, finished``.

* data sharding: in every pass of a group the tasks' row ranges tile the group's
  training rows ``[0, n_train)`` exactly, and every shard evaluated the same configs
  (mode 'shards'); in mode 'configs' (MTP) every config ran once per pass on the
  whole group;
* worker exclusivity: a worker never runs two tasks at once;
* config isolation: a config's pass ``p + 1`` starts only after every task of pass
  ``p`` reported (its update was applied once, after the last shard).

Entries carry a ``kind`` (missing = ``'pass'``, the GLM data pass above). The other kinds:

* ``'visit'`` (sequential, MLP hops; ``pass`` = epoch, ``trials`` = [config]): data
  sharding -- each (config, epoch) visits shards whose row ranges tile ``[0, n_train)``;
  config isolation -- a config's visits never overlap in time and its epochs follow one
  another (all visits of epoch e end before epoch e + 1 starts);
* ``'stats'`` (the shards' standardisation moments): the shards tile the group once;
* ``'rank'`` (sampling, one rank of a distributed LightGBM job; ``pass`` = job): the
  ranks of a job tile the group, one per worker (data sharding), one job per config;
* ``'fit'`` (an unsplit group's whole search on one worker): one task over ``[0, n_train)``;
* ``'load'`` (a worker that joined a model hopper run loads a partition it holds a copy of):
  a range of the group's training rows;
* ``'eval'`` (an MLP state scored on the validation rows, or serialised as a model): no rows;
* ``'ports'`` (a worker finding free ports for the LightGBM ranks it will run): no rows;
* ``'block'`` (MTP, MLP: one config's epoch block on one worker; ``pass`` = its first epoch):
  every task sees a whole copy of the group ``[0, n_train)`` (data sharding); a config's
  blocks never overlap in time and their first epochs strictly increase (config isolation);
* ``'boost'`` (MTP, LightGBM: one config's whole boosting run on one worker): a whole copy
  of the group; every config is trained by exactly one task (config isolation);
* ``'step'`` (DP, MLP: one worker's part of a synchronous mini-batch step of the configs in
  ``trials``; ``pass`` = the group's step round): checked like GLM passes -- every round's
  tasks tile ``[0, n_train)`` on distinct workers with the same configs, rounds are numbered
  from 0 and round r + 1 starts only after every task of round r reported.

Worker exclusivity is checked across every kind.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, List, Mapping


def schedule_violations(entries: Iterable[Mapping[str, Any]], n_train: Mapping[str, int],
                        modes: Mapping[str, str]) -> List[str]:
    """Every violation of the invariants above in ``entries`` (empty: the schedule is sound);
    ``n_train``: training rows per group key, ``modes``: task mode per group key."""
    entries = list(entries)
    out: List[str] = []
    by_worker = defaultdict(list)
    for e in entries:
        by_worker[e["worker"]].append((e["started"], e["finished"], e["group_key"], e["pass"]))
    for w, spans in by_worker.items():
        spans.sort()
        for a, b in zip(spans, spans[1:]):
            if b[0] < a[1]:
                out.append(f"worker exclusivity: worker {w} started {b[2]} pass {b[3]} at {b[0]:.6f} before "
                           f"{a[2]} pass {a[3]} finished at {a[1]:.6f}")
    out.extend(_task_kind_violations([e for e in entries if e.get("kind", "pass") not in ("pass", "step")], n_train))
    out.extend(_rounds([e for e in entries if e.get("kind", "pass") == "pass"], n_train, modes, "pass"))
    out.extend(_rounds([e for e in entries if e.get("kind") == "step"], n_train, {}, "step"))
    return out


def _rounds(entries: List[Mapping[str, Any]], n_train: Mapping[str, int], modes: Mapping[str, str],
            what: str) -> List[str]:
    """Synchronous rounds (GLM passes, DP steps): tiling, same configs, barrier between rounds."""
    out: List[str] = []
    by_pass = defaultdict(list)
    for e in entries:
        by_pass[(e["group_key"], e["pass"])].append(e)
    per_group = defaultdict(dict)
    for (g, p), tasks in by_pass.items():
        per_group[g][p] = tasks
        n = n_train[g]
        if modes.get(g, "shards") == "configs":
            seen = [t for task in tasks for t in task["trials"]]
            if len(seen) != len(set(seen)):
                out.append(f"config isolation: group {g} pass {p} ran a config twice")
            for task in tasks:
                if task["row_start"] != 0 or task["n_rows"] != n:
                    out.append(f"data sharding: MTP task of group {g} pass {p} saw rows "
                               f"[{task['row_start']}, {task['row_start'] + task['n_rows']}) not [0, {n})")
            continue
        spans = sorted((t["row_start"], t["row_start"] + t["n_rows"]) for t in tasks)
        pos = 0
        for lo, hi in spans:
            if lo != pos:
                out.append(f"data sharding: group {g} {what} {p} rows [{pos}, {lo}) missing or overlapping")
            pos = hi
        if pos != n:
            out.append(f"data sharding: group {g} {what} {p} covered rows [0, {pos}) of {n}")
        trial_sets = {tuple(sorted(t["trials"])) for t in tasks}
        if len(trial_sets) != 1:
            out.append(f"data sharding: shards of group {g} {what} {p} evaluated different configs")
        if len({t["worker"] for t in tasks}) != len(tasks):
            out.append(f"data sharding: group {g} {what} {p} put two shards on one worker")
    for g, passes in per_group.items():
        ps = sorted(passes)
        if ps != list(range(len(ps))):
            out.append(f"config isolation: group {g} {what} numbers {ps} are not consecutive from 0")
        for p in ps[:-1]:
            end = max(t["finished"] for t in passes[p])
            start = min(t["started"] for t in passes[p + 1])
            if start < end:
                out.append(f"config isolation: group {g} {what} {p + 1} started at {start:.6f} before {what} {p} "
                           f"finished at {end:.6f}")
    return out


def _tiles(tasks, n: int) -> bool:
    pos = 0
    for lo, hi in sorted((t["row_start"], t["row_start"] + t["n_rows"]) for t in tasks):
        if lo != pos:
            return False
        pos = hi
    return pos == n


def _by_config(tasks) -> "defaultdict[int, list]":
    """The tasks of each config (a task serves every config in its ``trials``)."""
    by_cfg = defaultdict(list)
    for t in tasks:
        for tid in t["trials"]:
            by_cfg[tid].append(t)
    return by_cfg


def _whole_group_fit(g: str, n: int, tasks, kind: str) -> List[str]:
    """'fit': an unsplit group's search saw the whole group."""
    return [f"data sharding: the one-worker task of group {g} saw rows [{t['row_start']}, "
            f"{t['row_start'] + t['n_rows']}) not [0, {n})" for t in tasks if t["row_start"] != 0 or t["n_rows"] != n]


def _mtp_tasks(g: str, n: int, tasks, kind: str) -> List[str]:
    """'block' / 'boost' (MTP): every task sees a whole copy of the group; a config's tasks
    never overlap and move forward in epochs; a LightGBM config is boosted by one task."""
    out = [f"data sharding: MTP {kind} task of group {g} saw rows [{t['row_start']}, "
           f"{t['row_start'] + t['n_rows']}) not a whole copy [0, {n})"
           for t in tasks if t["row_start"] != 0 or t["n_rows"] != n]
    for tid, ts in _by_config(tasks).items():
        if kind == "boost" and len(ts) > 1:
            out.append(f"config isolation: config {tid} of group {g} was trained by {len(ts)} MTP tasks")
        ts = sorted(ts, key=lambda t: t["started"])
        for a, b in zip(ts, ts[1:]):
            if b["started"] < a["finished"]:
                out.append(f"config isolation: config {tid} of group {g} started a block at "
                           f"{b['started']:.6f} while its block from epoch {a['pass']} ran until "
                           f"{a['finished']:.6f}")
            if b["pass"] <= a["pass"]:
                out.append(f"config isolation: config {tid} of group {g} ran epoch {b['pass']} again "
                           f"after a block from epoch {a['pass']}")
    return out


def _shard_stats(g: str, n: int, tasks, kind: str) -> List[str]:
    """'stats': the shards' moments cover the group once."""
    return [] if _tiles(tasks, n) else [f"data sharding: the shard statistics of group {g} do not tile [0, {n})"]


def _lgbm_ranks(g: str, n: int, tasks, kind: str) -> List[str]:
    """'rank': each distributed LightGBM job's ranks tile the group on distinct workers; one
    job per config."""
    out: List[str] = []
    jobs = defaultdict(list)
    for t in tasks:
        jobs[t["pass"]].append(t)
    seen = defaultdict(int)
    for j, ranks in jobs.items():
        if not _tiles(ranks, n):
            out.append(f"data sharding: the ranks of LightGBM job {j} of group {g} do not tile [0, {n})")
        if len({t["worker"] for t in ranks}) != len(ranks):
            out.append(f"data sharding: LightGBM job {j} of group {g} put two ranks on one worker")
        for tid in {t for r in ranks for t in r["trials"]}:
            seen[tid] += 1
    for tid, k in seen.items():
        if k > 1:
            out.append(f"config isolation: config {tid} of group {g} was trained by {k} LightGBM jobs")
    return out


def _mlp_visits(g: str, n: int, tasks, kind: str) -> List[str]:
    """'visit' (MLP hops): each (config, epoch) visits every row once; a config's visits
    never overlap in time and its epochs never go back."""
    out: List[str] = []
    for tid, vs in _by_config(tasks).items():
        by_epoch = defaultdict(list)
        for v in vs:
            by_epoch[v["pass"]].append(v)
        for ep, ev in by_epoch.items():
            if not _tiles(ev, n):
                out.append(f"data sharding: config {tid} of group {g} epoch {ep} did not visit every "
                           f"row of [0, {n}) exactly once")
        vs = sorted(vs, key=lambda v: v["started"])
        for a, b in zip(vs, vs[1:]):
            if b["started"] < a["finished"]:
                out.append(f"config isolation: config {tid} of group {g} visited shard {b['shard']} "
                           f"at {b['started']:.6f} while its visit to shard {a['shard']} ran until "
                           f"{a['finished']:.6f}")
            if b["pass"] < a["pass"]:
                out.append(f"config isolation: config {tid} of group {g} went back from epoch "
                           f"{a['pass']} to epoch {b['pass']}")
    return out


def _partition_loads(g: str, n: int, tasks, kind: str) -> List[str]:
    """'load' (a worker joining a model hopper run loads a partition it holds a copy of): each
    load reads one range of the group's training rows."""
    return [f"data sharding: worker {t['worker']} loaded rows [{t['row_start']}, {t['row_start'] + t['n_rows']}) "
            f"outside group {g}'s [0, {n})" for t in tasks
            if t["row_start"] < 0 or t["n_rows"] < 0 or t["row_start"] + t["n_rows"] > n]


def _no_training_rows(g: str, n: int, tasks, kind: str) -> List[str]:
    """'eval' (scoring on validation rows) and 'ports' (finding free ports): nothing to check."""
    return []


#: task kind -> its checker ``(group key, training rows, tasks, kind) -> violations``
KIND_CHECKS = {"fit": _whole_group_fit, "block": _mtp_tasks, "boost": _mtp_tasks, "stats": _shard_stats,
               "rank": _lgbm_ranks, "visit": _mlp_visits, "load": _partition_loads, "eval": _no_training_rows, "ports": _no_training_rows}


def _task_kind_violations(entries: List[Mapping[str, Any]], n_train: Mapping[str, int]) -> List[str]:
    """Violations among the schedule entries that are not synchronous rounds (every kind but
    'pass' and 'step'), per group and kind by :data:`KIND_CHECKS`; an unknown kind is one."""
    out: List[str] = []
    groups = defaultdict(lambda: defaultdict(list))
    for e in entries:
        groups[e["group_key"]][e["kind"]].append(e)
    for g, kinds in groups.items():
        n = n_train[g]
        for kind, tasks in kinds.items():
            check = KIND_CHECKS.get(kind)
            if check is None:
                out.append(f"unknown task kind {kind!r} in the schedule of group {g}")
            else:
                out.extend(check(g, n, tasks, kind))
    return out
