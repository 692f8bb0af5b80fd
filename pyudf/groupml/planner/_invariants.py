"""Checks that a placement is sound; usable on any placement, including ones an
executor rebuilt from ``Placement.from_dict``.

Violations are returned as readable strings; :func:`check_placement` raises
:class:`PlacementInvariantError` (an internal error, SQLSTATE XX000) by default.
"""

from __future__ import annotations

from typing import Hashable, List, Mapping

from ..errors import GroupmlError
from ._common import check_group_sizes
from ._placement import (CONSTRAINED, EVEN_SPLIT, WHOLE_GROUPS, WRAP_AROUND, Placement, _ceil_div, constrained_splits,
                         wrap_around_capacity)


class PlacementInvariantError(GroupmlError):
    """A placement breaks one of its invariants: a bug, never a user error."""

    sqlstate = "XX000"


def coverage_violations(placement: Placement, group_sizes: Mapping[Hashable, int]) -> List[str]:
    """Every row of every group is held by exactly one shard; nothing else is held."""
    out: List[str] = []
    if len(placement.workers) != placement.n_workers:
        out.append(f"placement lists {len(placement.workers)} workers but n_workers is {placement.n_workers}")
    by_group = {}
    for w, shards in enumerate(placement.workers):
        for s in shards:
            if s.group not in group_sizes:
                out.append(f"worker {w} holds a shard of unknown group {s.group!r}")
                continue
            if s.rows < 1 or s.start < 0:
                out.append(f"worker {w} holds an empty or negative shard {s.to_dict()}")
                continue
            by_group.setdefault(s.group, []).append(s)
    for key, rows in group_sizes.items():
        shards = sorted(by_group.get(key, []), key=lambda s: s.start)
        if rows == 0:
            if shards:
                out.append(f"group {key!r} has 0 rows but {len(shards)} shards")
            if key not in placement.empty_groups:
                out.append(f"group {key!r} has 0 rows but is not listed in empty_groups")
            continue
        pos = 0
        for s in shards:
            if s.start > pos:
                out.append(f"group {key!r}: rows {pos}..{s.start - 1} are not assigned")
            elif s.start < pos:
                out.append(f"group {key!r}: rows {s.start}..{min(pos, s.stop) - 1} are assigned twice")
            pos = max(pos, s.stop)
        if pos < rows:
            out.append(f"group {key!r}: rows {pos}..{rows - 1} are not assigned")
        elif pos > rows:
            out.append(f"group {key!r}: shards reach row {pos - 1} but the group has {rows} rows")
    return out


def wrap_around_violations(placement: Placement, group_sizes: Mapping[Hashable, int]) -> List[str]:
    """Alg. 1: loads within capacity; a group's holders are adjacent workers; with group
    isolation a group spans at most two workers, tail of one and head of the next."""
    out: List[str] = []
    index = placement.shard_index()
    iso = bool(placement.params.get("group_isolation", True))
    cap = wrap_around_capacity(group_sizes, placement.n_workers, iso)
    if placement.capacity != cap:
        out.append(f"capacity is {placement.capacity}, expected {cap}")
    for w, load in enumerate(placement.loads()):
        if load > cap:
            out.append(f"worker {w} holds {load} rows, more than the capacity {cap}")
    for key, rows in group_sizes.items():
        if rows == 0:
            continue
        ws = sorted({w for w, _ in index.get(key, [])})
        if ws and ws != list(range(ws[0], ws[-1] + 1)):
            out.append(f"group {key!r} is held by non-adjacent workers {ws}")
        if len(ws) != len(index.get(key, [])):
            out.append(f"group {key!r} has two shards on one worker")
        if iso and len(ws) > 2:
            out.append(f"group {key!r} spans {len(ws)} workers; at most 2 with group isolation")
        if iso and len(ws) == 2:
            first, second = placement.workers[ws[0]], placement.workers[ws[1]]
            if first[-1].group != key or second[0].group != key:
                out.append(f"group {key!r} is split but is not the last shard of worker {ws[0]} "
                           f"and the first shard of worker {ws[1]}")
    return out


def constrained_bound(group_sizes: Mapping[Hashable, int], n_workers: int, *, max_splits=None,
                      min_shard_rows: int = 1) -> int:
    """An upper bound on Alg. 2's busiest worker.

    When a group of ``n_i`` rows is cut into ``s`` shards, the rows already placed
    total at most ``n - n_i``, and the s-th least loaded worker holds at most
    ``(n - n_i) / (p - s + 1)``; each shard adds at most ``ceil(n_i / s)``.
    """
    n = sum(group_sizes.values())
    best = 0
    for rows in group_sizes.values():
        if rows == 0:
            continue
        s = constrained_splits(rows, n, n_workers, max_splits=max_splits, min_shard_rows=min_shard_rows)
        best = max(best, (n - rows) // (n_workers - s + 1) + _ceil_div(rows, s))
    return best


def constrained_violations(placement: Placement, group_sizes: Mapping[Hashable, int]) -> List[str]:
    """Alg. 2: the shard count rule, equal shards on distinct workers, the load bound."""
    out: List[str] = []
    p = placement.n_workers
    n = sum(group_sizes.values())
    ms = placement.params.get("max_splits")
    mr = placement.params.get("min_shard_rows", 1)
    index = placement.shard_index()
    for key, rows in group_sizes.items():
        if rows == 0:
            continue
        shards = index.get(key, [])
        want = constrained_splits(rows, n, p, max_splits=ms, min_shard_rows=mr)
        if len(shards) != want:
            out.append(f"group {key!r} has {len(shards)} shards; the rule gives {want}")
        sizes = [s.rows for _, s in shards]
        if sizes and max(sizes) - min(sizes) > 1:
            out.append(f"group {key!r} has unequal shards {sizes}")
        ws = [w for w, _ in shards]
        if len(set(ws)) != len(ws):
            out.append(f"group {key!r} has two shards on one worker: {ws}")
        if any(s.rows < mr for _, s in shards) and len(shards) > 1:
            out.append(f"group {key!r} has a shard smaller than min_shard_rows={mr}")
    bound = constrained_bound(group_sizes, p, max_splits=ms, min_shard_rows=mr)
    if placement.makespan_rows > bound:
        out.append(f"busiest worker holds {placement.makespan_rows} rows, above the bound {bound}")
    return out


def whole_groups_violations(placement: Placement, group_sizes: Mapping[Hashable, int]) -> List[str]:
    """GTP: one shard per group; list-scheduling bound ``n/p + max n_i``."""
    out = [f"group {k!r} is cut into {c} shards; GTP keeps groups whole"
           for k, c in placement.shard_counts().items() if c != 1]
    n = sum(group_sizes.values())
    bound = n / placement.n_workers + max(group_sizes.values(), default=0)
    if placement.makespan_rows > bound:
        out.append(f"busiest worker holds {placement.makespan_rows} rows, above the bound {bound:g}")
    return out


def even_split_violations(placement: Placement, group_sizes: Mapping[Hashable, int]) -> List[str]:
    """DP: ``min(p, n_i)`` near-equal shards on distinct workers."""
    out: List[str] = []
    index = placement.shard_index()
    for key, rows in group_sizes.items():
        if rows == 0:
            continue
        shards = index.get(key, [])
        want = min(placement.n_workers, rows)
        sizes = [s.rows for _, s in shards]
        if len(shards) != want:
            out.append(f"group {key!r} has {len(shards)} shards; DP cuts it into {want}")
        if sizes and max(sizes) - min(sizes) > 1:
            out.append(f"group {key!r} has unequal shards {sizes}")
        if len({w for w, _ in shards}) != len(shards):
            out.append(f"group {key!r} has two shards on one worker")
    return out


_RULES = {
    WRAP_AROUND: wrap_around_violations,
    CONSTRAINED: constrained_violations,
    WHOLE_GROUPS: whole_groups_violations,
    EVEN_SPLIT: even_split_violations,
}


def placement_violations(placement: Placement, group_sizes: Mapping[Hashable, int]) -> List[str]:
    """Coverage plus the rules of the algorithm that built the placement."""
    sizes = check_group_sizes(group_sizes, "check_placement")
    out = coverage_violations(placement, sizes)
    rule = _RULES.get(placement.algorithm)
    if rule is not None:
        out += rule(placement, sizes)
    else:
        out.append(f"unknown placement algorithm {placement.algorithm!r}")
    return out


def check_placement(placement: Placement, group_sizes: Mapping[Hashable, int], *,
                    raise_error: bool = True) -> List[str]:
    """Return the list of violations (empty when sound); raise instead when ``raise_error``."""
    out = placement_violations(placement, group_sizes)
    if out and raise_error:
        raise PlacementInvariantError(
            f"Placement ({placement.algorithm}, {placement.n_workers} workers) breaks "
            f"{len(out)} invariant(s): " + "; ".join(out),
            hint="This is a bug in groupml's planner or executor; please report it.")
    return out
