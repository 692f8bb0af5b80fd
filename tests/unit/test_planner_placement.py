"""Placement algorithms (Kingpin Alg. 1 and 2) and their invariants."""

import json
import math

import numpy as np
import pytest

from groupml.errors import InvalidParameterError
from groupml.planner import (CONSTRAINED, WRAP_AROUND, Placement, PlacementInvariantError, Shard,
                             check_placement, constrained_splits, constrained_wrap_around,
                             even_split, group_order, place, whole_groups, wrap_around)


def layout(pl):
    """Workers as lists of (group, start, rows) tuples."""
    return [[(s.group, s.start, s.rows) for s in shards] for shards in pl.workers]


# ---- the paper's Figure 5 example ------------------------------------------------------
# Figure 5 (constrained wrap-around): 4 workers, ideal share n/p = 3, group A has 5 rows
# and is cut in 2 because 5/3 rounds to 2; B goes whole to the least loaded worker; C and
# D are not cut either.  Sizes A=5, B=3, C=3, D=1 (n = 12) fit every statement of the
# caption and make the final makespan the optimum 3.
FIG5 = {"A": 5, "B": 3, "C": 3, "D": 1}


def test_figure5_constrained_wrap_around():
    pl = constrained_wrap_around(FIG5, 4)
    assert pl.algorithm == CONSTRAINED and pl.capacity == 3.0
    assert constrained_splits(5, 12, 4) == 2
    assert [constrained_splits(r, 12, 4) for r in (3, 3, 1)] == [1, 1, 1]
    assert layout(pl) == [
        [("A", 0, 3)],
        [("A", 3, 2), ("D", 0, 1)],
        [("B", 0, 3)],
        [("C", 0, 3)],
    ]
    assert pl.loads() == [3, 3, 3, 3] and pl.makespan_rows == 3
    assert pl.split_groups() == {"A": [0, 1]}
    assert check_placement(pl, FIG5) == []


def test_figure5_wrap_around():
    # Alg. 1: capacity max(n/p, max n_i) = max(3, 5) = 5; pour groups largest first.
    pl = wrap_around(FIG5, 4)
    assert pl.algorithm == WRAP_AROUND and pl.capacity == 5
    assert layout(pl) == [
        [("A", 0, 5)],
        [("B", 0, 3), ("C", 0, 2)],
        [("C", 2, 1), ("D", 0, 1)],
        [],
    ]
    assert check_placement(pl, FIG5) == []


def test_wrap_around_without_group_isolation_uses_fair_share():
    pl = wrap_around(FIG5, 4, group_isolation=False)
    assert pl.capacity == 3
    assert layout(pl) == [
        [("A", 0, 3)],
        [("A", 3, 2), ("B", 0, 1)],
        [("B", 1, 2), ("C", 0, 1)],
        [("C", 1, 2), ("D", 0, 1)],
    ]
    assert check_placement(pl, FIG5) == []


# ---- edge cases --------------------------------------------------------------------------
def test_one_giant_group():
    sizes = {"big": 100, "a": 5, "b": 5}
    assert layout(wrap_around(sizes, 4)) == [[("big", 0, 100)], [("a", 0, 5), ("b", 0, 5)], [], []]
    assert layout(wrap_around(sizes, 4, group_isolation=False)) == [
        [("big", 0, 28)], [("big", 28, 28)], [("big", 56, 28)],
        [("big", 84, 16), ("a", 0, 5), ("b", 0, 5)]]
    pl = constrained_wrap_around(sizes, 4)  # round(100*4/110) = 4 shards of 25
    assert layout(pl) == [[("big", 0, 25), ("a", 0, 5)], [("big", 25, 25), ("b", 0, 5)],
                          [("big", 50, 25)], [("big", 75, 25)]]
    for p in (wrap_around(sizes, 4), wrap_around(sizes, 4, group_isolation=False), pl):
        assert check_placement(p, sizes) == []


def test_all_tiny_groups():
    sizes = {f"g{i}": 1 for i in range(6)}
    assert layout(wrap_around(sizes, 4)) == [[("g0", 0, 1), ("g1", 0, 1)], [("g2", 0, 1), ("g3", 0, 1)],
                                             [("g4", 0, 1), ("g5", 0, 1)], []]
    assert layout(constrained_wrap_around(sizes, 4)) == [
        [("g0", 0, 1), ("g4", 0, 1)], [("g1", 0, 1), ("g5", 0, 1)], [("g2", 0, 1)], [("g3", 0, 1)]]


def test_more_workers_than_groups():
    sizes = {"a": 7, "b": 3}
    assert layout(wrap_around(sizes, 5)) == [[("a", 0, 7)], [("b", 0, 3)], [], [], []]
    assert layout(wrap_around(sizes, 5, group_isolation=False)) == [
        [("a", 0, 2)], [("a", 2, 2)], [("a", 4, 2)], [("a", 6, 1), ("b", 0, 1)], [("b", 1, 2)]]
    # a: round(3.5) = 4 shards (halves round up) 2,2,2,1; b: round(1.5) = 2 shards 2,1
    pl = constrained_wrap_around(sizes, 5)
    assert layout(pl) == [[("a", 0, 2)], [("a", 2, 2)], [("a", 4, 2)], [("a", 6, 1), ("b", 2, 1)],
                          [("b", 0, 2)]]
    assert pl.loads() == [2, 2, 2, 2, 2]


def test_zero_row_groups_get_no_shard():
    sizes = {"a": 4, "z": 0, "y": 0}
    for pl in (wrap_around(sizes, 2), constrained_wrap_around(sizes, 2), whole_groups(sizes, 2),
               even_split(sizes, 2)):
        assert pl.empty_groups == ["y", "z"]
        assert set(pl.groups()) == {"a"}
        assert check_placement(pl, sizes) == []
    assert layout(constrained_wrap_around(sizes, 2)) == [[("a", 0, 2)], [("a", 2, 2)]]
    only_empty = wrap_around({"z": 0}, 3)
    assert layout(only_empty) == [[], [], []] and only_empty.empty_groups == ["z"]


def test_single_worker():
    sizes = {"a": 3, "b": 5}
    assert layout(wrap_around(sizes, 1)) == [[("b", 0, 5), ("a", 0, 3)]]
    assert layout(constrained_wrap_around(sizes, 1)) == [[("b", 0, 5), ("a", 0, 3)]]


def test_constraint_parameters_limit_splits():
    sizes = {"big": 100, "a": 5, "b": 5}
    pl = constrained_wrap_around(sizes, 4, max_splits=2)
    assert pl.shard_counts()["big"] == 2
    pl = constrained_wrap_around(sizes, 4, min_shard_rows=40)
    assert pl.shard_counts()["big"] == 2  # 100 // 40
    assert check_placement(pl, sizes) == []


def test_group_order_and_tuple_keys_roundtrip():
    sizes = {("US", 1): 4, ("FR", 2): 4, ("DE", 3): 9}
    assert group_order(sizes) == [("DE", 3), ("FR", 2), ("US", 1)]
    assert group_order({"b": 1, 2: 1}) == [2, "b"]  # mixed key types: by type name, then repr
    pl = constrained_wrap_around(sizes, 3)
    d = json.loads(json.dumps(pl.to_dict()))
    back = Placement.from_dict(d)
    assert layout(back) == layout(pl) and back.algorithm == pl.algorithm
    assert check_placement(back, sizes) == []


def test_place_dispatch_and_gtp_dp_layouts():
    sizes = {"a": 6, "b": 2, "c": 2}
    assert layout(place(sizes, 2, "whole_groups")) == [[("a", 0, 6)], [("b", 0, 2), ("c", 0, 2)]]
    assert layout(place(sizes, 2, "even_split")) == [[("a", 0, 3), ("b", 0, 1), ("c", 0, 1)],
                                                      [("a", 3, 3), ("b", 1, 1), ("c", 1, 1)]]
    with pytest.raises(InvalidParameterError) as e:
        place(sizes, 2, "round_robin")
    assert str(e.value) == ("The 'algorithm' value of train_groups must be one of 'wrap_around', "
                            "'constrained_wrap_around', 'whole_groups', 'even_split'; got 'round_robin'")


# ---- validation messages ------------------------------------------------------------------
@pytest.mark.parametrize("fn", [wrap_around, constrained_wrap_around, whole_groups, even_split])
@pytest.mark.parametrize("sizes,workers,message", [
    ({"a": 1}, 0, "The 'workers' value of train_groups must be >= 1; got 0"),
    ({"a": 1}, 2.5, "The 'workers' value of train_groups must be an integer; got 2.5"),
    ({"a": 1}, True, "The 'workers' value of train_groups must be an integer; got true"),
    ({"a": -1}, 2, "The 'rows of group a' value of train_groups must be >= 0; got -1"),
    ({"a": 1.5}, 2, "The 'rows of group a' value of train_groups must be an integer; got 1.5"),
    ([1, 2], 2, "The 'group_sizes' value of train_groups must be a mapping of group key to row "
                "count; got 'list'"),
])
def test_validation_messages(fn, sizes, workers, message):
    with pytest.raises(InvalidParameterError) as e:
        fn(sizes, workers)
    assert str(e.value) == message
    assert e.value.hint


def test_constraint_parameter_validation():
    with pytest.raises(InvalidParameterError) as e:
        constrained_wrap_around({"a": 1}, 2, max_splits=0)
    assert str(e.value) == "The 'max_splits' value of train_groups must be >= 1; got 0"
    with pytest.raises(InvalidParameterError) as e:
        wrap_around({"a": 1}, 2, group_isolation="yes")
    assert str(e.value) == "The 'group_isolation' value of train_groups must be true or false; got 'yes'"


# ---- invariants -----------------------------------------------------------------------------
def random_sizes(rng):
    g = int(rng.integers(0, 16))
    kind = rng.integers(0, 3)
    sizes = {}
    for i in range(g):
        if kind == 0:
            rows = int(rng.integers(0, 5))                       # tiny, some empty
        elif kind == 1:
            rows = int(rng.lognormal(4, 2))                      # heavy skew
        else:
            rows = int(rng.integers(1, 1000)) if i else int(rng.integers(5000, 20000))  # one giant
        sizes[f"g{i:02d}"] = rows
    return sizes


def test_invariants_on_random_inputs():
    rng = np.random.default_rng(20240605)
    for _ in range(400):
        sizes = random_sizes(rng)
        p = int(rng.integers(1, 10))
        n = sum(sizes.values())
        nmax = max(sizes.values(), default=0)
        pls = [wrap_around(sizes, p), wrap_around(sizes, p, group_isolation=False),
               constrained_wrap_around(sizes, p), whole_groups(sizes, p), even_split(sizes, p),
               constrained_wrap_around(sizes, p, max_splits=int(rng.integers(1, 4)),
                                       min_shard_rows=int(rng.integers(1, 50)))]
        for pl in pls:
            assert check_placement(pl, sizes) == [], (sizes, p, pl.algorithm)
            assert len(pl.workers) == p
            back = Placement.from_dict(json.loads(json.dumps(pl.to_dict())))
            assert layout(back) == layout(pl)
        # Alg. 1 reaches the lower bound exactly (integer McNaughton)
        fair = math.ceil(n / p) if n else 0
        assert pls[0].makespan_rows == max(fair, nmax)
        assert pls[1].makespan_rows == fair
        # determinism: same input, same output
        assert layout(constrained_wrap_around(dict(reversed(list(sizes.items()))), p)) == layout(pls[2])


def test_violations_are_reported():
    sizes = {"a": 6, "b": 4}
    pl = wrap_around(sizes, 2)
    good = pl.to_dict()
    # drop a shard -> rows unassigned
    broken = Placement.from_dict(good)
    broken.workers[1] = broken.workers[1][:-1]
    v = check_placement(broken, sizes, raise_error=False)
    assert any("are not assigned" in m for m in v)
    # duplicate a shard -> rows assigned twice
    dup = Placement.from_dict(good)
    dup.workers[1].append(dup.workers[0][0])
    v = check_placement(dup, sizes, raise_error=False)
    assert any("assigned twice" in m for m in v)
    assert any("more than the capacity" in m for m in v)
    with pytest.raises(PlacementInvariantError) as e:
        check_placement(dup, sizes)
    assert e.value.sqlstate == "XX000" and "breaks" in str(e.value)
    # unknown group, wrong shard count for Alg. 2, unequal shards
    c = constrained_wrap_around({"a": 10, "b": 10}, 2)
    c.workers[0].append(Shard("zzz", 0, 1))
    v = check_placement(c, {"a": 10, "b": 10}, raise_error=False)
    assert any("unknown group 'zzz'" in m for m in v)
    c2 = Placement(CONSTRAINED, 2, 5.0, [[Shard("a", 0, 7)], [Shard("a", 7, 3)]])
    v = check_placement(c2, {"a": 10}, raise_error=False)
    assert any("unequal shards" in m for m in v)
    # a split group that is not tail/head of adjacent workers under group isolation
    w = Placement(WRAP_AROUND, 2, 5, [[Shard("a", 0, 2), Shard("b", 0, 3)], [Shard("a", 2, 2)]],
                  params={"group_isolation": True})
    v = check_placement(w, {"a": 4, "b": 3}, raise_error=False)
    assert any("is not the last shard" in m for m in v)



def test_a_group_cut_over_three_workers_breaks_group_isolation():
    # under group isolation a group may span two workers at most (tail of one, head of the next)
    sizes = {"a": 4, "b": 6, "c": 4}                                  # capacity 6 per worker
    bad = Placement(WRAP_AROUND, 3, 6, [[Shard("a", 0, 4), Shard("b", 0, 1)], [Shard("b", 1, 4)],
                                        [Shard("b", 5, 1), Shard("c", 0, 4)]], params={"group_isolation": True})
    assert check_placement(bad, sizes, raise_error=False) == [
        "group 'b' spans 3 workers; at most 2 with group isolation"]


def test_wrap_around_key_order():
    sizes = {"b": 2, "a": 1, "c": 5}
    pl = wrap_around(sizes, 2, order="key")  # capacity max(4, 5) = 5: a, b, c[0:2] | c[2:5]
    assert layout(pl) == [[("a", 0, 1), ("b", 0, 2), ("c", 0, 2)], [("c", 2, 3)]]
    assert pl.params["order"] == "key"
    assert check_placement(pl, sizes) == []
    with pytest.raises(InvalidParameterError) as e:
        wrap_around(sizes, 2, order="random")
    assert str(e.value) == "The 'order' value of train_groups must be one of 'size', 'key'; got 'random'"
