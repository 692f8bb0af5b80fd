"""One-dimensional float8[] / int8[] values in array_send's binary form, read with numpy."""

from __future__ import annotations

import struct

import numpy as np

from ..errors import DataError

_F8 = np.dtype([("len", ">i4"), ("v", ">f8")])
_I8 = np.dtype([("len", ">i4"), ("v", ">i8")])


def _read(data: bytes, dtype, oid: int) -> np.ndarray:
    if data is None:
        return np.empty(0)
    ndim, hasnull, elem = struct.unpack_from(">iiI", data, 0)
    if ndim == 0:
        return np.empty(0)
    if ndim != 1 or elem != oid or hasnull:
        raise DataError("A packed column is not a one-dimensional array without NULLs",
                        hint="predict_table packs the columns itself; call it rather than this function.")
    (n,) = struct.unpack_from(">i", data, 12)
    rows = np.frombuffer(data, dtype=dtype, count=n, offset=20)
    return rows["v"].astype(dtype["v"].newbyteorder("="))


def float8_array(data: bytes) -> np.ndarray:
    """The values of array_send(float8[])."""
    return _read(data, _F8, 701)


def int8_array(data: bytes) -> np.ndarray:
    """The values of array_send(int8[])."""
    return _read(data, _I8, 20)
