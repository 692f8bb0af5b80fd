"""float8[] literals of the table scorer's predictions (groupml.modelsets, pure Python)."""

import numpy as np

import pytest

from groupml.errors import DataError
from groupml.modelsets import float8_image, float8_literal, float8_rows


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


def image(values, *, dims=None, offset=None, elem=701):
    """The bytes groupml._float8_bytes gives for a float8[] (after the length word); None in
    ``values`` is a NULL."""
    import struct
    dims = dims or (len(values),)
    nulls = any(v is None for v in values)
    head = struct.pack(f"=iiI{len(dims)}i{len(dims)}i", len(dims), 0, elem, *dims, *([1] * len(dims)))
    if nulls:
        bits = bytearray((len(values) + 7) // 8)
        for i, v in enumerate(values):
            if v is not None:
                bits[i // 8] |= 1 << (i % 8)
        head += bytes(bits)
    start = (len(head) + 4 + 7) // 8 * 8                          # MAXALIGNed from the length word
    if nulls or offset is not None:
        head = head[:4] + struct.pack("=i", start if offset is None else offset) + head[8:]
    head += b"\0" * (start - 4 - len(head))
    return head + np.array([v for v in values if v is not None], dtype=np.float64).tobytes()


def test_the_bytes_of_a_float8_array_are_read_without_a_conversion():
    values = [0.5, -1.25, float("nan"), 1e300]
    got, dims = float8_image(image(values))
    assert np.array_equal(got, values, equal_nan=True) and dims == (4,) and not got.flags.owndata
    assert float8_image(struct_empty())[0].size == 0 and float8_image(None)[0].size == 0


def struct_empty():
    import struct
    return struct.pack("=iiI", 0, 0, 701)


def test_rows_come_back_as_a_writable_matrix():
    rows = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    X = float8_rows(image(sum(rows, []), dims=(2, 3)), 3)
    assert X.shape == (2, 3) and np.array_equal(X, rows) and X.flags.writeable and X.flags.c_contiguous
    assert float8_rows(None, 3).shape == (0, 3)


def test_nulls_are_read_as_nan():
    for values in ([1.0, None, 3.0], [None] * 9, [None, 2.5] * 20 + [7.0]):
        got, _ = float8_image(image(values))
        want = np.array([np.nan if v is None else v for v in values])
        assert np.array_equal(got, want, equal_nan=True)
    X = float8_rows(image([1.0, None, 3.0, 4.0], dims=(2, 2)), 2)
    assert np.array_equal(X, [[1.0, np.nan], [3.0, 4.0]], equal_nan=True)


@pytest.mark.parametrize("bad", [image([1.0], elem=20), image([1.0], offset=64), image([1.0, 2.0])[:-8],
                                 image([1.0, None, 2.0])[:-8], b"\x01\x00", image([1.0, 2.0], dims=(1, 2))[:30]])
def test_anything_else_is_refused(bad):
    with pytest.raises(DataError):
        float8_image(bad)


@pytest.mark.parametrize("bad", [image([1.0, 2.0]), image([1.0, 2.0, 3.0, 4.0], dims=(2, 2))])
def test_rows_of_another_shape_are_refused(bad):
    with pytest.raises(DataError):
        float8_rows(bad, 3)
