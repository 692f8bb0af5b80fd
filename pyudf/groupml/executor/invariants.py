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
    out.extend(_other_kinds([e for e in entries if e.get("kind", "pass") not in ("pass", "step")], n_train))
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


def _other_kinds(entries: List[Mapping[str, Any]], n_train: Mapping[str, int]) -> List[str]:
    out: List[str] = []
    groups = defaultdict(lambda: defaultdict(list))
    for e in entries:
        groups[e["group_key"]][e["kind"]].append(e)
    for g, kinds in groups.items():
        n = n_train[g]
        for kind, tasks in kinds.items():
            if kind in ("eval", "ports"):
                continue                      # scoring on validation rows / finding free ports: no training rows
            if kind == "fit":
                for t in tasks:
                    if t["row_start"] != 0 or t["n_rows"] != n:
                        out.append(f"data sharding: the one-worker task of group {g} saw rows [{t['row_start']}, "
                                   f"{t['row_start'] + t['n_rows']}) not [0, {n})")
            elif kind in ("block", "boost"):
                for t in tasks:
                    if t["row_start"] != 0 or t["n_rows"] != n:
                        out.append(f"data sharding: MTP {kind} task of group {g} saw rows [{t['row_start']}, "
                                   f"{t['row_start'] + t['n_rows']}) not a whole copy [0, {n})")
                by_cfg = defaultdict(list)
                for t in tasks:
                    for tid in t["trials"]:
                        by_cfg[tid].append(t)
                for tid, ts in by_cfg.items():
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
            elif kind == "stats":
                if not _tiles(tasks, n):
                    out.append(f"data sharding: the shard statistics of group {g} do not tile [0, {n})")
            elif kind == "rank":
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
            elif kind == "visit":
                by_cfg = defaultdict(list)
                for t in tasks:
                    for tid in t["trials"]:
                        by_cfg[tid].append(t)
                for tid, vs in by_cfg.items():
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
            else:
                out.append(f"unknown task kind {kind!r} in the schedule of group {g}")
    return out
