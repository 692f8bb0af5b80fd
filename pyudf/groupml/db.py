"""The one narrow interface between groupml and a database session.

Algorithms never see this module; the SQL entry points (``groupml.udf``) and, later,
the executors that drive workers on other backends build a :class:`Session` and
hand plain data to the pure-Python layers.

:class:`PlpySession` implements it inside a backend (PL/Python); worker backends are
reached over psycopg connections by :mod:`groupml.executor.pool`, which sends them
requests for groupml's worker functions only. Identifiers are always quoted with
:func:`quote_ident`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import interrupts


def quote_ident(name: str) -> str:
    """Quote an identifier the way PostgreSQL's quote_ident does (always quoted)."""
    return '"' + str(name).replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """A text literal that reads the same whatever standard_conforming_strings is: an E''
    string, with backslashes and quotes doubled (as PostgreSQL's quote_literal does)."""
    text = str(value)
    body = text.replace("\\", "\\\\").replace("'", "''")
    return ("E'" if "\\" in text else "'") + body + "'"


def sqlstate_of(exc: BaseException) -> Optional[str]:
    """The SQLSTATE of an error: its ``sqlstate`` (groupml's errors, PL/Python's
    ``spiexceptions`` classes), else the code PL/Python packs into ``spidata[0]`` -- a plain
    ``plpy.SPIError`` (an SQLSTATE without a class of its own, e.g. a view's function raising
    ``ERRCODE = 'P0042'``) has no ``sqlstate``. None for an error that is not PostgreSQL's."""
    state = getattr(exc, "sqlstate", None)
    if state:
        return str(state)
    spidata = getattr(exc, "spidata", None)
    if spidata and isinstance(spidata[0], int):
        code = spidata[0]                 # MAKE_SQLSTATE: five 6-bit characters, first lowest
        return "".join(chr(((code >> (6 * i)) & 0x3F) + ord("0")) for i in range(5))
    return None


def error_parts(exc: BaseException) -> Tuple[Optional[str], str, Optional[str], Optional[str]]:
    """(SQLSTATE, first line of the message, detail, hint) of an error PL/Python raised for a
    statement (its ``spidata`` holds detail and hint): what every wrapper that passes such an
    error on in groupml's words keeps of it."""
    spidata = getattr(exc, "spidata", None) or ()
    first = (str(exc).split("\n", 1)[0] or "(no message)").strip()
    detail = spidata[1] if len(spidata) > 1 and spidata[1] else None
    hint = spidata[2] if len(spidata) > 2 and spidata[2] else None
    return sqlstate_of(exc), first, detail, hint


#: The search_path groupml's own statements run under (:meth:`PlpySession.pinned_search_path`).
SAFE_SEARCH_PATH = "pg_catalog, pg_temp"

class Session:
    """What groupml needs from a database session."""

    def query(self, sql: str, args: Sequence[Any] = (), types: Sequence[str] = ()) -> List[Dict[str, Any]]:
        raise NotImplementedError

    def check_cancel(self) -> None:
        """Give the server a chance to deliver a pending cancel (raises QueryCanceled)."""

    def notice(self, message: str) -> None:
        """Report progress to the client (NOTICE in psql)."""

    def commit(self) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def pinned_search_path(self):
        """Run groupml's own statements under a safe search_path (PlpySession); a no-op here."""
        yield

    @contextlib.contextmanager
    def callers_search_path(self, path: Optional[str] = None):
        """Read the user's source under the caller's search_path (PlpySession); a no-op here."""
        yield


class PlpySession(Session):
    """A session inside the current backend, through plpy. Plans are cached per statement."""

    def __init__(self, plpy_module=None):
        if plpy_module is None:
            import plpy as plpy_module  # only importable inside a PL/Python backend
        self.plpy = plpy_module
        self._plans: Dict[tuple, Any] = {}
        self._pinned = False
        self.callers_path: Optional[str] = None   # the caller's search_path while pinned

    @contextlib.contextmanager
    def pinned_search_path(self):
        """Run groupml's own SQL with ``search_path = pg_catalog, pg_temp`` (as a SECURITY
        DEFINER function should): its statements run in the caller's session, and a function
        or operator another role created in a schema on that path (public, say) with a closer
        type match than pg_catalog's polymorphic one would run with the caller's rights. Enter
        it after the user's own names are resolved (they are then schema-qualified); the
        caller's path is back when it exits, also across :meth:`commit`."""
        if self._pinned:
            yield
            return
        saved = self.query("SELECT pg_catalog.current_setting('search_path') AS p")[0]["p"]
        self._pin()
        self._pinned, self.callers_path = True, saved
        try:
            yield
        finally:
            self._pinned, self.callers_path = False, None
            self.query("SELECT pg_catalog.set_config('search_path', $1, true)", [saved], ["text"])

    @contextlib.contextmanager
    def callers_search_path(self, path: Optional[str] = None):
        """Within :meth:`pinned_search_path`, run the statements that read the user's source
        under the caller's own search_path (``path``: the one a worker is given by its
        coordinator): the source's views and functions are the caller's, run with the caller's
        rights, and may name their tables without a schema. groupml's own parts of those
        statements are schema-qualified throughout (``OPERATOR(pg_catalog.||)``, ...)."""
        target = path if path is not None else self.callers_path
        if not self._pinned or target is None:
            yield
            return
        self.query("SELECT pg_catalog.set_config('search_path', $1, true)", [target], ["text"])
        try:
            yield
        finally:
            self._pin()

    def _pin(self) -> None:
        self.query(f"SELECT pg_catalog.set_config('search_path', '{SAFE_SEARCH_PATH}', true)")

    def _plan(self, sql: str, types: Sequence[str]):
        key = (sql, tuple(types))
        plan = self._plans.get(key)
        if plan is None:
            plan = self.plpy.prepare(sql, list(types))
            self._plans[key] = plan
        return plan

    def query(self, sql, args=(), types=()):
        if not args:
            return list(self.plpy.execute(self._plan(sql, ())))
        return list(self.plpy.execute(self._plan(sql, types), list(args)))

    def cursor(self, sql, args=(), types=()):
        return self.plpy.cursor(self._plan(sql, types), list(args)) if args else self.plpy.cursor(sql)

    def check_cancel(self) -> None:
        self.plpy.execute(self._plan("SELECT 1", ()))

    def query_or_error(self, sql, args=(), types=()):
        """(rows, None), or (None, (sqlstate, message)) when the statement fails: it runs in a
        subtransaction, so the failure is undone and the caller can report it in its own words.
        A cancel is raised, never returned."""
        try:
            with self.plpy.subtransaction():
                return self.query(sql, args, types), None
        except self.plpy.SPIError as exc:
            state = sqlstate_of(exc)
            if state == "57014":
                raise
            return None, (state or "XX000", str(exc).split("\n", 1)[0])

    def notice(self, message: str) -> None:
        self.plpy.notice(message)

    def commit(self) -> None:
        try:
            self.plpy.commit()
            if self._pinned:                 # the setting was local to the transaction just ended
                self._pin()
        except self.plpy.SPIError as exc:
            if getattr(exc, "sqlstate", None) != "2D000":
                raise
            from .errors import InvalidTransactionTerminationError
            raise InvalidTransactionTerminationError(
                "This procedure commits as it goes (so a crash or cancel resumes, not restarts); it cannot run "
                "inside a transaction block", hint="CALL it on its own, not between BEGIN and COMMIT (psql's "
                "autocommit; in a driver, outside an explicit transaction).") from None


_session: Optional[PlpySession] = None


def backend_session() -> PlpySession:
    """The PlpySession of this backend (created on first use, once the database's groupml
    objects are found to be the package's version: :func:`check_catalog_version`)."""
    global _session
    if _session is None:
        session = PlpySession()
        check_catalog_version(session)
        _session = session
    return _session


def check_catalog_version(session) -> None:
    """The package's statements expect its own catalog: a package updated under a database
    whose objects are older (reinstalled, no ALTER EXTENSION UPDATE) failed deep inside a
    call with PostgreSQL's 'column ... does not exist'. Refused up front (55000), naming the
    statement that brings the objects up to date."""
    from . import __version__

    rows = session.query("SELECT e.extversion AS v FROM pg_catalog.pg_extension e WHERE e.extname = 'groupml'")
    found = rows[0].get("v") if rows else None
    if found is not None and found != __version__:
        from .errors import PrerequisiteStateError
        raise PrerequisiteStateError(
            f"groupml's objects in this database are version {found}, and its Python package is version "
            f"{__version__}", hint="Run ALTER EXTENSION groupml UPDATE; (as its owner or a superuser) to bring the "
                                   "objects to the package's version.")


def cancel_check_here():
    """This backend's cancel check when called on the main thread of a PL/Python backend, else
    None: plpy may only be called from that thread, and is absent from client processes and
    helper processes (spawned, never forked). The check is :meth:`PlpySession.check_cancel`
    (a statement), or during a parallel query, where no statement can run
    (:func:`in_parallel_mode`), :func:`pending_interrupt_check`."""
    if "plpy" not in sys.modules or threading.current_thread() is not threading.main_thread():
        return None
    if in_parallel_mode():
        return pending_interrupt_check()
    return backend_session().check_cancel


_server = None


def _server_symbols():
    """The running server's own symbols (ctypes; PostgreSQL exports them for extensions)."""
    global _server
    if _server is None:
        import ctypes

        lib = ctypes.CDLL(None)
        lib.IsInParallelMode.restype = ctypes.c_bool
        lib.IsInParallelMode.argtypes = []
        _server = lib
    return _server


def in_parallel_mode() -> bool:
    """Whether this backend runs a parallel query now: a parallel worker, or the leader until
    its query ends (also above the Gather). PL/Python wraps every statement in a subtransaction,
    which PostgreSQL cannot start then ("cannot start subtransactions during a parallel
    operation"), so a PARALLEL SAFE function runs none. Asked of the server's
    IsInParallelMode() directly (a statement could not ask); False outside a PL/Python backend,
    and True where the server's symbol cannot be found (then no statement is tried)."""
    if "plpy" not in sys.modules:
        return False
    try:
        return bool(_server_symbols().IsInParallelMode())
    except (OSError, AttributeError):
        return True


#: The server's interrupt flags read by :func:`pending_interrupt_check` (sig_atomic_t is an int,
#: the hold-off counts uint32).
_FLAGS = ("InterruptPending", "QueryCancelPending", "ProcDiePending")
_HOLDOFFS = ("InterruptHoldoffCount", "QueryCancelHoldoffCount", "CritSectionCount")


def pending_interrupt_check(flags=None):
    """A cancel check that runs no statement (for a parallel query): it reads the server's
    interrupt flags and, where the server would act on them at its next interrupt check, raises
    57014 for a cancel or timeout and 57P01 for a termination (a parallel query's leader ends
    its workers so), stopping the work before the server's own error. ``flags``: name -> an
    object whose ``value`` is that flag (the server's own, through ctypes, by default); None
    when they cannot be read (then the work is not checked)."""
    if flags is None:
        try:
            import ctypes

            lib = _server_symbols()
            flags = {n: ctypes.c_int.in_dll(lib, n) for n in _FLAGS}
            flags.update({n: ctypes.c_uint32.in_dll(lib, n) for n in _HOLDOFFS})
        except (OSError, ValueError, AttributeError):
            return None

    def check() -> None:
        if not flags["InterruptPending"].value or flags["InterruptHoldoffCount"].value \
                or flags["CritSectionCount"].value:
            return
        from .errors import PassedOnError
        if flags["ProcDiePending"].value:
            raise PassedOnError("57P01", "groupml stopped: this server process is being terminated",
                                hint="pg_terminate_backend, a server shutdown, or the end of the parallel query "
                                     "this process worked for (an error or cancel in another of its processes).")
        if flags["QueryCancelPending"].value and not flags["QueryCancelHoldoffCount"].value:
            raise PassedOnError("57014", "groupml stopped: the statement was canceled (a cancel request or a "
                                         "timeout)",
                                hint="pg_cancel_backend or a statement_timeout or lock_timeout ended the "
                                     "statement; run it again, with a longer timeout if one ended it.")
    return check


_token_fns = None


def statement_token():
    """A value that changes with every statement this backend runs (and within one, with a
    change of transaction, command or role), read from the server without running a statement;
    None when it cannot be read (then the caller asks the database every time). Model-set
    scorers check a set's active version once per token: what the statement's own snapshot
    sees, at the cost of one query per statement, not per row."""
    global _token_fns
    if "plpy" not in sys.modules:
        return None
    if _token_fns is None:
        try:
            import ctypes

            lib = _server_symbols()
            fns = []
            for name, restype, args in (("GetCurrentStatementStartTimestamp", ctypes.c_int64, ()),
                                        ("GetCurrentTransactionStartTimestamp", ctypes.c_int64, ()),
                                        ("GetCurrentCommandId", ctypes.c_uint32, (ctypes.c_bool,)),
                                        ("GetUserId", ctypes.c_uint32, ())):
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, list(args)
                fns.append((fn, (False,) if args else ()))
            _token_fns = fns
        except (OSError, AttributeError):
            _token_fns = []
    if not _token_fns:
        return None
    return tuple(fn(*a) for fn, a in _token_fns)


interrupts.install(cancel_check_here)       # what the pure packages call cancel_check_here
