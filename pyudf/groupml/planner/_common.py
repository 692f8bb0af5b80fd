"""Input checks and helpers shared by the planner modules."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, Hashable, List

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
