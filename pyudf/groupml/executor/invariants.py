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
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, Iterable, List, Mapping


def schedule_violations(entries: Iterable[Mapping[str, Any]], n_train: Mapping[str, int],
                        modes: Mapping[str, str]) -> List[str]:
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
                out.append(f"data sharding: group {g} pass {p} rows [{pos}, {lo}) missing or overlapping")
            pos = hi
        if pos != n:
            out.append(f"data sharding: group {g} pass {p} covered rows [0, {pos}) of {n}")
        trial_sets = {tuple(sorted(t["trials"])) for t in tasks}
        if len(trial_sets) != 1:
            out.append(f"data sharding: shards of group {g} pass {p} evaluated different configs")
        if len({t["worker"] for t in tasks}) != len(tasks):
            out.append(f"data sharding: group {g} pass {p} put two shards on one worker")
    for g, passes in per_group.items():
        ps = sorted(passes)
        if ps != list(range(len(ps))):
            out.append(f"config isolation: group {g} passes {ps} are not consecutive from 0")
        for p in ps[:-1]:
            end = max(t["finished"] for t in passes[p])
            start = min(t["started"] for t in passes[p + 1])
            if start < end:
                out.append(f"config isolation: group {g} pass {p + 1} started at {start:.6f} before pass {p} "
                           f"finished at {end:.6f}")
    return out
