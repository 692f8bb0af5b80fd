"""The rung tables of successive halving and Hyperband (Li et al.): pure integer arithmetic,
shared by the procedures (:mod:`._halving`), the budget (:mod:`._budget`) and the spec's
bounds (:mod:`._spec`)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import List, Tuple


def _s_max(max_epochs: int, min_epochs: int, eta: int) -> int:
    """Largest s with min_epochs * eta**s <= max_epochs (exact integer arithmetic)."""
    s = 0
    while min_epochs * eta ** (s + 1) <= max_epochs:
        s += 1
    return s


def rung_epochs(max_epochs: int, s: int, eta: int) -> List[int]:
    """Budgets r_i = R * eta**(i - s), i = 0..s, rounded to whole blocks (r_s = R)."""
    return [max(1, int(round(max_epochs * Fraction(eta) ** (i - s)))) for i in range(s + 1)]


def hyperband_brackets(max_epochs: int, eta: int = 3, min_epochs: int = 1) -> List[List[Tuple[int, int]]]:
    """Li et al.'s bracket table: for s = s_max..0, rungs [(n_i, r_i)], i = 0..s.

    n = ceil((s_max + 1) / (s + 1) * eta**s), n_i = floor(n / eta**i), r_i = R * eta**(i - s).
    """
    s_max = _s_max(max_epochs, min_epochs, eta)
    table = []
    for s in range(s_max, -1, -1):
        n = math.ceil(Fraction(s_max + 1, s + 1) * eta ** s)
        table.append(list(zip([n // eta ** i for i in range(s + 1)], rung_epochs(max_epochs, s, eta))))
    return table


def halving_rungs(n: int, max_epochs: int, eta: int = 3, min_epochs: int = 1) -> List[Tuple[int, int]]:
    """One successive-halving bracket for n configs: [(n_i, r_i)], n_i = max(1, floor(n / eta**i))."""
    s = _s_max(max_epochs, min_epochs, eta)
    return list(zip([max(1, n // eta ** i) for i in range(s + 1)], rung_epochs(max_epochs, s, eta)))
