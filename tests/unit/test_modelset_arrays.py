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


def image_with_nulls(values):
    """The bytes of a float8[] with NULLs (None): bitmap after the dimension, then the values
    that are not NULL from the MAXALIGNed offset."""
    import struct
    n = len(values)
    bits = bytearray((n + 7) // 8)
    for i, v in enumerate(values):
        if v is not None:
            bits[i // 8] |= 1 << (i % 8)
    offset = (4 + 20 + len(bits) + 7) // 8 * 8                      # from the length word
    head = struct.pack("=iiIii", 1, offset, 701, n, 1) + bytes(bits)
    head += b"\0" * (offset - 4 - len(head))
    return head + np.array([v for v in values if v is not None], dtype=np.float64).tobytes()


def test_nulls_are_read_as_nan():
    for values in ([1.0, None, 3.0], [None] * 9, [None, 2.5] * 20 + [7.0]):
        got = float8_image(image_with_nulls(values))
        want = np.array([np.nan if v is None else v for v in values])
        assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("bad", [image([1.0], elem=20), image([1.0], offset=64), image([1.0], ndim=2),
                                 image_with_nulls([1.0, None, 2.0])[:-8],
                                 image([1.0, 2.0])[:-8], b"\x01\x00"])
def test_anything_else_is_refused(bad):
    with pytest.raises(DataError):
        float8_image(bad)
