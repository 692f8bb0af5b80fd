"""Small validators used everywhere user input enters groupml.

They raise :mod:`groupml.errors` classes with messages of one shape::

    The '<name>' value of <owner> must be <rule>; got <value>

``owner`` names where the value came from ("search", "learn_over_groups options",
"model 'logistic'", ...). Never use ``assert`` for user input.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Iterable, Mapping

from .errors import InvalidParameterError, SearchSpecError


#: Characters of a text value an error message shows at most (a 1 MB name was echoed whole).
SHOWN_CHARS = 100


def _fmt(value: Any) -> str:
    """A value as a message shows it: SQL's words for NULL, booleans and the special floats,
    long texts cut short (never Python's None, True, nan or inf)."""
    if isinstance(value, str):
        if len(value) > SHOWN_CHARS:
            return repr(value[:SHOWN_CHARS]) + f"... ({len(value):,} characters)"
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return short_int(value)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


shown = _fmt


def clipped(text: Any) -> str:
    """A name a message quotes itself ('...'), cut to :data:`SHOWN_CHARS` like :func:`shown`."""
    text = str(text)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + f"... ({len(text):,} characters)"


def short_int(value: int) -> str:
    """An integer as messages show it: in full below 10**30, else short -- 10**308 (what jsonb
    makes of 1e308) is '1e+308', not its 309 digits."""
    digits = str(abs(value))
    if len(digits) <= 30:
        return str(value)
    mantissa = (digits[0] + "." + digits[1:7]).rstrip("0").rstrip(".")
    return f"{'-' if value < 0 else ''}{mantissa}e+{len(digits) - 1}"


def finite_float(value: Any) -> float | None:
    """``float(value)``, or None when that is NaN, infinite or overflows (a huge integer)."""
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def _bound(b: float) -> str:
    return str(b) if isinstance(b, Integral) else f"{b:g}"


def fail(name: str, owner: str, rule: str, value: Any, *, hint: str | None = None,
         cls: type = InvalidParameterError):
    """Raise ``cls`` with the standard message (and a generic hint when none is given)."""
    if hint is None:
        hint = f"Give '{name}' a value that is {rule}; SELECT groupml.help() lists every option."
    raise cls(f"The '{name}' value of {owner} must be {rule}; got {_fmt(value)}", hint=hint)


def check_number(value: Any, name: str, owner: str, *, gt: float | None = None,
                 ge: float | None = None, lt: float | None = None, le: float | None = None,
                 integer: bool = False, hint: str | None = None, cls: type = InvalidParameterError):
    """Return ``value`` as float (or int when ``integer``) after range checks."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, Real):
        fail(name, owner, kind, value, hint=hint, cls=cls)
    if integer and not isinstance(value, Integral):
        as_float = finite_float(value)
        if as_float is not None and as_float.is_integer():
            value = int(value)
        else:
            fail(name, owner, kind, value, hint=hint, cls=cls)
    if not integer and finite_float(value) is None:
        fail(name, owner, "a finite number", value, hint=hint, cls=cls)
    if gt is not None and not value > gt:
        fail(name, owner, f"> {_bound(gt)}", value, hint=hint, cls=cls)
    if ge is not None and not value >= ge:
        fail(name, owner, f">= {_bound(ge)}", value, hint=hint, cls=cls)
    if lt is not None and not value < lt:
        fail(name, owner, f"< {_bound(lt)}", value, hint=hint, cls=cls)
    if le is not None and not value <= le:
        fail(name, owner, f"<= {_bound(le)}", value, hint=hint, cls=cls)
    return int(value) if integer else float(value)


def check_choice(value: Any, name: str, owner: str, choices: Iterable[Any], *,
                 hint: str | None = None, cls: type = InvalidParameterError):
    choices = list(choices)
    if value not in choices:
        shown = ", ".join(_fmt(c) for c in choices)
        fail(name, owner, f"one of {shown}", value, hint=hint, cls=cls)
    return value


def check_bool(value: Any, name: str, owner: str, *, hint: str | None = None,
               cls: type = InvalidParameterError):
    if not isinstance(value, bool):
        fail(name, owner, "true or false", value, cls=cls,
             hint=hint or f"Write {name} as a JSON boolean: true or false (no quotes).")
    return value


def check_keys(mapping: Mapping[str, Any], owner: str, allowed: Iterable[str], *,
               hint: str | None = None, cls: type = SearchSpecError):
    """Reject unknown keys: ``Unknown key 'x' in <owner>; allowed keys are a, b``."""
    allowed = sorted(allowed)
    for key in mapping:
        if key not in allowed:
            raise cls(
                f"Unknown key '{clipped(key)}' in {owner}; allowed keys are {', '.join(allowed)}",
                hint=hint or "Check the spelling; see SELECT groupml.help('search') for the schema.",
            )
    return mapping


def seeded_rng(seed: Any, owner: str = "search"):
    """Return a numpy Generator from an explicit integer seed (None -> fixed default 0)."""
    import numpy as np

    if seed is None:
        seed = 0
    seed = check_number(seed, "seed", owner, ge=0, integer=True, cls=SearchSpecError)
    return np.random.default_rng(seed)
