"""Group keys in record_send form compare by typed value (groupml.modelsets, pure Python)."""

import struct
from decimal import Decimal

import numpy as np
import pytest

from groupml.errors import DatatypeMismatchError, DataError
from groupml.modelsets import check_key_types, float8_array, group_key, int8_array, shown_key
from groupml.modelsets._keys import RECORD_OID, key_columns


def record(*cols):
    """record_send's bytes of (oid, value bytes or None) columns."""
    out = struct.pack(">i", len(cols))
    for oid, b in cols:
        out += struct.pack(">Ii", oid, -1 if b is None else len(b)) + (b or b"")
    return out


def numeric(digits, weight, sign=0, dscale=0):
    return struct.pack(">hhHh", len(digits), weight, sign, dscale) + struct.pack(f">{len(digits)}h", *digits)


def key(*cols):
    return group_key(key_columns(record(*cols)))


def test_integers_of_any_width_are_one_key():
    assert key((23, struct.pack(">i", 7))) == key((20, struct.pack(">q", 7))) == key((21, struct.pack(">h", 7)))
    assert key((23, struct.pack(">i", 7))) != key((23, struct.pack(">i", 8)))


def test_text_like_types_compare_as_text_and_char_without_trailing_blanks():
    assert key((25, b"FR")) == key((1043, b"FR")) == key((1042, b"FR  "))
    assert key((25, b"FR")) != key((25, b"FR "))


def test_floats_zero_signs_and_nan_compare_as_postgresql_does():
    assert key((701, struct.pack(">d", 0.0))) == key((701, struct.pack(">d", -0.0)))
    assert key((701, struct.pack(">d", float("nan")))) == key((700, struct.pack(">f", float("nan"))))
    assert key((700, struct.pack(">f", 1.5))) == key((701, struct.pack(">d", 1.5)))


def test_numeric_by_value_not_by_scale():
    one = numeric([1], 0, dscale=1)                       # 1.0
    one_00 = numeric([1], 0, dscale=2)                    # 1.00
    assert key((1700, one)) == key((1700, one_00))
    assert group_key([(1700, numeric([12, 3400], 0))])[0][1] == Decimal("12.34")
    assert group_key([(1700, numeric([5], 0, sign=0x4000))])[0][1] == Decimal(-5)
    assert group_key([(1700, numeric([], 0, sign=0xC000))])[0][1] == "NaN"


def test_a_row_of_several_values_is_unwrapped_and_nulls_are_a_key_value():
    inner = record((25, b"FR"), (1082, struct.pack(">i", 100)), (16, None))
    assert key_columns(record((RECORD_OID, inner))) == [(25, b"FR"), (1082, struct.pack(">i", 100)), (16, None)]
    assert group_key(key_columns(record((RECORD_OID, inner))))[2] == (16, None)


def test_key_types_are_checked_against_the_training_types():
    check_key_types([20], [23], ["region"], "s")
    with pytest.raises(DatatypeMismatchError, match="was date at training; got a key value of type text"):
        check_key_types([25], [1082], ["day"], "s")
    with pytest.raises(DatatypeMismatchError, match="2 group columns"):
        check_key_types([25], [25, 16], ["country", "mobile"], "s")


def test_shown_key_and_truncated_input():
    cols = [(25, b"FR"), (1082, struct.pack(">i", 1)), (23, None)]
    assert shown_key(cols, ["country", "day", "n"]) == "country = 'FR', day = 2000-01-02, n = NULL"
    with pytest.raises(DataError):
        key_columns(record((25, b"FR"))[:-1])


def test_packed_arrays():
    vals = np.array([1.5, -2.0, 3.25])
    buf = struct.pack(">iiIii", 1, 0, 701, 3, 1) + b"".join(struct.pack(">id", 8, v) for v in vals)
    assert float8_array(buf).tolist() == vals.tolist()
    ints = struct.pack(">iiIii", 1, 0, 20, 2, 1) + b"".join(struct.pack(">iq", 8, v) for v in (5, -6))
    assert int8_array(ints).tolist() == [5, -6]
    assert float8_array(struct.pack(">iiI", 0, 0, 701)).size == 0
    with pytest.raises(DataError):
        float8_array(struct.pack(">iiIii", 1, 1, 701, 1, 1) + struct.pack(">i", -1))


def test_the_retraining_gate():
    from groupml.modelsets import gate

    assert gate("accuracy", 0.80, None, None, None, 0.0)[0] is True             # nothing active yet
    assert gate("accuracy", 0.80, 2, "accuracy", 0.80, 0.0) == (
        True, "activated: mean validation accuracy 0.8 against 0.8 of version 2 (margin 0)")
    ok, why = gate("accuracy", 0.79, 2, "accuracy", 0.80, 0.005)
    assert not ok and why.startswith("kept version 2: the new mean validation accuracy 0.79")
    assert gate("accuracy", 0.79, 2, "accuracy", 0.80, 0.02)[0] is True
    # lower is better for a loss-like metric
    assert gate("rmse", 1.10, 1, "rmse", 1.00, 0.05)[0] is False
    assert gate("rmse", 0.90, 1, "rmse", 1.00, 0.0)[0] is True
    assert gate("auc", 0.9, 1, "accuracy", 0.8, 0.0)[0] is False                 # do not compare
    assert gate("auc", None, 1, "auc", 0.8, 0.0)[0] is False
