"""float8[] literals of the table scorer's predictions (groupml.modelsets, pure Python)."""

import numpy as np

import pytest

from groupml.errors import DataError
from groupml.modelsets import float8_image, float8_literal


def parsed(text):
    """What PostgreSQL's array_in makes of a one-dimensional float8[] literal (None: NULL)."""
    assert text[0] == "{" and text[-1] == "}"
    body = text[1:-1]
    return [] if not body else [None if t == "NULL" else float(t) for t in body.split(",")]


def test_classes_are_written_one_byte_each():
    assert float8_literal(np.array([0.0, 1.0, 1.0, 0.0])) == "{0,1,1,0}"
    assert float8_literal(np.array([1.0])) == "{1}"
    assert float8_literal(np.array([])) == "{}"


def test_null_rows_are_null_in_either_form():
    null = np.array([False, True, False])
    assert float8_literal(np.array([1.0, 0.0, 0.0]), null) == "{1,NULL,0}"
    assert parsed(float8_literal(np.array([0.25, 9.0, -3.5]), null)) == [0.25, None, -3.5]
    assert float8_literal(np.zeros(2), np.ones(2, dtype=bool)) == "{NULL,NULL}"
    assert float8_literal(np.array([1.0, 0.0]), np.zeros(2, dtype=bool)) == "{1,0}"


def test_any_other_value_reads_back_to_the_same_float8():
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.normal(size=500) * 10.0 ** rng.integers(-300, 300, size=500),
                             [0.1, 1 / 3, 2.0, 5e-324, 1.7976931348623157e308, -0.0, 0.0, 1.0]])
    back = parsed(float8_literal(values))
    assert np.array_equal(np.array(back), values)
    assert np.signbit(back[-3])          # -0 stays -0 (it is not written as the class 0)


def test_a_negative_zero_among_classes_keeps_its_sign():
    back = parsed(float8_literal(np.array([1.0, -0.0])))
    assert back == [1.0, 0.0] and np.signbit(back[1])


def image(values, *, ndim=1, offset=0, elem=701):
    """The bytes groupml._float8_bytes gives for a one-dimensional float8[] (after the length word)."""
    import struct
    return struct.pack("=iiIii", ndim, offset, elem, len(values), 1) + np.asarray(values, dtype=np.float64).tobytes()


def test_the_bytes_of_a_float8_array_are_read_without_a_copy():
    values = [0.5, -1.25, float("nan"), 1e300]
    got = float8_image(image(values))
    assert np.array_equal(got, values, equal_nan=True) and not got.flags.owndata
    assert float8_image(struct_empty()).size == 0 and float8_image(None).size == 0


def struct_empty():
    import struct
    return struct.pack("=iiI", 0, 0, 701)


@pytest.mark.parametrize("bad", [image([1.0], elem=20), image([1.0], offset=32), image([1.0], ndim=2),
                                 image([1.0, 2.0])[:-8], b"\x01\x00"])
def test_anything_else_is_refused(bad):
    with pytest.raises(DataError):
        float8_image(bad)
