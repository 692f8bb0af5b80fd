"""What a competent client does with several cores: the benchmarks' shared client helpers.

A user with N cores does not train groups one after another: they spread the groups over N
processes with joblib, largest group first (so no big group starts last), and they score a
large table in chunks over N processes. Every benchmark's client path goes through here, with
N the cores (helper processes or worker backends) the groupml path it is compared with uses.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, List, Sequence, Tuple


def client_cores(ours: int | None = None) -> int:
    """N for the client: ``ours`` (the cores the compared groupml path uses) when given, else
    every CPU of this machine (what ``train_groups``' helper processes use, up to 4)."""
    from groupml.procpool import MAX_PROCESSES

    if ours is not None:
        return max(1, int(ours))
    return max(1, min(os.cpu_count() or 1, MAX_PROCESSES))


def largest_first(items: Iterable[Tuple[Any, int, tuple]]) -> List[Tuple[Any, tuple]]:
    """``(key, size, args)`` items as ``(key, args)``, the largest size first (LPT order)."""
    return [(k, a) for k, _, a in sorted(items, key=lambda t: -t[1])]


def over_groups(fn: Callable, items: Iterable[Tuple[Any, int, tuple]], n_jobs: int) -> dict:
    """``{key: fn(*args)}`` for every ``(key, size, args)``, the groups spread over ``n_jobs``
    processes by ``joblib.Parallel`` largest first (``n_jobs`` 1: one after another, in this
    process, the single-core client)."""
    order = largest_first(items)
    if n_jobs <= 1:
        return {k: fn(*a) for k, a in order}
    from joblib import Parallel, delayed

    out = Parallel(n_jobs=n_jobs)(delayed(fn)(*a) for _, a in order)
    return dict(zip([k for k, _ in order], out))


def chunks(n: int, parts: int) -> List[Tuple[int, int]]:
    """``parts`` contiguous ``(start, stop)`` ranges covering ``range(n)`` (none empty)."""
    parts = max(1, min(parts, n)) if n else 1
    bounds = [n * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts) if bounds[i + 1] > bounds[i]]


def over_chunks(fn: Callable, n: int, n_jobs: int, args: Sequence = ()) -> list:
    """``fn(start, stop, *args)`` for ``n_jobs`` chunks of ``range(n)``, over ``n_jobs``
    processes (``n_jobs`` 1: one call in this process); the results in chunk order."""
    ranges = chunks(n, n_jobs)
    if n_jobs <= 1 or len(ranges) == 1:
        return [fn(s, e, *args) for s, e in ranges]
    from joblib import Parallel, delayed

    return Parallel(n_jobs=n_jobs)(delayed(fn)(s, e, *args) for s, e in ranges)
