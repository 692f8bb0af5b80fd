"""Shard placement over p workers: wrap-around (Kingpin Alg. 1) and constrained
wrap-around (Kingpin Alg. 2), on integer row counts.

A placement is plain data: for every worker 0..p-1 an ordered list of shards
(group key, first row offset within the group, row count).  The order of a
worker's list is the order in which that worker visits its shards in an epoch.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Mapping, Optional, Tuple

from ._common import (DEFAULT_OWNER, check_group_sizes, check_workers, empty_groups, group_order,
                      key_from_json, key_to_json)
from ..validation import check_bool, check_choice, check_number

WRAP_AROUND = "wrap_around"
CONSTRAINED = "constrained_wrap_around"
WHOLE_GROUPS = "whole_groups"   # GTP: every group on one worker
EVEN_SPLIT = "even_split"       # DP: every group cut across all workers


@dataclass(frozen=True)
class Shard:
    """Rows ``[start, start + rows)`` of group ``group`` (offsets in the group's snapshot order)."""

    group: Hashable
    start: int
    rows: int

    @property
    def stop(self) -> int:
        return self.start + self.rows

    def to_dict(self) -> Dict[str, Any]:
        return {"group": key_to_json(self.group), "start": self.start, "rows": self.rows}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Shard":
        return cls(key_from_json(d["group"]), int(d["start"]), int(d["rows"]))


@dataclass
class Placement:
    """Which rows of which group each worker holds, in visiting order.

    ``capacity`` is the per-worker row target the algorithm filled against
    (Alg. 1: an integer bound every worker respects; Alg. 2: the ideal share n/p).
    ``empty_groups`` lists zero-row groups, which get no shard.
    """

    algorithm: str
    n_workers: int
    capacity: float
    workers: List[List[Shard]]
    empty_groups: List[Hashable] = field(default_factory=list)
    params: Dict[str, Any] = field(default_factory=dict)

    # ---- queries -------------------------------------------------------------------------
    def loads(self) -> List[int]:
        """Rows held by each worker."""
        return [sum(s.rows for s in shards) for shards in self.workers]

    @property
    def makespan_rows(self) -> int:
        """Rows on the busiest worker (the makespan in row units)."""
        return max(self.loads(), default=0)

    def shard_index(self) -> Dict[Hashable, List[Tuple[int, Shard]]]:
        """Every group's ``(worker, shard)`` pairs, ordered by row offset (one pass)."""
        index: Dict[Hashable, List[Tuple[int, Shard]]] = {}
        for w, shards in enumerate(self.workers):
            for s in shards:
                index.setdefault(s.group, []).append((w, s))
        for pairs in index.values():
            pairs.sort(key=lambda ws: ws[1].start)
        return index

    def groups(self) -> List[Hashable]:
        """Placed groups in the order they first appear (worker 0 first)."""
        seen: Dict[Hashable, None] = {}
        for shards in self.workers:
            for s in shards:
                seen.setdefault(s.group, None)
        return list(seen)

    def shard_counts(self) -> Dict[Hashable, int]:
        counts: Dict[Hashable, int] = {}
        for shards in self.workers:
            for s in shards:
                counts[s.group] = counts.get(s.group, 0) + 1
        return counts

    def split_groups(self) -> Dict[Hashable, List[int]]:
        """Groups held by more than one worker -> the workers holding them (ascending)."""
        holders: Dict[Hashable, List[int]] = {}
        for w, shards in enumerate(self.workers):
            for s in shards:
                holders.setdefault(s.group, [])
                if w not in holders[s.group]:
                    holders[s.group].append(w)
        return {g: ws for g, ws in holders.items() if len(ws) > 1}

    # ---- plain data ----------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "n_workers": self.n_workers,
            "capacity": self.capacity,
            "workers": [[s.to_dict() for s in shards] for shards in self.workers],
            "loads": self.loads(),
            "empty_groups": [key_to_json(k) for k in self.empty_groups],
            "params": dict(self.params),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Placement":
        return cls(
            algorithm=d["algorithm"],
            n_workers=int(d["n_workers"]),
            capacity=d["capacity"],
            workers=[[Shard.from_dict(s) for s in shards] for shards in d["workers"]],
            empty_groups=[key_from_json(k) for k in d.get("empty_groups", [])],
            params=dict(d.get("params", {})),
        )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def wrap_around_capacity(group_sizes: Mapping[Hashable, int], n_workers: int,
                         group_isolation: bool = True) -> int:
    """Row capacity per worker used by :func:`wrap_around`.

    ``ceil(n / p)``, raised to the largest group when ``group_isolation`` holds (a
    group whose configs must run one shard after another can never finish faster
    than its own size).
    """
    n = sum(group_sizes.values())
    cap = _ceil_div(n, n_workers) if n else 0
    if group_isolation:
        cap = max(cap, max(group_sizes.values(), default=0))
    return cap


def wrap_around(group_sizes: Mapping[Hashable, int], n_workers: int, *,
                group_isolation: bool = True, order: str = "size",
                owner: str = DEFAULT_OWNER) -> Placement:
    """Kingpin Alg. 1 on integer rows.

    Visit groups largest first (ties by key), pour their rows into worker 0 until it
    holds ``capacity`` rows, then continue on worker 1, and so on; a group that
    does not fit is cut and its remainder starts the next worker.  With
    ``group_isolation`` (the default, the paper's algorithm) the capacity is
    ``max(ceil(n/p), max n_i)``, so a group is cut at most once, over two adjacent
    workers, where it is the last shard of the first and the first shard of the
    second -- the two halves can run one after the other without overlapping.
    Without it (algebraic/sampling work whose shards may run concurrently) the
    capacity is ``ceil(n/p)`` and a big group may span several adjacent workers.
    """
    p = check_workers(n_workers, owner)
    sizes = check_group_sizes(group_sizes, owner)
    check_bool(group_isolation, "group_isolation", owner)
    check_choice(order, "order", owner, ("size", "key"))
    cap = wrap_around_capacity(sizes, p, group_isolation)
    workers: List[List[Shard]] = [[] for _ in range(p)]
    cur, filled = 0, 0
    for key in group_order(sizes, order):
        remaining, start = sizes[key], 0
        while remaining > 0:
            room = cap - filled
            if room == 0:
                cur, filled = cur + 1, 0
                continue
            take = min(room, remaining)
            workers[cur].append(Shard(key, start, take))
            start, remaining, filled = start + take, remaining - take, filled + take
    return Placement(WRAP_AROUND, p, cap, workers, empty_groups(sizes),
                     {"group_isolation": group_isolation, "order": order})


def constrained_splits(rows: int, total_rows: int, n_workers: int, *,
                       max_splits: Optional[int] = None, min_shard_rows: int = 1) -> int:
    """Number of equal shards Alg. 2 cuts a group into.

    ``round(rows * p / n)`` (halves round up), at least 1, at most ``max_splits``
    (default p) and at most ``rows // min_shard_rows``.
    """
    if rows <= 0:
        return 0
    s = (2 * rows * n_workers + total_rows) // (2 * total_rows)
    limit = n_workers if max_splits is None else min(n_workers, max_splits)
    s = min(s, limit, rows // min_shard_rows)
    return max(1, s)


def constrained_wrap_around(group_sizes: Mapping[Hashable, int], n_workers: int, *,
                            max_splits: Optional[int] = None, min_shard_rows: int = 1,
                            owner: str = DEFAULT_OWNER) -> Placement:
    """Kingpin Alg. 2 on integer rows.

    Groups are visited largest first (ties by key).  A group is cut into
    :func:`constrained_splits` shards of equal size (sizes differ by at most one
    row; the larger ones first) and the shards go to that many *distinct* workers,
    the least loaded ones (ties: lower worker index), the largest shard to the
    least loaded worker.  ``max_splits`` and ``min_shard_rows`` are our
    additions (defaults reproduce the paper): they bound how finely a group is cut,
    e.g. so each LightGBM machine gets enough rows.
    """
    p = check_workers(n_workers, owner)
    sizes = check_group_sizes(group_sizes, owner)
    if max_splits is not None:
        max_splits = check_number(max_splits, "max_splits", owner, ge=1, integer=True)
    min_shard_rows = check_number(min_shard_rows, "min_shard_rows", owner, ge=1, integer=True)
    n = sum(sizes.values())
    workers: List[List[Shard]] = [[] for _ in range(p)]
    heap = [(0, w) for w in range(p)]
    for key in group_order(sizes):
        rows = sizes[key]
        s = constrained_splits(rows, n, p, max_splits=max_splits, min_shard_rows=min_shard_rows)
        chosen = [heapq.heappop(heap) for _ in range(s)]
        base, extra = divmod(rows, s)
        start = 0
        for j, (filled, w) in enumerate(chosen):
            take = base + (1 if j < extra else 0)
            workers[w].append(Shard(key, start, take))
            start += take
            heapq.heappush(heap, (filled + take, w))
    return Placement(CONSTRAINED, p, (n / p) if n else 0.0, workers, empty_groups(sizes),
                     {"max_splits": max_splits, "min_shard_rows": min_shard_rows})


def whole_groups(group_sizes: Mapping[Hashable, int], n_workers: int, *,
                 owner: str = DEFAULT_OWNER) -> Placement:
    """GTP's placement: whole groups, largest first, each onto the least loaded worker
    (ties: lower index) -- the longest-processing-time-first rule."""
    p = check_workers(n_workers, owner)
    sizes = check_group_sizes(group_sizes, owner)
    workers: List[List[Shard]] = [[] for _ in range(p)]
    heap = [(0, w) for w in range(p)]
    for key in group_order(sizes):
        filled, w = heapq.heappop(heap)
        workers[w].append(Shard(key, 0, sizes[key]))
        heapq.heappush(heap, (filled + sizes[key], w))
    n = sum(sizes.values())
    return Placement(WHOLE_GROUPS, p, (n / p) if n else 0.0, workers, empty_groups(sizes), {})


def even_split(group_sizes: Mapping[Hashable, int], n_workers: int, *,
               owner: str = DEFAULT_OWNER) -> Placement:
    """DP's placement: every group cut into ``min(p, n_i)`` near-equal shards on
    workers 0, 1, ... (the larger shards on the lower workers)."""
    p = check_workers(n_workers, owner)
    sizes = check_group_sizes(group_sizes, owner)
    workers: List[List[Shard]] = [[] for _ in range(p)]
    for key in group_order(sizes):
        rows = sizes[key]
        s = min(p, rows)
        base, extra = divmod(rows, s)
        start = 0
        for w in range(s):
            take = base + (1 if w < extra else 0)
            workers[w].append(Shard(key, start, take))
            start += take
    n = sum(sizes.values())
    return Placement(EVEN_SPLIT, p, (n / p) if n else 0.0, workers, empty_groups(sizes), {})


def place(group_sizes: Mapping[Hashable, int], n_workers: int, algorithm: str = WRAP_AROUND,
          **kwargs) -> Placement:
    """Dispatch by algorithm name (``wrap_around`` | ``constrained_wrap_around`` |
    ``whole_groups`` | ``even_split``)."""
    if algorithm == WRAP_AROUND:
        return wrap_around(group_sizes, n_workers, **kwargs)
    if algorithm == CONSTRAINED:
        return constrained_wrap_around(group_sizes, n_workers, **kwargs)
    if algorithm == WHOLE_GROUPS:
        return whole_groups(group_sizes, n_workers, **kwargs)
    if algorithm == EVEN_SPLIT:
        return even_split(group_sizes, n_workers, **kwargs)
    check_choice(algorithm, "algorithm", kwargs.get("owner", DEFAULT_OWNER),
                 (WRAP_AROUND, CONSTRAINED, WHOLE_GROUPS, EVEN_SPLIT))
