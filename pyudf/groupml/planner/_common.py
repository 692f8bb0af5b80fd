"""Input checks and helpers shared by the planner modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, Hashable, List, Tuple

import numpy as np

from ..validation import check_number, fail

DEFAULT_OWNER = "train_groups"


def check_workers(n_workers: Any, owner: str = DEFAULT_OWNER, name: str = "workers") -> int:
    """A worker count: an integer >= 1."""
    return check_number(n_workers, name, owner, ge=1, integer=True,
                        hint="Use at least one worker (the default is one per core).")


def check_group_sizes(group_sizes: Any, owner: str = DEFAULT_OWNER) -> Dict[Hashable, int]:
    """Return a plain ``{key: rows}`` dict after checking every row count is an integer >= 0."""
    if not isinstance(group_sizes, Mapping):
        fail("group_sizes", owner, "a mapping of group key to row count", type(group_sizes).__name__,
             hint="Pass one row count per group, e.g. {'US': 1200, 'FR': 300}.")
    out: Dict[Hashable, int] = {}
    for key, rows in group_sizes.items():
        out[key] = check_number(rows, f"rows of group {key}", owner, ge=0, integer=True,
                                hint="Row counts come from the training snapshot and cannot be negative.")
    return out


def _sort_token(key: Hashable):
    return (type(key).__name__, repr(key))


def group_order(group_sizes: Mapping[Hashable, int], by: str = "size") -> List[Hashable]:
    """The deterministic order in which the placement algorithms visit groups.

    ``by='size'``: largest group first, equal sizes by key; ``by='key'``: by key only.
    Keys sort naturally when they compare, otherwise by (type name, ``repr``).
    Zero-row groups are left out.
    """
    keys = [k for k, v in group_sizes.items() if v > 0]
    if by == "key":
        try:
            return sorted(keys)
        except TypeError:
            return sorted(keys, key=_sort_token)
    try:
        return sorted(keys, key=lambda k: (-group_sizes[k], k))
    except TypeError:
        return sorted(keys, key=lambda k: (-group_sizes[k], _sort_token(k)))


def empty_groups(group_sizes: Mapping[Hashable, int]) -> List[Hashable]:
    keys = [k for k, v in group_sizes.items() if v == 0]
    try:
        return sorted(keys)
    except TypeError:
        return sorted(keys, key=_sort_token)


def key_to_json(key: Hashable) -> Any:
    """Tuples (multi-column GROUP BY keys) become lists so the dict is JSON-ready."""
    if isinstance(key, tuple):
        return [key_to_json(k) for k in key]
    return key


def key_from_json(key: Any) -> Hashable:
    if isinstance(key, list):
        return tuple(key_from_json(k) for k in key)
    return key


def nnls(A: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, float]:
    """``argmin ||A x - b||`` over ``x >= 0`` (Lawson and Hanson's active-set method); returns
    ``(x, ||A x - b||)`` like :func:`scipy.optimize.nnls`.

    numpy only: importing ``scipy.optimize`` costs every new backend 0.7-0.9 s, and the
    planner's problems are small (a few columns).  A tall ``A`` is first reduced by its QR
    factorisation: with ``A = QR``, ``||A x - b||^2 = ||R x - Q^T b||^2 + const``, so both
    problems have the same minimiser.
    """
    A = np.asarray(A, dtype=float)
    b = np.asarray(b, dtype=float)
    m, n = A.shape
    if m > n:
        Q, R = np.linalg.qr(A)
        A_, b_ = R, Q.T @ b
    else:
        A_, b_ = A, b
    tol = 10 * max(m, n) * np.finfo(float).eps * max(np.abs(A_).sum(axis=0).max(initial=0.0), 1.0)
    x = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    w = A_.T @ (b_ - A_ @ x)
    for _ in range(3 * n + 10):
        if passive.all() or not (w[~passive] > tol).any():
            break
        passive[np.argmax(np.where(passive, -np.inf, w))] = True
        while True:
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(A_[:, passive], b_, rcond=None)[0]
            if (s[passive] > tol).all():
                break
            moving = passive & (s <= tol)
            alpha = np.min(x[moving] / (x[moving] - s[moving]))
            x = x + alpha * (s - x)
            passive &= x > tol
            x[~passive] = 0.0
            if not passive.any():
                s = np.zeros(n)
                break
        x = s
        w = A_.T @ (b_ - A_ @ x)
    return x, float(np.linalg.norm(A @ x - b))
