"""learn_over_groups: the aggregate's final function.

The transition function is C (``_learn_step``, sql/c/groupml_rows.c): per row it appends the
features and the label as native float8 to the group's buffer in backend memory and returns
the buffer's handle (a bigint, the aggregate state). A PL/Python transition cost more than
half of the aggregate's time (the call and the conversion of five arguments per row). The C
code checks no user input: rows with a NULL label, NULL features or a NULL element are
counted as skipped, and the first anomaly (an empty array, one of another length than the
group's first, a nested one) is recorded and stops the appending. This final function reads
its buffer's counts, anomaly and first-row model, search and options with ``_learn_buffers``
and its rows with ``_learn_rows``, raises what a row broke, validates the request (once per
statement while it stays the same), then trains.

Buffers live until the aggregate's memory goes (GroupAggregate: after each group's final
call; HashAggregate: at the end of the statement; an error, a rolled-back transaction or a
closed cursor: at once); the C module frees them then, so a failed statement leaves none.

Groups train in parallel although PostgreSQL calls the final function one group at a
time: the first final call also starts the other complete buffers of the same statement in
helper processes (:mod:`groupml.procpool`, ``threads`` of them, largest group first, this one
first among equals; a group's rows are read when a helper is free for it), and each later
final call collects its group's result. The helpers are spawned during the scan: once a
hashed aggregate has buffered 20,000 rows, the C step calls :func:`prestart` once per
statement, so their start overlaps the rest of the scan. That is speculation: a buffer that received rows
after it was started (another aggregate in the same query still accumulating) is detected by
its row counts and trained again in the backend. When the planner's cost model prices the
statement's training below what starting the helpers costs (a small search), every group
trains in the backend instead. Groups an earlier statement started ahead (a LIMIT, a closed
cursor, an error) are stopped with their helpers at the next final call of another
statement; a final call that still comes for one (an open cursor) starts that statement's
remaining groups again. With a sorted (GroupAggregate) plan no other buffer exists at a final
call, so nothing is speculated. Only the backend's main thread talks to PostgreSQL (cancel
checks while it waits, NOTICEs).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ..errors import ArrayLengthError, DataError, GroupmlError, InvalidParameterError
from . import families_hint, parse_object, sql_entry

OWNER = "learn_over_groups"

BUFFERS_SQL = ("SELECT handle, d, n_rows, skipped, anomaly, found, stmt::text AS stmt, model, "
               "search::text AS search, options::text AS options FROM groupml._learn_buffers($1)")
ROWS_SQL = "SELECT groupml._learn_rows($1) AS r"

_cost_models: Dict[tuple, object] = {}
_requests: Dict[tuple, tuple] = {}      # (model, search, options) text -> (search, options) parsed
# handle -> (n_rows, skipped, statement) when started: groups started ahead (queued or handed
# to a helper; a group's rows are read when a helper is free for it, so at most one group per
# helper is copied out of its buffer at a time)
_ahead: Dict[int, tuple] = {}
_queue: List[tuple] = []                # (buffer, (search, options)) started, not yet handed over
_done: Dict[int, tuple] = {}            # handle -> ("ok", FitResult) | ("error", exception) collected
_pool: Optional[Any] = None             # the HelperPool training them
_declined: Optional[str] = None         # the statement whose groups were not worth helpers
# (statement, HelperPool) spawned by :func:`prestart` while the statement's scan goes on, taken
# by its first final call (or closed, when its groups are not worth helpers)
_spare: Optional[tuple] = None


def _cost_model(session, family: str, stmt: str):
    """The calibrated cost model (groupml.cost_runs), read once per statement and family.

    The aggregate only reads the table: it may run in read-only transactions, so recording
    measured runs is left to the catalog writers (train_groups, calibrate_cost_model)."""
    from ..executor.costs import load_cost_model

    key = (stmt, family)
    if key not in _cost_models:
        _cost_models.clear()
        _cost_models[key] = load_cost_model(session, family)
    return _cost_models[key]


def _request(meta: dict) -> tuple:
    """The buffer's (search, options), parsed and validated with its model; the same text
    is checked once (every group of a statement has the same request)."""
    from ..fitting import validate_request

    model = meta["model"]
    if model is None:
        raise InvalidParameterError("The 'model' value of learn_over_groups must be a model family name; got null",
                                    hint=families_hint())
    key = (model, meta["search"], meta["options"])
    if key not in _requests:
        search_obj = parse_object(meta["search"], "search", OWNER)
        options_obj = parse_object(meta["options"], "options", OWNER)
        validate_request(model, search_obj, options_obj)
        if len(_requests) > 64:
            _requests.clear()
        _requests[key] = (search_obj, options_obj)
    return _requests[key]


def _check_rows(meta: dict) -> None:
    """Raise the anomaly the transition function recorded for the group's rows."""
    if meta["anomaly"] == "empty":
        raise ArrayLengthError("The features array of learn_over_groups must not be empty; got an empty array",
                               hint="Pass the feature columns as ARRAY[f1, f2, ...].")
    if meta["anomaly"] == "length":
        raise ArrayLengthError(
            f"Every features array of a group must have the same length; expected {meta['d']} values, "
            f"found {meta['found']}",
            hint="Build the array from the same columns for every row, e.g. ARRAY[f1, f2, f3].")
    if meta["anomaly"] == "nested":
        raise DataError("The features array of learn_over_groups must be one-dimensional; got a nested array",
                        hint="Pass ARRAY[f1, f2, ...] with one value per feature.")


@sql_entry
def model_family(name):
    """The cast from text to groupml.model_family (the aggregate's model argument): the name
    itself when it is a known family, else the ERROR that lists them."""
    from ..learners import get_learner_family

    get_learner_family(name, OWNER)
    return name


def _buffers(session, handle: Optional[int] = None) -> list:
    return session.query(BUFFERS_SQL, [handle], ["bigint"])


def _rows(session, handle: int) -> bytes:
    raw = session.query(ROWS_SQL, [handle], ["bigint"])[0]["r"]
    return bytes(raw or b"")


def fit_native(raw: bytes, d: int, skipped: int, model: str, search: dict, options: dict, cost_model=None,
               *, interrupt_check=None):
    """:func:`groupml.fitting.fit_packed` on a buffer's rows (native float8, ``d`` features then
    the label) and its count of skipped rows. Pure: runs in the backend or in a helper process."""
    from ..fitting import fit_packed

    n_rows = len(raw) // (8 * (d + 1)) + int(skipped)
    return fit_packed(raw, n_rows, d, model, search, options, cost_model, interrupt_check=interrupt_check,
                      dtype="=f8")


def fit_native_outcome(*args):
    """:func:`fit_native` in a helper: a group's own error comes back as a value, so the
    final call of that group raises it (not the call that happens to collect it)."""
    try:
        return ("ok", fit_native(*args))
    except GroupmlError as exc:
        return ("error", exc)


def _stop_helpers() -> None:
    """Stop the groups started ahead (kill their helpers) and forget them."""
    global _pool
    pool, _pool = _pool, None
    _ahead.clear()
    _queue.clear()
    _done.clear()
    if pool is not None:
        pool.close(terminate=True)
    _take_spare(None)


def _take_spare(stmt: Optional[str]):
    """The helper pool :func:`prestart` spawned for statement ``stmt`` (None if there is none);
    a spare of any other statement is closed."""
    global _spare
    spare, _spare = _spare, None
    if spare is None:
        return None
    if spare[0] == stmt:
        return spare[1]
    spare[1].close(terminate=True)
    return None


def _stop_ended(stmt: str) -> None:
    """Groups another statement started ahead (it ended before its final calls: a LIMIT, a
    closed cursor, an error) would keep training beside this one: stop them, and a spare pool
    spawned for another statement."""
    if any(item[2] != stmt for item in _ahead.values()):
        _stop_helpers()
    if _spare is not None and _spare[0] != stmt:
        _take_spare(None)


@sql_entry
def prestart(handle):
    """Spawn the helper processes of a hashed aggregate while its scan goes on: the C
    transition function calls this once per statement, after 20,000 rows. The statement's
    first final call takes them (:func:`_start_ahead`), or closes them when its groups are
    not worth helpers; nothing is trained here."""
    from ..db import backend_session
    from ..procpool import MAX_PROCESSES, HelperPool, helper_python

    global _spare
    found = _buffers(backend_session(), handle)
    if not found or _pool is not None:
        return None
    meta = found[0]
    _stop_ended(meta["stmt"])
    if _spare is not None:
        return None
    try:
        _, options_obj = _request(meta)
    except GroupmlError:
        return None                       # the group's final call raises it
    helpers = min(int(options_obj.get("threads") or 0) or _default_threads(), MAX_PROCESSES)
    python = helper_python() if helpers > 1 else None
    if python is not None:
        _spare = (meta["stmt"], HelperPool(helpers, python))
    return None


def _start_ahead(session, threads: int, meta: dict) -> None:
    """Start this group and every other complete buffer of its statement in helper processes,
    largest first (this group first among equals: its caller waits)."""
    from ..procpool import MAX_PROCESSES, HelperPool, helper_python

    global _pool
    todo = []
    for m in _buffers(session):
        if (m["handle"] in _ahead or m["handle"] in _done or m["stmt"] != meta["stmt"] or m["anomaly"]
                or not m["d"] or not m["n_rows"]):
            continue
        try:
            request = _request(m)
        except GroupmlError:
            continue                      # its own final call raises it
        todo.append((m, request))
    helpers = min(threads, len(todo), MAX_PROCESSES)
    python = helper_python() if helpers > 1 else None
    spare = _take_spare(meta["stmt"])
    if python is None or not _worth_helpers(session, todo, helpers):
        global _declined
        _declined = meta["stmt"]          # its later final calls train their groups here
        if spare is not None:
            spare.close(terminate=True)
        return
    todo.sort(key=lambda mr: (-mr[0]["n_rows"], mr[0]["handle"] != meta["handle"]))
    _pool = spare if spare is not None else HelperPool(helpers, python)
    for m, request in todo:
        _ahead[m["handle"]] = (m["n_rows"], m["skipped"], m["stmt"])
        _queue.append((m, request))
    _feed(session)


def _feed(session) -> None:
    """Hand queued groups to the helpers that are free, reading each group's rows only then."""
    while _queue and _pool is not None and _pool.has_free_helper:
        m, (search_obj, options_obj) = _queue.pop(0)
        h = m["handle"]
        raw = _rows(session, h)
        if not raw:                       # its statement ended meanwhile: nothing to train
            _ahead.pop(h, None)
            continue
        rows = len(raw) // (8 * (m["d"] + 1))
        _ahead[h] = (rows, m["skipped"], m["stmt"])       # what the helper trains on
        _pool.submit(h, fit_native_outcome, raw, m["d"], m["skipped"], m["model"], search_obj, options_obj,
                     _cost_model(session, m["model"], m["stmt"]))
        del raw


def _worth_helpers(session, todo: list, helpers: int) -> bool:
    """Whether ``helpers`` processes finish these groups sooner than the backend alone: the
    planner's estimate of their training (the cost model's seconds per search) must exceed
    what starting the helpers costs, ``startup * h / (h - 1)``. A small search (one pass
    of one configuration, say) trains faster here than a helper starts."""
    from ..fitting import plan_group, validate_request
    from ..planner import HostCosts

    total = 0.0
    for m, (search_obj, options_obj) in todo:
        family, spec, opts = validate_request(m["model"], search_obj, options_obj)
        n_train = int(m["n_rows"] * (1.0 - opts["validation_fraction"]))
        total += plan_group(spec, family, n_train, m["d"], _cost_model(session, m["model"], m["stmt"]))["seconds"]
    return total > HostCosts().helper_startup * helpers / (helpers - 1)


def _collect(session, handle: int, meta: dict):
    """The result started ahead for ``handle`` if its rows did not change since; else None.
    Waits for it, handing queued groups to the helpers as they free up and checking for
    cancel (the pool's results() polls) meanwhile."""
    global _pool
    if handle not in _ahead:
        return None
    while handle not in _done and _pool is not None:
        _feed(session)
        if not _pool.pending:
            break
        key, outcome = next(_pool.results(session.check_cancel))
        _done[key] = outcome
    _feed(session)                        # the helpers go on while this group's fit is returned
    if _pool is not None and not _pool.pending and not _queue:
        pool, _pool = _pool, None
        pool.close()
    item = _ahead.pop(handle)
    outcome = _done.pop(handle, None)
    if outcome is None or item[:2] != (meta["n_rows"], meta["skipped"]):
        return None                       # it grew after its start: trained again here
    status, value = outcome
    if status == "error":
        raise value
    return value


@sql_entry
def final(state):
    from threadpoolctl import threadpool_limits

    from ..db import backend_session
    from ..fitting import empty_fit

    if state is None:
        return empty_fit("no rows reached the aggregate")
    session = backend_session()
    found = _buffers(session, state)
    if not found:
        raise DataError("learn_over_groups lost its row buffer (the backend was reset mid-aggregate)",
                        hint="Run the statement again.")
    meta = found[0]
    try:
        search_obj, options_obj = _request(meta)
        _check_rows(meta)
        _stop_ended(meta["stmt"])
        if not meta["d"]:
            return empty_fit("every row had a NULL label or NULL features", n_skipped=meta["skipped"])
        threads = int(options_obj.get("threads") or 0) or _default_threads()
        if threads > 1 and state not in _ahead and state not in _done and meta["stmt"] != _declined:
            _start_ahead(session, threads, meta)
        result = _collect(session, state, meta)
        if result is None:
            # one BLAS thread: a backend is one core's worth of work, and OpenBLAS's idle threads
            # spinning beside other backends cost more than they give on these tall, thin products
            with threadpool_limits(limits=1, user_api="blas"):
                result = fit_native(_rows(session, state), meta["d"], meta["skipped"], meta["model"], search_obj,
                                    options_obj, _cost_model(session, meta["model"], meta["stmt"]),
                                    interrupt_check=session.check_cancel)
    except BaseException:
        _stop_helpers()                   # cancel or error: the statement fails, its other groups stop
        raise
    if options_obj.get("progress"):
        session.notice(f"groupml: trained a group of {result.n_train + result.n_validation} rows: {result.status}"
                       + (f", {result.metric} {result.score:.4f}" if result.score is not None else ""))
    return result.as_sql()


def _default_threads() -> int:
    from ..fitting import default_threads

    return default_threads()
