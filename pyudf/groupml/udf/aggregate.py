"""learn_over_groups: the aggregate's transition and final functions.

The aggregate state is a bigint *handle*; the rows themselves are buffered in this
backend's memory as packed doubles (``array('d')``), which keeps the per-row cost to
one PL/Python call and a C-level ``extend``. The final function turns the buffer into
numpy arrays and hands them to :func:`groupml.fitting.fit_group`.

Buffers of aggregates that never reached their final function (the statement failed
or was cancelled) are dropped when the next aggregate starts in a later transaction; a
final call that fails drops its statement's buffers at once. Within a transaction only the
current statement's buffers are trained ahead (statement_timestamp() tells them apart), and
groups an earlier statement started ahead (a LIMIT, a closed cursor) are stopped when the
next aggregate starts; a final call that still comes for one trains it in the foreground.

Groups train in parallel although PostgreSQL calls the final function one group at a
time: the first final call also starts the other complete-looking buffers of the same
transaction in a thread pool (largest first, ``threads`` at a time, BLAS one thread
each), and each later final call collects its group's result.  That is speculation: a
buffer that receives rows after it was started (another aggregate in the same query
still accumulating) is detected by its row count and trained again; rows appended while
a thread reads the buffer go to a copy (:meth:`RowBuffer.add_rows`).  With a sorted
(GroupAggregate) plan no other buffer exists at a final call, so nothing is speculated.
Only the main thread talks to PostgreSQL (cancel checks, NOTICEs).
"""

from __future__ import annotations

import itertools
import threading
from array import array
from typing import Dict, Optional

from ..errors import ArrayLengthError, DataError, InvalidParameterError
from . import families_hint, parse_object, sql_entry

OWNER = "learn_over_groups"


class RowBuffer:
    __slots__ = ("family", "search", "options", "d", "x", "y", "skipped", "txn", "stmt")

    def __init__(self, family: str, search: dict, options: dict, txn: str, stmt: str = ""):
        self.family = family
        self.search = search
        self.options = options
        self.d: Optional[int] = None
        self.x = array("d")
        self.y = array("d")
        self.skipped = 0
        self.txn = txn
        self.stmt = stmt        # the statement whose rows started it (statement_timestamp())

    def add(self, features, label) -> None:
        if label is None or features is None:
            self.skipped += 1
            return
        n = len(features)
        if self.d is None:
            if n == 0:
                raise ArrayLengthError("The features array of learn_over_groups must not be empty; got an empty array",
                                       hint="Pass the feature columns as ARRAY[f1, f2, ...].")
            self.d = n
        elif n != self.d:
            raise ArrayLengthError(
                f"Every features array of a group must have the same length; expected {self.d} values, found {n}",
                hint="Build the array from the same columns for every row, e.g. ARRAY[f1, f2, f3].")
        if _exported(self.x) or _exported(self.y):
            self.x, self.y = array("d", self.x), array("d", self.y)   # leave the read one alone
        mark = len(self.x)
        try:
            self.x.extend(features)
        except TypeError:
            del self.x[mark:]
            if any(isinstance(v, list) for v in features):
                raise DataError("The features array of learn_over_groups must be one-dimensional; got a nested array",
                                hint="Pass ARRAY[f1, f2, ...] with one value per feature.")
            self.skipped += 1  # a NULL element
            return
        self.y.append(float(label))


def _exported(a: array) -> bool:
    """True when a buffer view of ``a`` exists (a training thread reads it)."""
    try:
        a.append(0.0)
    except BufferError:
        return True
    a.pop()
    return False


_buffers: Dict[int, RowBuffer] = {}
# handle -> (future, rows when started, abort event): groups started ahead of their final call
_ahead: Dict[int, tuple] = {}
_handles = itertools.count(1)
_cost_models: Dict[tuple, object] = {}


def _cost_model(session, family: str, txn: str):
    """The calibrated cost model (groupml.cost_runs), read once per transaction and family.

    The aggregate only reads the table: it may run in read-only transactions, so recording
    measured runs is left to the catalog writers (train_groups, calibrate_cost_model)."""
    from ..executor.costs import load_cost_model

    key = (txn, family)
    if key not in _cost_models:
        for stale in [k for k in _cost_models if k[0] != txn]:
            del _cost_models[stale]
        _cost_models[key] = load_cost_model(session, family)
    return _cost_models[key]


def _current_txn() -> tuple:
    """(transaction, statement) this backend is in, as their start timestamps."""
    from ..db import backend_session

    r = backend_session().query("SELECT pg_catalog.now()::text AS t, pg_catalog.statement_timestamp()::text AS s")[0]
    return str(r["t"]), str(r["s"])


_swept: Optional[tuple] = None      # (transaction, statement) of the last sweep
_last_request: Optional[tuple] = None   # (model, search, options) text and their parsed values


def _sweep(txn: str, stmt: str) -> None:
    """Drop the buffers of earlier transactions; stop the groups started ahead by an earlier
    statement (one that ended before its final calls: a LIMIT, a closed cursor, an error),
    which would otherwise keep training beside this one. Their buffers stay (an open cursor
    of this transaction may still finalize them, then trained in the foreground).

    Once per statement: a statement's later groups find nothing to sweep (scanning every
    buffer at each group's first row made 40,000 groups cost 45 s instead of about 25)."""
    global _swept
    if _swept == (txn, stmt):
        return
    _swept = (txn, stmt)
    for handle in [h for h, b in _buffers.items() if b.txn != txn]:
        del _buffers[handle]
    for handle in [h for h in _ahead if h not in _buffers or _buffers[h].stmt != stmt]:
        _ahead.pop(handle)[2].set()            # its thread stops at its next pass


def _start(model, search, options) -> int:
    from ..fitting import validate_request

    if model is None:
        raise InvalidParameterError("The 'model' value of learn_over_groups must be a model family name; got null",
                                    hint=families_hint())
    global _last_request
    key = (model, str(search), str(options))
    if _last_request is not None and _last_request[0] == key:
        search_obj, options_obj = _last_request[1]        # every group of a statement: checked once
    else:
        search_obj = parse_object(search, "search", OWNER)
        options_obj = parse_object(options, "options", OWNER)
        validate_request(model, search_obj, options_obj)
        _last_request = (key, (search_obj, options_obj))
    txn, stmt = _current_txn()
    _sweep(txn, stmt)
    handle = next(_handles)
    _buffers[handle] = RowBuffer(model, search_obj, options_obj, txn, stmt)
    return handle


@sql_entry
def model_family(name):
    """The cast from text to groupml.model_family (the aggregate's model argument): the name
    itself when it is a known family, else the ERROR that lists them."""
    from ..learners import get_learner_family

    get_learner_family(name, OWNER)
    return name


def step(state, features, label, model, search, options):
    """Transition function: append one row to the group's buffer. Hot path, kept lean.

    The common case (known handle, complete row of the right length) touches no
    validation code; everything else goes through :func:`_step_slow`.
    """
    buf = _buffers.get(state) if state is not None else None
    if buf is not None and label is not None and features is not None and len(features) == buf.d:
        x = buf.x
        mark = len(x)
        try:
            x.extend(features)
        except TypeError:  # a NULL element: undo the partial extend, let the slow path count it
            del x[mark:]
            return _step_slow(state, features, label, model, search, options)
        except BufferError:  # a training thread reads this buffer: continue on a copy
            return _step_slow(state, features, label, model, search, options)
        try:
            buf.y.append(label)  # a boolean label appends as 1.0 / 0.0
        except BufferError:
            del x[mark:]
            return _step_slow(state, features, label, model, search, options)
        return state
    return _step_slow(state, features, label, model, search, options)


@sql_entry
def _step_slow(state, features, label, model, search, options):
    if state is None:
        state = _start(model, search, options)
    buf = _buffers.get(state)
    if buf is None:
        raise DataError("learn_over_groups lost its row buffer (the backend was reset mid-aggregate)",
                        hint="Run the statement again.")
    if label is True or label is False:
        label = 1.0 if label else 0.0
    buf.add(features, label)
    return state


def _arrays(buf: RowBuffer):
    import numpy as np

    X = np.frombuffer(buf.x, dtype=np.float64).reshape(-1, buf.d)
    y = np.frombuffer(buf.y, dtype=np.float64)
    return X, y


def _rows(buf: RowBuffer) -> tuple:
    return (len(buf.x), len(buf.y), buf.skipped)


def _fit(buf: RowBuffer, X, y, cost_model, check):
    from threadpoolctl import threadpool_limits

    from ..fitting import fit_group

    # one BLAS thread: a backend is one core's worth of work, and OpenBLAS's idle threads
    # spinning beside other backends cost more than they give on these tall, thin products
    with threadpool_limits(limits=1, user_api="blas"):
        return fit_group(X, y, buf.family, buf.search, buf.options, n_skipped=buf.skipped,
                         interrupt_check=check, cost_model=cost_model)


class _Stopped(Exception):
    """Raised inside a training thread whose statement ended."""


def _start_ahead(session, threads: int, handle: int, current: RowBuffer) -> None:
    """Start this group and every other complete-looking buffer of this statement in
    ``threads`` threads, largest first (this group first among equals: its caller waits).
    Buffers an earlier statement left (it failed, or was rolled back to a savepoint) are not
    trained: their results would never be asked for."""
    from concurrent.futures import ThreadPoolExecutor

    todo = [(h, b) for h, b in _buffers.items()
            if h not in _ahead and b.d is not None and b.stmt == current.stmt]
    if not todo:
        return
    todo.append((handle, current))
    todo.sort(key=lambda hb: (-len(hb[1].y), hb[0] != handle))
    pool = ThreadPoolExecutor(threads, thread_name_prefix="groupml-final")
    try:
        for handle, buf in todo:
            abort = threading.Event()

            def check(abort=abort):
                if abort.is_set():
                    raise _Stopped()

            X, y = _arrays(buf)
            model = _cost_model(session, buf.family, buf.txn)
            _ahead[handle] = (pool.submit(_fit, buf, X, y, model, check), _rows(buf), abort)
            del X, y
    finally:
        pool.shutdown(wait=False)             # the threads end when the queue is empty


def _collect(session, handle: int, buf: RowBuffer):
    """The result started ahead for ``handle`` if its rows did not change since; else None."""
    from concurrent.futures import FIRST_COMPLETED, wait

    item = _ahead.pop(handle, None)
    if item is None:
        return None
    future, rows, abort = item
    if rows != _rows(buf):
        abort.set()
        return None
    try:
        while not future.done():
            wait([future], timeout=0.25, return_when=FIRST_COMPLETED)
            session.check_cancel()
    except BaseException:
        abort.set()
        raise
    return future.result()


@sql_entry
def final(state):
    from ..db import backend_session
    from ..fitting import empty_fit

    if state is None:
        return empty_fit("no rows reached the aggregate")
    buf = _buffers.pop(state, None)
    if buf is None:
        raise DataError("learn_over_groups lost its row buffer (the backend was reset mid-aggregate)",
                        hint="Run the statement again.")
    if buf.d is None:
        _ahead.pop(state, None)
        return empty_fit("every row had a NULL label or NULL features", n_skipped=buf.skipped)
    session = backend_session()
    threads = int(buf.options.get("threads") or 0) or _default_threads()
    try:
        if threads > 1 and state not in _ahead:
            _start_ahead(session, threads, state, buf)
        result = _collect(session, state, buf)
        if result is None:
            X, y = _arrays(buf)
            result = _fit(buf, X, y, _cost_model(session, buf.family, buf.txn), session.check_cancel)
    except BaseException:
        for _, _, abort in _ahead.values():   # cancel or error: the other threads stop too
            abort.set()
        _ahead.clear()
        for h in [h for h, b in _buffers.items() if b.stmt == buf.stmt]:
            del _buffers[h]                   # the statement failed: its other groups never finish
        raise
    if buf.options.get("progress"):
        session.notice(f"groupml: trained a group of {result.n_train + result.n_validation} rows: {result.status}"
                       + (f", {result.metric} {result.score:.4f}" if result.score is not None else ""))
    return result.as_sql()


def _default_threads() -> int:
    from ..fitting import default_threads

    return default_threads()
