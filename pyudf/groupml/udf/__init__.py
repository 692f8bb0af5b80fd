"""PL/Python entry points: the only code the SQL function bodies call.

Each body is one line, ``from groupml.udf.<module> import f; return f(...)``. The
functions here decode SQL values, call the pure-Python layers, encode results, and
map :class:`groupml.errors.GroupmlError` to ``ERROR`` with SQLSTATE and HINT via
:func:`sql_entry`. A cancel (``QueryCanceled``) is passed on as the same ERROR under our
prefix; bugs propagate unchanged.
"""

from __future__ import annotations

import functools
import json
from typing import Any

# imported here, by every entry point, also to install the cancel check groupml.interrupts
# hands to the pure packages (a LightGBM model check in predict notices a cancel)
from .. import db
from ..errors import GroupmlError, InvalidParameterError, OutOfMemoryError
from ..validation import shown


_sql_error_class = None


def _error_class():
    """A plpy.Error subclass named ``groupml`` in ``builtins``.

    PL/Python reports an uncaught exception as ``<module>.<class>: <message>`` unless the
    module is builtins, and reads ``sqlstate``/``hint``/``detail`` from plpy.Error
    instances; so users see ``ERROR:  groupml: <message>`` with our SQLSTATE and HINT.
    """
    global _sql_error_class
    if _sql_error_class is None:
        import plpy

        _sql_error_class = type("groupml", (plpy.Error,), {"__module__": "builtins"})
    return _sql_error_class


def raise_sql(exc: GroupmlError):
    err = _error_class()(exc.message)
    err.sqlstate = exc.sqlstate
    err.hint = exc.hint
    err.detail = exc.detail
    raise err from None


def take_args(namespace: dict, *names: str) -> list:
    """The arguments ``names`` of a PL/Python function, taken out of its globals.

    PL/Python keeps a call's arguments in the function's globals (and in their list ``args``)
    until its next call, which builds the new ones first: a large array (predict_batch of a
    million rows is gigabytes of Python floats) was held twice, and the second call ran out of
    memory inside PL/Python (an "unrecognized exception", once a crashed server). Bodies call
    ``f(*take_args(globals(), "a", "b"))``, so the arguments live only as long as the call."""
    values = [namespace.pop(n, None) for n in names]
    namespace.pop("args", None)
    return values


def sql_entry(fn):
    """Decorator for SQL entry points: GroupmlError -> ERROR with SQLSTATE, message and HINT.

    A PostgreSQL error of a statement groupml ran -- a cancel (SQLSTATE 57014) above all -- is
    passed on as the same ERROR, never swallowed, under our prefix: PL/Python would otherwise
    report it as ``spiexceptions.QueryCanceled: ...``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except GroupmlError as exc:
            raise_sql(exc)
        except MemoryError:
            # numpy, torch or Python could not allocate: PL/Python reported a bare 38000
            # "MemoryError" (or "unrecognized exception") with a traceback
            raise_sql(OutOfMemoryError(
                f"groupml ran out of memory in {fn.__name__}",
                hint="Process less at once (fewer rows per call, a smaller grid or model), or give the server "
                     "more memory."))
        except Exception as exc:
            state, first, detail, hint = db.error_parts(exc)
            if not state:
                raise                                       # a bug: PL/Python's traceback shows where
            # a PostgreSQL error of a statement groupml ran (a cancel, a read-only transaction,
            # ...): the same SQLSTATE, hint and detail, under our prefix instead of PL/Python's
            # class name ('spiexceptions.QueryCanceled: ...')
            err = _error_class()(first)
            err.sqlstate, err.detail, err.hint = state, detail, hint
            raise err from None

    return wrapper


def pinned(fn):
    """Run ``fn`` -- an entry point whose arguments hold no relation names to resolve -- with
    groupml's statements under the safe search_path (:meth:`groupml.db.PlpySession.pinned_search_path`)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with db.backend_session().pinned_search_path():
            return fn(*args, **kwargs)
    return wrapper


def families_hint() -> str:
    """The hint for a missing model family: every family learn_over_groups can train."""
    from ..learners import LEARNER_FAMILIES

    return f"Use one of {', '.join(sorted(LEARNER_FAMILIES))}."


def parse_jsonb(value: Any, name: str, owner: str, *, default=None) -> Any:
    """Decode a jsonb argument (PL/Python passes it as text) into Python objects."""
    if value is None:
        return default
    if isinstance(value, (dict, list)):
        return value
    try:
        return json.loads(value)
    except (TypeError, ValueError) as exc:  # pragma: no cover - jsonb input is already valid JSON
        raise InvalidParameterError(f"The '{name}' value of {owner} must be valid JSON; got {shown(value)}",
                                    hint=str(exc))


def parse_object(value: Any, name: str, owner: str) -> dict:
    obj = parse_jsonb(value, name, owner, default={})
    if not isinstance(obj, dict):
        raise InvalidParameterError(
            f"The '{name}' value of {owner} must be a JSON object; got {json.dumps(obj)}",
            hint=f"Pass an object such as '{{}}'; see SELECT groupml.help('{owner.split()[0]}').")
    return obj
