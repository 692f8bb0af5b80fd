"""Group keys in PostgreSQL's binary form, compared by typed value.

``record_send(ROW(a, b))`` writes the number of columns, then for each column its type's OID,
the length of its value (-1 for NULL) and the value as the type's send function writes it: a
form no session setting changes. :func:`group_key` reads it into a tuple whose items compare
equal exactly when PostgreSQL's equality of the typed values holds (for the types below):
integers of any width as one class, text-like types as another (bpchar without its trailing
blanks), float4/float8 as a third (-0 equal to 0, NaN equal to NaN, as PostgreSQL orders them),
numeric by value (1.0 equals 1.00). Every other type compares by its binary value and its type.
A NULL key value is None, so a row whose key is NULL routes to the group GROUP BY formed of the
NULL values at training.
"""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal
from typing import List, Optional, Sequence, Tuple

from ..errors import DatatypeMismatchError, DataError

RECORD_OID = 2249
_INT = {20: ">q", 21: ">h", 23: ">i"}
_TEXT = {25, 1043, 1042, 19}
_FLOAT = {700: ">f", 701: ">d"}
_NAMES = {16: "boolean", 20: "bigint", 21: "smallint", 23: "integer", 25: "text", 1043: "character varying",
          1042: "character", 19: "name", 700: "real", 701: "double precision", 1700: "numeric", 1082: "date",
          1114: "timestamp without time zone", 1184: "timestamp with time zone", 1083: "time without time zone",
          2950: "uuid", 2249: "record"}
_EPOCH = datetime.date(2000, 1, 1)


def key_class(oid: int):
    """The class of values a key column of type ``oid`` compares with: 'integer', 'text',
    'float', or the type itself."""
    if oid in _INT:
        return "integer"
    if oid in _TEXT:
        return "text"
    if oid in _FLOAT:
        return "float"
    return oid


def type_label(oid: int, names: Optional[dict] = None) -> str:
    return (names or {}).get(oid) or _NAMES.get(oid) or f"type {oid}"


def decode_record(data: bytes) -> List[Tuple[int, Optional[bytes]]]:
    """[(type OID, value bytes or None)] of ``record_send`` output."""
    try:
        (n,) = struct.unpack_from(">i", data, 0)
        pos, out = 4, []
        for _ in range(n):
            oid, length = struct.unpack_from(">Ii", data, pos)
            pos += 8
            if length < 0:
                out.append((oid, None))
            else:
                if pos + length > len(data):
                    raise ValueError("truncated")
                out.append((oid, bytes(data[pos:pos + length])))
                pos += length
        return out
    except (struct.error, ValueError):
        raise DataError("A group key is not in record_send's binary form",
                        hint="Pass the group column itself, or ROW(a, b, ...) for several.") from None


def key_columns(data: bytes) -> List[Tuple[int, Optional[bytes]]]:
    """The key's columns: ``record_send(ROW(k))`` of one value, or of ROW(a, b, ...) (then
    the one column is an anonymous record, whose columns are the key's)."""
    cols = decode_record(data)
    if len(cols) == 1 and cols[0][0] == RECORD_OID and cols[0][1] is not None:
        return decode_record(cols[0][1])
    return cols


def _numeric(b: bytes):
    ndigits, weight, sign, dscale = struct.unpack_from(">hhHh", b, 0)
    if sign == 0xC000:
        return "NaN"
    if sign in (0xD000, 0xF000):
        return "inf" if sign == 0xD000 else "-inf"
    digits = struct.unpack_from(f">{ndigits}h", b, 8)
    value = Decimal(0)
    for i, d in enumerate(digits):
        value += Decimal(d).scaleb(4 * (weight - i))
    value = -value if sign == 0x4000 else value
    return value.normalize() if value else Decimal(0)


def _value(oid: int, b: Optional[bytes]):
    if b is None:
        return None
    if oid in _INT:
        return struct.unpack(_INT[oid], b)[0]
    if oid in _TEXT:
        return b.rstrip(b" ") if oid == 1042 else b
    if oid in _FLOAT:
        v = struct.unpack(_FLOAT[oid], b)[0]
        return "NaN" if v != v else (0.0 if v == 0 else v)
    if oid == 16:
        return b != b"\x00"
    if oid == 1700:
        return _numeric(b)
    return b


def group_key(columns: Sequence[Tuple[int, Optional[bytes]]]) -> tuple:
    """The comparable key of decoded key columns: (class, value) per column."""
    return tuple((key_class(oid), _value(oid, b)) for oid, b in columns)


def check_key_types(given: Sequence[int], expected: Sequence[int], group_by: Sequence[str], model_set: str,
                    names: Optional[dict] = None) -> None:
    """A key must have the version's number of columns, each of a type that compares with the
    type the column had at training (42804 otherwise)."""
    want = ", ".join(f"{g} {type_label(t, names)}" for g, t in zip(group_by, expected))
    if len(given) != len(expected):
        several = "ROW(" + ", ".join(group_by) + ")" if len(group_by) != 1 else group_by[0]
        raise DatatypeMismatchError(
            f"Model set '{model_set}' routes rows by {len(expected)} group column{'s' if len(expected) != 1 else ''} "
            f"({want or 'none'}); got a key of {len(given)} value{'s' if len(given) != 1 else ''}",
            hint=f"Pass the group key as {several if group_by else 'ROW()'}.")
    for i, (g, e) in enumerate(zip(given, expected)):
        if key_class(g) != key_class(e):
            raise DatatypeMismatchError(
                f"Group column {group_by[i]} of model set '{model_set}' was {type_label(e, names)} at training; got a "
                f"key value of type {type_label(g, names)}",
                hint=f"Cast it: ({group_by[i]})::{type_label(e, names)}.")


def shown_key(columns: Sequence[Tuple[int, Optional[bytes]]], group_by: Sequence[str]) -> str:
    """A key for messages: column = value, in the value's own terms."""
    parts = []
    for name, (oid, b) in zip(group_by, columns):
        v = _value(oid, b)
        if v is None:
            text = "NULL"
        elif oid in _TEXT:
            text = repr(v.decode("utf-8", "replace"))
        elif oid == 1082:
            text = (_EPOCH + datetime.timedelta(days=v if isinstance(v, int) else struct.unpack(">i", b)[0])).isoformat()
        elif oid in (1114, 1184):
            us = struct.unpack(">q", b)[0]
            text = (datetime.datetime(2000, 1, 1) + datetime.timedelta(microseconds=us)).isoformat() + \
                ("+00" if oid == 1184 else "")
        elif isinstance(v, bytes):
            text = "\\x" + v.hex()
        else:
            text = str(v)
        parts.append(f"{name} = {text}")
    return ", ".join(parts) if parts else "()"
