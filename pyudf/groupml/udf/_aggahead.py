"""learn_over_groups' groups trained ahead in helper processes of the backend.

Under a hashed plan (HashAggregate) every group's rows are buffered before the first final
call. That call hands every buffered group of the statement, largest first, to a few helper
processes (:mod:`groupml.procpool`, as ``train_groups`` does) instead of threads of the
backend, whose many short numpy calls hold the GIL; each final call then waits for its own
group's fit. Helpers run the same :func:`groupml.fitting.fit_group` on the same rows with one
BLAS thread, so the fits equal those trained in the backend. Only the backend's main thread
talks to PostgreSQL; while it waits it checks for cancel.

A buffer that changes after it was handed out (another aggregate of the query still
accumulating) is detected by its row count and trained again in the foreground; its helper
result is dropped. The helpers end when every group handed out was collected or dropped, or
at once on cancel or error.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

#: Below this much planned work in all (buffered rows x the largest iteration budget of the
#: search), starting helpers (a few tenths of a second) costs more than the threads lose to
#: the GIL: train_groups' 20,000 rows at the learners' default budget of 100 iterations
MIN_WORK = 20_000 * 100


def planned_work(buf) -> float:
    """A buffer's rows times the largest iteration budget its search can give a configuration
    (the learner's default when the search names none)."""
    from ..fitting import budget_cap, validate_request

    try:
        family, spec, _ = validate_request(buf.family, buf.search, buf.options)
        cap = budget_cap(spec.to_dict().get("space", {}), family)
    except Exception:  # noqa: BLE001 - the final call reports a bad request itself
        cap = 100
    return float(len(buf.y)) * max(1, int(cap))


def fit_rows(x: bytes, y: bytes, d: int, family: str, search: dict, options: dict, n_skipped: int, cost_model):
    """A helper's task: :func:`~groupml.fitting.fit_group` on a buffer's packed rows."""
    import numpy as np

    from ..fitting import fit_group

    X = np.frombuffer(x, dtype=np.float64).reshape(-1, d)
    return fit_group(X, np.frombuffer(y, dtype=np.float64), family, search, options, n_skipped=n_skipped,
                     cost_model=cost_model)


class AheadGroup:
    """The helper processes and tasks of one statement's groups."""

    def __init__(self, pool, handles: List[int]):
        self.pool = pool
        self.open = set(handles)          # handed out, neither collected nor dropped
        self.done: Dict[int, Any] = {}

    def wait(self, session, handle: int):
        """``handle``'s fit, checking for cancel while the helpers train; None when the
        helpers no longer hold it (the caller trains it in the foreground)."""
        try:
            while handle not in self.done and self.pool is not None:
                found = False
                for key, result in self.pool.results(session.check_cancel):
                    if key in self.open:
                        self.done[key] = result
                    if key == handle:
                        found = True
                        break
                if not found:
                    break
            return self.done.get(handle)
        except BaseException:
            self.close(terminate=True)
            raise
        finally:
            self.forget(handle)

    def forget(self, handle: int) -> None:
        """``handle`` no longer waits for its fit; the last one closes the helpers."""
        self.open.discard(handle)
        self.done.pop(handle, None)
        if not self.open and self.pool is not None:
            self.close(terminate=self.pool._pending > 0)

    def close(self, terminate: bool) -> None:
        if self.pool is not None:
            pool, self.pool = self.pool, None
            pool.close(terminate=terminate)
        self.open.clear()


class HelperTask:
    """What :mod:`groupml.udf.aggregate` keeps per group started ahead in a helper: its
    ``wait`` returns the fit, its ``set`` (an abort) drops it."""

    __slots__ = ("group", "handle")

    def __init__(self, group: AheadGroup, handle: int):
        self.group, self.handle = group, handle

    def wait(self, session):
        return self.group.wait(session, self.handle)

    def set(self) -> None:
        if self.group.pool is not None:
            self.group.forget(self.handle)


def start(todo: List[Tuple[int, Any]], processes: int, cost_model_of) -> Optional[Dict[int, HelperTask]]:
    """Hand ``todo`` ((handle, RowBuffer) pairs, largest first) to ``processes`` helper
    processes; {handle: HelperTask}, or None when helpers do not pay (less than
    :data:`MIN_WORK` planned work in all, one process) or cannot start (no Python interpreter for
    them): the caller then trains in threads. ``cost_model_of(buf)`` is the buffer's cost
    model (it steers the batch size, as in the backend)."""
    from ..procpool import MAX_PROCESSES, HelperPool, helper_python

    if processes < 2 or sum(planned_work(b) for _, b in todo) < MIN_WORK:
        return None
    python = helper_python()
    if python is None:
        return None
    pool = HelperPool(min(processes, MAX_PROCESSES, len(todo)), python)
    group = AheadGroup(pool, [h for h, _ in todo])
    try:
        for handle, buf in todo:
            pool.submit(handle, fit_rows, bytes(buf.x), bytes(buf.y), buf.d, buf.family, buf.search, buf.options,
                        buf.skipped, cost_model_of(buf))
    except BaseException:
        group.close(terminate=True)
        raise
    return {h: HelperTask(group, h) for h, _ in todo}
