"""Search-space dimensions: enumeration (grid) and seeded sampling (random).

A space is a tuple of dimensions, kept in the order the user wrote them. Each
dimension produces one parameter, except a categorical item that is itself a
sub-space (TuPAQ's ChoiceP): choosing it merges the sub-space's parameters into
the configuration.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Tuple

Space = Tuple["Dimension", ...]


@dataclass(frozen=True)
class Fixed:
    name: str
    value: Any


@dataclass(frozen=True)
class Categorical:
    """A list (``grid=True``) or ``{"choice": [...]}``. Items are plain values or sub-spaces."""

    name: str
    items: Tuple[Any, ...]       # JSON value, or a Space (tuple of dimensions)
    grid: bool = True


@dataclass(frozen=True)
class Uniform:
    name: str
    low: float
    high: float


@dataclass(frozen=True)
class LogUniform:
    name: str
    low: float
    high: float


@dataclass(frozen=True)
class IntRange:
    name: str
    low: int
    high: int                     # inclusive


Dimension = Any  # one of the classes above
DISTRIBUTIONS = (Uniform, LogUniform, IntRange)


def is_subspace(item: Any) -> bool:
    return isinstance(item, tuple)


def has_distributions(space: Space) -> bool:
    """True when some dimension (at any depth) is a continuous/int range or a choice."""
    for dim in space:
        if isinstance(dim, DISTRIBUTIONS):
            return True
        if isinstance(dim, Categorical):
            if not dim.grid:
                return True
            if any(is_subspace(it) and has_distributions(it) for it in dim.items):
                return True
    return False


def grid_size(space: Space) -> int:
    """Number of grid points; only meaningful when ``has_distributions`` is False."""
    total = 1
    for dim in space:
        if isinstance(dim, Categorical):
            total *= sum(grid_size(it) if is_subspace(it) else 1 for it in dim.items)
    return total


def _dim_points(dim: Dimension) -> List[Dict[str, Any]]:
    if isinstance(dim, Fixed):
        return [{dim.name: dim.value}]
    points: List[Dict[str, Any]] = []
    for item in dim.items:
        if is_subspace(item):
            points.extend(iter_grid(item))
        else:
            points.append({dim.name: item})
    return points


def iter_grid(space: Space) -> Iterator[Dict[str, Any]]:
    """Cartesian product in spec order; the last dimension varies fastest."""
    for combo in itertools.product(*(_dim_points(d) for d in space)):
        params: Dict[str, Any] = {}
        for part in combo:
            params.update(part)
        yield params


def sample(space: Space, rng) -> Dict[str, Any]:
    """Draw one configuration with a ``numpy.random.Generator``; one draw per dimension, in order."""
    params: Dict[str, Any] = {}
    for dim in space:
        if isinstance(dim, Fixed):
            params[dim.name] = dim.value
        elif isinstance(dim, Uniform):
            params[dim.name] = float(rng.uniform(dim.low, dim.high))
        elif isinstance(dim, LogUniform):
            params[dim.name] = float(math.exp(rng.uniform(math.log(dim.low), math.log(dim.high))))
        elif isinstance(dim, IntRange):
            params[dim.name] = int(rng.integers(dim.low, dim.high + 1))
        else:
            item = dim.items[int(rng.integers(len(dim.items)))]
            if is_subspace(item):
                params.update(sample(item, rng))
            else:
                params[dim.name] = item
    return params


def to_json(space: Space) -> Dict[str, Any]:
    """The canonical JSON form of a space (what ``parse_search`` accepts back)."""
    out: Dict[str, Any] = {}
    for dim in space:
        if isinstance(dim, Fixed):
            out[dim.name] = dim.value
        elif isinstance(dim, Uniform):
            out[dim.name] = {"uniform": [dim.low, dim.high]}
        elif isinstance(dim, LogUniform):
            out[dim.name] = {"loguniform": [dim.low, dim.high]}
        elif isinstance(dim, IntRange):
            out[dim.name] = {"int": [dim.low, dim.high]}
        else:
            items = [to_json(it) if is_subspace(it) else it for it in dim.items]
            out[dim.name] = items if dim.grid else {"choice": items}
    return out
