"""A stand-in for PL/Python's ``plpy`` module, for unit tests of groupml's SQL entry code
(``groupml.udf``, ``groupml.db.PlpySession``) outside a server.

It has the parts of the real module that groupml uses, with the same shapes:

* ``Error`` / ``Fatal`` / ``SPIError`` and ``spiexceptions``: one ``SPIError`` subclass per
  condition name, with its SQLSTATE as the class attribute ``sqlstate`` (a plain ``SPIError``
  has none), and raised instances carrying ``spidata`` = (SQLSTATE packed as PostgreSQL's
  MAKE_SQLSTATE integer, detail, hint, query, position);
* ``prepare(sql, types)`` returning a plan, ``execute(query_or_plan, args)``, ``cursor``,
  ``subtransaction()``, ``commit()`` / ``rollback()``;
* ``notice`` / ``info`` / ``warning`` / ``debug`` / ``log`` and ``error`` / ``fatal`` (which raise);
* ``quote_ident`` / ``quote_literal`` / ``quote_nullable``.

Statements are answered by responders a test registers with :meth:`PlpyStub.on`: the first
whose pattern occurs in the statement's text gives the rows (a list of dicts, or a callable
``(sql, args) -> rows`` that may also raise, e.g. ``stub.spiexceptions.QueryCanceled``). A
statement nothing answers returns no rows. By default the extension's version is answered
with the package's own (``extversion``), as in a database whose objects are up to date.
Everything executed is recorded in ``statements``; notices in ``notices``.

The ``plpy`` fixture in tests/conftest.py puts a fresh stub into ``sys.modules``.
"""

from __future__ import annotations

import contextlib
import re
import types
from typing import Any, Callable, List, Optional, Sequence, Union

#: condition name -> SQLSTATE, for the spiexceptions groupml's code and tests meet
SPI_CONDITIONS = {
    "QueryCanceled": "57014",
    "ReadOnlySqlTransaction": "25006",
    "InvalidTransactionTermination": "2D000",
    "InsufficientPrivilege": "42501",
    "UndefinedTable": "42P01",
    "UndefinedColumn": "42703",
    "UndefinedFunction": "42883",
    "UndefinedObject": "42704",
    "DuplicateObject": "42710",
    "UniqueViolation": "23505",
    "CheckViolation": "23514",
    "NotNullViolation": "23502",
    "DivisionByZero": "22012",
    "InvalidParameterValue": "22023",
    "DataException": "22000",
    "SerializationFailure": "40001",
    "DeadlockDetected": "40P01",
    "LockNotAvailable": "55P03",
    "ObjectNotInPrerequisiteState": "55000",
    "FeatureNotSupported": "0A000",
    "OutOfMemory": "53200",
    "AdminShutdown": "57P01",
    "InternalError": "XX000",
}


def make_sqlstate(state: str) -> int:
    """PostgreSQL's MAKE_SQLSTATE: five 6-bit characters, the first in the lowest bits."""
    return sum(((ord(c) - ord("0")) & 0x3F) << (6 * i) for i, c in enumerate(state))


class Error(Exception):
    """plpy.Error"""


class Fatal(Exception):
    """plpy.Fatal"""


class SPIError(Error):
    """plpy.SPIError: an error PostgreSQL raised for a statement."""

    def __init__(self, message: str = "", *, detail: Optional[str] = None, hint: Optional[str] = None,
                 query: Optional[str] = None, position: int = 0):
        super().__init__(message)
        state = getattr(type(self), "sqlstate", None) or "XX000"
        self.spidata = (make_sqlstate(state), detail, hint, query, position)


def _spiexceptions() -> types.ModuleType:
    module = types.ModuleType("plpy.spiexceptions")
    for name, state in SPI_CONDITIONS.items():
        setattr(module, name, type(name, (SPIError,), {"sqlstate": state, "__module__": "spiexceptions"}))
    return module


class Plan:
    """What ``plpy.prepare`` returns: the statement and its argument types."""

    def __init__(self, sql: str, types: Sequence[str], owner: "PlpyStub"):
        self.sql = sql
        self.types = list(types)
        self._owner = owner

    def execute(self, args=None, max_rows=None):  # PLyPlan.execute, as the real plan object has
        return self._owner.execute(self, args, max_rows)


class Result(list):
    """What ``plpy.execute`` returns: a list of row dicts with ``nrows()`` and ``status()``."""

    def nrows(self) -> int:
        return len(self)

    def status(self) -> int:
        return 5  # SPI_OK_SELECT

    def colnames(self) -> List[str]:
        return list(self[0]) if self else []


class Cursor:
    """What ``plpy.cursor`` returns: iterable, with ``fetch(n)`` and ``close()``."""

    def __init__(self, rows):
        self._rows = list(rows)

    def fetch(self, n: int) -> Result:
        out, self._rows = self._rows[:n], self._rows[n:]
        return Result(out)

    def __iter__(self):
        while self._rows:
            yield self._rows.pop(0)

    def close(self) -> None:
        self._rows = []


Rows = Union[Sequence[dict], Callable[[str, Optional[list]], Sequence[dict]]]


class PlpyStub(types.ModuleType):
    """One fresh ``plpy`` module; see the module docstring."""

    Error = Error
    Fatal = Fatal
    SPIError = SPIError

    def __init__(self, extversion: Optional[str] = None):
        super().__init__("plpy")
        self.spiexceptions = _spiexceptions()
        self.statements: List[tuple] = []    # (sql, args) in the order executed
        self.notices: List[str] = []
        self.messages: List[tuple] = []      # (level, message) of every notice/info/warning/...
        self.commits = 0
        self.rollbacks = 0
        self.subtransactions = 0
        self._responders: List[tuple] = []
        if extversion is None:
            import groupml
            extversion = groupml.__version__
        self.extversion = extversion
        self.on("extversion", lambda sql, args: [{"v": self.extversion}])

    # -- answers ------------------------------------------------------------
    def on(self, pattern: str, rows: Rows) -> None:
        """Answer statements whose text contains ``pattern`` with ``rows`` (or ``rows(sql, args)``).
        Responders registered later are asked first."""
        self._responders.insert(0, (pattern, rows))

    def _answer(self, sql: str, args) -> Result:
        self.statements.append((sql, None if args is None else list(args)))
        for pattern, rows in self._responders:
            if pattern in sql:
                return Result(rows(sql, args) if callable(rows) else [dict(r) for r in rows])
        return Result()

    # -- statements ---------------------------------------------------------
    def prepare(self, sql: str, types: Optional[Sequence[str]] = None) -> Plan:
        return Plan(sql, types or (), self)

    def execute(self, query: Union[str, Plan], args: Optional[Sequence[Any]] = None, max_rows=None) -> Result:
        if isinstance(query, Plan):
            if len(args or ()) != len(query.types):
                raise TypeError(f"plan expected {len(query.types)} argument(s), got {len(args or ())}")
            return self._answer(query.sql, args)
        if args is not None:
            raise TypeError("plpy.execute with arguments needs a prepared plan")
        return self._answer(query, None)

    def cursor(self, query: Union[str, Plan], args: Optional[Sequence[Any]] = None) -> Cursor:
        return Cursor(self.execute(query, args))

    @contextlib.contextmanager
    def subtransaction(self):
        """Counted in ``subtransactions``; an error inside passes on (the stub keeps no data to undo)."""
        self.subtransactions += 1
        yield

    def commit(self) -> None:
        self.commits += 1

    def rollback(self) -> None:
        self.rollbacks += 1

    # -- messages -----------------------------------------------------------
    def _message(self, level: str, msg: str) -> None:
        self.messages.append((level, str(msg)))

    def notice(self, msg, **_kw) -> None:
        self._message("notice", msg)
        self.notices.append(str(msg))

    def info(self, msg, **_kw) -> None:
        self._message("info", msg)

    def warning(self, msg, **_kw) -> None:
        self._message("warning", msg)

    def debug(self, msg, **_kw) -> None:
        self._message("debug", msg)

    def log(self, msg, **_kw) -> None:
        self._message("log", msg)

    def error(self, msg, **_kw):
        raise self.Error(msg)

    def fatal(self, msg, **_kw):
        raise self.Fatal(msg)

    # -- quoting ------------------------------------------------------------
    @staticmethod
    def quote_ident(name: str) -> str:
        """Quoted unless it is a plain lower-case name (keywords are not checked)."""
        text = str(name)
        if re.fullmatch(r"[a-z_][a-z0-9_$]*", text):
            return text
        return '"' + text.replace('"', '""') + '"'

    @staticmethod
    def quote_literal(value: str) -> str:
        text = str(value)
        body = text.replace("\\", "\\\\").replace("'", "''")
        return ("E'" if "\\" in text else "'") + body + "'"

    @classmethod
    def quote_nullable(cls, value) -> str:
        return "NULL" if value is None else cls.quote_literal(value)
