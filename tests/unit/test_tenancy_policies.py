"""Tenant-picking policies on crafted views and traces."""

import numpy as np
import pytest

from groupml.errors import InvalidParameterError
from groupml.tenancy import (FCFS, EIRate, Greedy, Hybrid, RandomPolicy, RoundRobin, TenantView,
                             greedy_candidate_set, make_policy)

RNG = np.random.default_rng(0)


def v(name, order, gap, best=0.5, top=1.0, n_obs=1, rate=None):
    return TenantView(name, order, n_obs if gap is not None else 0, gap,
                      best if gap is not None else None, top, "k", rate)


def test_greedy_candidate_set_is_tenants_at_or_above_average_gap():
    view = [v("a", 0, 0.10), v("b", 1, 0.30), v("c", 2, 0.20), v("d", 3, 0.05)]
    # average gap = 0.1625 -> b and c
    assert greedy_candidate_set(view) == ["b", "c"]
    # equal gaps: everybody is at the average
    assert greedy_candidate_set([v("a", 0, 0.2), v("b", 1, 0.2)]) == ["a", "b"]
    # unserved tenants (gap None) are not part of the average
    assert greedy_candidate_set([v("a", 0, None), v("b", 1, 0.1), v("c", 2, 0.3)]) == ["c"]


def test_greedy_candidate_set_uses_the_mean_gap_and_keeps_ties():
    # the threshold is the mean gap (0.275 here, where the median would be 0.05)
    view = [v("a", 0, 0.0), v("b", 1, 0.0), v("c", 2, 0.1), v("d", 3, 1.0)]
    assert greedy_candidate_set(view) == ["d"]
    # a tenant exactly at the mean (0.5) is in the set
    assert greedy_candidate_set([v("a", 0, 0.0), v("b", 1, 1.0), v("c", 2, 0.5)]) == ["b", "c"]


def test_greedy_picks_largest_ucb_minus_best_inside_candidate_set():
    view = [
        v("a", 0, 0.10, best=0.20, top=0.99),   # huge UCB gap but below-average gap -> excluded
        v("b", 1, 0.30, best=0.70, top=0.90),   # 0.20
        v("c", 2, 0.25, best=0.60, top=0.85),   # 0.25  <- winner
    ]
    assert greedy_candidate_set(view) == ["b", "c"]
    assert Greedy().select(view, RNG) == "c"


def test_greedy_serves_unserved_tenants_first_in_arrival_order():
    view = [v("late", 5, None), v("a", 0, 0.3), v("early", 2, None)]
    assert Greedy().select(view, RNG) == "early"


def test_roundrobin_cycles_and_skips_exhausted():
    rr = RoundRobin()
    view = [v("a", 0, 0.1), v("b", 1, 0.1), v("c", 2, 0.1)]
    picks = []
    for _ in range(4):
        name = rr.select(view, RNG)
        picks.append(name)
        rr.after_observe(view, name, {"a": 0, "b": 1, "c": 2}[name], 0.0)
    assert picks == ["a", "b", "c", "a"]
    # b exhausted: from a we go to c
    assert rr.select([view[0], view[2]], RNG) == "c"


def test_fcfs_and_random():
    view = [v("b", 1, 0.1), v("a", 0, 0.9)]
    assert FCFS().select(view, RNG) == "a"
    picks = {RandomPolicy().select(view, np.random.default_rng(s)) for s in range(20)}
    assert picks == {"a", "b"}
    assert RandomPolicy().select(view, np.random.default_rng(7)) == RandomPolicy().select(
        view, np.random.default_rng(7))


def test_hybrid_switches_after_patience_stalled_steps():
    h = Hybrid(patience=10)
    frozen = [v("a", 0, 0.4), v("b", 1, 0.1), v("c", 2, 0.1)]   # candidate set ["a"]
    h.after_observe(frozen, "a", 0, 1.0)        # first call: nothing to compare with
    for i in range(9):
        h.after_observe(frozen, "a", 0, 1.0)
        assert h.mode == "greedy" and h.stall == i + 1
    h.after_observe(frozen, "a", 0, 1.0)        # 10th stalled step
    assert h.mode == "roundrobin"
    # in round-robin mode the cycle continues after the last served tenant
    assert h.select(frozen, RNG) == "b"


def test_hybrid_counter_resets_on_improvement_or_changed_set():
    h = Hybrid(patience=3)
    frozen = [v("a", 0, 0.4), v("b", 1, 0.1)]
    changed = [v("a", 0, 0.1), v("b", 1, 0.4)]
    h.after_observe(frozen, "a", 0, 1.0)
    h.after_observe(frozen, "a", 0, 1.0)
    h.after_observe(frozen, "a", 0, 1.0)
    assert h.stall == 2
    h.after_observe(frozen, "a", 0, 1.2)        # total best rose: regret dropped
    assert h.stall == 0
    h.after_observe(frozen, "a", 0, 1.2)
    h.after_observe(changed, "b", 1, 1.2)       # candidate set changed
    assert h.stall == 0 and h.mode == "greedy"
    for _ in range(3):
        h.after_observe(changed, "b", 1, 1.2)
    assert h.mode == "roundrobin"
    # greedy until switch: state round-trips
    h2 = Hybrid(patience=3)
    h2.load_state(h.state_dict())
    assert h2.state_dict() == h.state_dict()


def test_eirate_serves_unserved_first_then_the_largest_gain_per_cost():
    # unserved tenants first, in arrival order (no best quality to improve on yet)
    assert EIRate().select([v("a", 0, 0.3, rate=5.0), v("late", 4, None), v("early", 2, None)], RNG) == "early"
    view = [
        v("cheap_solved", 0, 0.90, best=0.99, top=30.0, rate=0.0),   # GREEDY's pick: largest gap and UCB
        v("b", 1, 0.10, best=0.50, top=0.9, rate=0.40),              # below-average gap: GREEDY ignores it
        v("c", 2, 0.80, best=0.60, top=0.8, rate=0.25),
    ]
    assert Greedy().select(view, RNG) == "cheap_solved"
    assert EIRate().select(view, RNG) == "b"          # no candidate set: every served tenant competes
    # ties go to the earlier arrival; asking twice gives the same answer (no state)
    tie = [v("y", 3, 0.2, rate=0.4), v("x", 1, 0.2, rate=0.4), v("z", 0, 0.2, rate=0.1)]
    assert EIRate().select(tie, RNG) == EIRate().select(tie, RNG) == "x"
    assert EIRate().state_dict() == {} and EIRate.needs_gain


def test_make_policy_rejects_unknown_names_and_options():
    with pytest.raises(InvalidParameterError, match="'policy' value of the scheduler must be one of"):
        make_policy("lottery")
    with pytest.raises(InvalidParameterError, match="Unknown key 'patience'"):
        make_policy("greedy", patience=3)
    with pytest.raises(InvalidParameterError, match="Unknown key 'patience' in eirate policy options"):
        make_policy("eirate", patience=3)
    assert isinstance(make_policy("eirate"), EIRate)
    with pytest.raises(InvalidParameterError, match="'patience' value of hybrid policy must be >= 1"):
        make_policy("hybrid", patience=0)
    assert isinstance(make_policy("hybrid", patience=4), Hybrid)
