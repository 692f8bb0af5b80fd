"""Deterministic validation holdout that depends only on each row's content.

Inside PostgreSQL an aggregate sees a group's rows in arbitrary scan order, so the
split cannot use row positions.  Each row is hashed from the bit patterns of its
features and label: the 64-bit words are mixed one column at a time with seeded odd
multipliers and the splitmix64 finalizer, and the row goes to validation when the
hash falls below ``fraction * 2**64``.

Copies of one row are told apart by their copy number: the second, third, ... copy of a
row mixes that number into its hash, so each copy is a separate draw. Copies are
interchangeable, so which one gets which number does not matter and the split still
depends only on the group's rows as a multiset. (Hashing content alone put every copy on
one side: a group of few distinct rows -- binary flags, categories -- lost whole cells
to validation, which biased the model and its score, and a 500-row group with both
classes could come out "too small" or "single class".)
"""

from __future__ import annotations

import numpy as np

from ..errors import ArrayLengthError, DatatypeMismatchError
from ..validation import check_number

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = 0x9E3779B97F4A7C15
_MASK = (1 << 64) - 1
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
#: rows hashed together (a few uint64 and float64 work arrays of this length stay in cache)
HASH_BLOCK_ROWS = 4096


def _splitmix64_scalar(x: int) -> int:
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _finalize(h: np.ndarray, scratch: np.ndarray | None = None) -> None:
    """splitmix64 finalizer, in place on a uint64 array (wrapping arithmetic); ``scratch``:
    a uint64 array of h's shape for the shifted values (else temporaries)."""
    for shift, mult in ((_S30, _M1), (_S27, _M2), (_S31, None)):
        h ^= np.right_shift(h, shift, out=scratch)
        if mult is not None:
            h *= mult


def row_hash(X, y, seed: int = 0) -> np.ndarray:
    """64-bit hash of each row's (features, label) bit patterns and copy number; order independent."""
    return _number_copies(_content_hash(X, y, seed))[0]


def row_hash_and_order(X, y, seed: int = 0):
    """:func:`row_hash` and a stable argsort of it, computed together."""
    return _number_copies(_content_hash(X, y, seed))


def _content_hash(X, y, seed: int) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.ndim != 1:
        raise DatatypeMismatchError("holdout_mask needs a 2-D feature matrix and a 1-D label "
                                    "vector",
                                    hint="Pass X with shape (n, d) and y with shape (n,).")
    if X.shape[0] != y.shape[0]:
        raise ArrayLengthError(f"holdout_mask got {X.shape[0]} feature rows but "
                               f"{y.shape[0]} labels",
                               hint="X and y must have one entry per row.")
    n, d = X.shape
    start = _splitmix64_scalar(int(seed) & _MASK)
    mults, state = [], start
    for _ in range(d + 1):
        state = _splitmix64_scalar(state)
        mults.append(np.uint64(state | 1))      # seeded odd multiplier for each column
    h = np.empty(n, dtype=np.uint64)
    # blocks of rows small enough for the cache: each block takes every column in turn
    # (the same hash as a column at a time over all rows, without n-sized temporaries)
    step = max(1, min(n, HASH_BLOCK_ROWS))
    col = np.empty(step, dtype=np.float64)
    word = np.empty(step, dtype=np.uint64)
    golden = np.uint64(_GOLDEN)
    for s in range(0, n, step):
        e = min(n, s + step)
        hb, c, w = h[s:e], col[:e - s], word[:e - s]
        hb[...] = start
        for j in range(d + 1):
            np.add(X[s:e, j] if j < d else y[s:e], 0.0, out=c)   # -0.0 -> +0.0 so equal values hash equal
            np.multiply(c.view(np.uint64), mults[j], out=w)
            hb ^= w
            hb += golden
            _finalize(hb, w)
    return h


def _number_copies(h: np.ndarray):
    """``(h, order)``: the hashes with the copy number of repeated values mixed in (one copy
    keeps its hash), and an argsort of the result.  Equal hashes are copies of one row, which
    are interchangeable, so the sorts need not be stable (an unstable sort of 64-bit keys
    is several times faster)."""
    order = np.argsort(h)
    hs = h[order]
    same = hs[1:] == hs[:-1]
    if not same.any():
        return h, order
    pos = np.arange(hs.size)
    starts = np.maximum.accumulate(np.where(np.concatenate(([False], same)), 0, pos))
    copy = (pos - starts).astype(np.uint64)
    later = copy > 0
    mixed = hs[later] ^ (copy[later] * np.uint64(_GOLDEN))
    _finalize(mixed)
    h = h.copy()
    h[order[later]] = mixed
    return h, np.argsort(h)


def holdout_mask(X, y, fraction: float, seed: int = 0) -> np.ndarray:
    """Boolean mask, True = validation row; ``fraction`` in (0, 1)."""
    fraction = check_number(fraction, "fraction", "holdout", gt=0, lt=1,
                            hint="Give the validation share as a number strictly between 0 and 1, "
                                 "e.g. 0.2.")
    seed = check_number(seed, "seed", "holdout", ge=0, integer=True)
    return mask_of_hash(row_hash(X, y, seed), fraction)


def mask_of_hash(h: np.ndarray, fraction: float) -> np.ndarray:
    """The holdout mask of rows whose :func:`row_hash` is ``h`` (for callers that also need
    the hash itself, e.g. to shuffle by it, so it is computed once)."""
    threshold = np.uint64(min(int(fraction * 2.0 ** 53), 2 ** 53))
    return (h >> np.uint64(11)) < threshold
