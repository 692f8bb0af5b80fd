"""float8[] / int8[] values read with numpy: from array_send's binary form (one-dimensional), or
from the array's own bytes (groupml._float8_bytes: the server's in-memory ArrayType, native byte
order, no per-value conversion); and float8[] literals of predictions."""

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


#: The bytes of an ArrayType after its 4-byte length word: ndim, dataoffset (0: no NULL bitmap;
#: else where the values start, counted from the length word), element type, then ndim
#: dimensions and ndim lower bounds, the NULL bitmap if any (bit i of byte i // 8 set: value i
#: is not NULL), and the values that are not NULL, in row-major order, from an offset
#: MAXALIGNed from the length word.
_IMAGE_HEAD = struct.Struct("=iiI")
_FLOAT8_OID = 701


def _bad_image():
    return DataError("A packed block is not the bytes of a float8[] of the expected shape",
                     hint="predict_table packs the rows itself; call it rather than this function.")


def float8_image(data: bytes):
    """(values, dims) of a float8[] given as its own bytes (groupml._float8_bytes): the values
    in row-major order as a one-dimensional float64 array, NaN for a NULL (a read-only view of
    ``data`` when there is no NULL); 22000 for anything else."""
    if data is None or len(data) < _IMAGE_HEAD.size:
        if data is None:
            return np.empty(0), (0,)
        raise _bad_image()
    ndim, offset, elem = _IMAGE_HEAD.unpack_from(data, 0)
    if ndim == 0:
        return np.empty(0), (0,)                                  # an empty array
    if elem != _FLOAT8_OID or not 0 < ndim <= 6 or len(data) < 12 + 8 * ndim:
        raise _bad_image()
    dims = struct.unpack_from(f"={ndim}i", data, 12)
    n = int(np.prod(dims)) if min(dims) >= 0 else -1
    head = 12 + 8 * ndim                                          # bitmap or padding from here
    if n < 0:
        raise _bad_image()
    if offset == 0:
        start = (head + 4 + 7) // 8 * 8 - 4
        if len(data) != start + 8 * n:
            raise _bad_image()
        return np.frombuffer(data, dtype=np.float64, count=n, offset=start), dims
    if offset - 4 < head + (n + 7) // 8 or offset % 8:
        raise _bad_image()
    present = np.unpackbits(np.frombuffer(data, dtype=np.uint8, count=(n + 7) // 8, offset=head),
                            bitorder="little", count=n).astype(bool)
    k = int(present.sum())
    if len(data) != offset - 4 + 8 * k:
        raise _bad_image()
    out = np.full(n, np.nan)
    out[present] = np.frombuffer(data, dtype=np.float64, count=k, offset=offset - 4)
    return out, dims


def float8_rows(data: bytes, width: int) -> np.ndarray:
    """A float8[][] of rows of ``width`` values, given as its own bytes (groupml._float8_bytes
    of array_agg(ARRAY[...])), as a writable n x width matrix (NaN for a NULL); 22000 for an
    array of another shape."""
    values, dims = float8_image(data)
    if values.size == 0:
        return np.empty((0, width))
    if len(dims) != 2 or dims[1] != width:
        raise _bad_image()
    return values.reshape(dims).copy()         # aligned and writable (the bytes' values may be neither)


def int8_array(data: bytes) -> np.ndarray:
    """The values of array_send(int8[])."""
    return _read(data, _I8, 20)


def float8_literal(values: np.ndarray, null: np.ndarray = None) -> str:
    """``values`` as a float8[] literal (``{0,1,NULL,...}``), NULL where ``null`` is set.

    PL/Python turns a returned list of floats into float8[] through each value's text; this
    text is what the server parses instead. Values that are all 0 or 1 (a classifier's
    classes) are written by numpy as one byte each; any other value as Python's repr, the
    shortest text that reads back to the same float8."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n == 0:
        return "{}"
    if null is None or not null.any():
        null = None
    binary = (values == 0.0) | (values == 1.0)
    if null is not None:
        binary |= null
    if binary.all() and not np.signbit(values[values == 0.0]).any():
        if null is None:
            out = np.full(2 * n + 1, ord(","), dtype=np.uint8)
            out[0], out[-1] = ord("{"), ord("}")
            out[1::2] = values.astype(np.uint8) + ord("0")
            return out.tobytes().decode("ascii")
        texts = np.where(null, "NULL", np.where(values == 1.0, "1", "0")).tolist()
    else:
        texts = list(map(repr, values.tolist()))
        if null is not None:
            for i in np.flatnonzero(null).tolist():
                texts[i] = "NULL"
    return "{" + ",".join(texts) + "}"
