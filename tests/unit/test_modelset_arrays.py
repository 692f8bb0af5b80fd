"""float8[] literals of the table scorer's predictions (groupml.modelsets, pure Python)."""

import numpy as np

from groupml.modelsets import float8_literal


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
