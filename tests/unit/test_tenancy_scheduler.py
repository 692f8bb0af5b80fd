"""Scheduler (policy + per-tenant GP-UCB): decisions, persistence, simulation harness."""

import json
import math

import numpy as np
import pytest

from groupml.errors import InvalidParameterError, PrerequisiteStateError, UndefinedObjectError
from groupml.tenancy import (Scheduler, aggregate, best_interleaving_cost, cost_to_reach, expected_improvement,
                             loss_on_grid, regret_trace, simulate, synthetic_dataset, tenant_sequences)
from groupml.tenancy._bandit import _erfc

# ---------------------------------------------------------------- the paper's FCFS example
U = {"U1": {"M1": 90.0, "M2": 95.0, "M3": 100.0},
     "U2": {"M1": 70.0, "M2": 95.0, "M3": 100.0}}
# past jobs where M1 looked best and M2 second, with little spread -> GP-UCB tries M1, then M2
HISTORY = [{"M1": 90.0 + d, "M2": 80.0 + d, "M3": 60.0 + d} for d in (-0.2, 0.0, 0.1, 0.2, -0.1)]


def _run(policy, steps):
    s = Scheduler(policy, cost_aware=False, history=HISTORY, noise=0.01)
    s.add_tenant("U1", ["M1", "M2", "M3"])
    s.add_tenant("U2", ["M1", "M2", "M3"])
    trace = []
    for _ in range(steps):
        tenant, model = s.next_step()
        s.observe(tenant, model, U[tenant][model])
        trace.append((tenant, model))
    return trace


def test_fcfs_example_regret_215_versus_150():
    fcfs = _run("fcfs", 2)
    assert fcfs == [("U1", "M1"), ("U1", "M2")]
    rr = _run("roundrobin", 2)
    assert rr == [("U1", "M1"), ("U2", "M1")]
    idx = {"U1": 0, "U2": 1}

    def steps(tr):
        return [(idx[t], U[t][m]) for t, m in tr]

    assert regret_trace(steps(fcfs), [100.0, 100.0]) == [110.0, 215.0]
    assert regret_trace(steps(rr), [100.0, 100.0]) == [110.0, 150.0]
    # cost weighting: C_t multiplies the step's total regret
    assert regret_trace(steps(rr), [100.0, 100.0], costs=[2.0, 0.5]) == [220.0, 240.0]


def test_fcfs_finishes_a_tenant_before_the_next():
    trace = _run("fcfs", 6)
    assert [t for t, _ in trace] == ["U1"] * 3 + ["U2"] * 3


# ---------------------------------------------------------------- model picking
def test_cost_aware_picks_cheap_candidate_among_similar_ones():
    history = [{"fast": 0.80 + d, "slow": 0.80 + d} for d in (-0.05, 0.0, 0.05, 0.02)]
    for aware, expected in ((True, "fast"), (False, "slow")):
        s = Scheduler("roundrobin", cost_aware=aware, history=history)
        # listed slow first: with equal scores the first key wins when cost-oblivious
        s.add_tenant("t", ["slow", "fast"], costs=[10.0, 1.0])
        assert s.next_step() == ("t", expected)


def test_ucb_uses_other_tenants_observations_when_priors_refresh():
    s = Scheduler("roundrobin", cost_aware=False, noise=0.01)
    for name in ("a", "b", "c", "d"):
        s.add_tenant(name, ["x", "y"])
    for name, qx, qy in (("a", 0.9, 0.5), ("b", 0.8, 0.4), ("c", 0.85, 0.45)):
        s.observe(name, "x", qx)
        s.observe(name, "y", qy)
    s.refresh_priors()
    scores = s.ucb_scores("d")
    assert scores["x"] > scores["y"]            # x is better on every other tenant
    assert s.next_step() == ("d", "x")


def test_a_tenants_prior_leaves_out_its_own_observations():
    # the prior comes from the other tenants only: a lone tenant keeps the no-data prior
    s = Scheduler("roundrobin", cost_aware=False, noise=0.01)
    s.add_tenant("a", ["x", "y", "z"])
    s.observe("a", "x", 0.9)
    s.observe("a", "y", 0.7)
    s.refresh_priors()
    gp = s.tenants["a"].gp
    np.testing.assert_allclose(gp.mean0, [0.5, 0.5, 0.5])
    np.testing.assert_allclose(gp.kernel, 0.04 * np.eye(3), atol=1e-12)
    # z is independent of x and y under that prior: UCB = 0.5 + sqrt(beta) * 0.2 at pick 3
    b = 2 * math.log(math.pi ** 2 * 3 * 3 ** 2 / (6 * 0.1))
    assert s.ucb_scores("a")["z"] == pytest.approx(0.5 + math.sqrt(b) * 0.2)


def test_theorem1_beta_uses_the_tenants_own_candidate_count():
    # Theorem 1 per tenant: beta_1 = 2 log(pi^2 K_i / (6 delta)) with K_i = 2, not the
    # largest candidate count (20) of any tenant
    s = Scheduler("roundrobin", cost_aware=False)
    s.add_tenant("small", ["a", "b"])
    s.add_tenant("big", [f"m{i}" for i in range(20)])
    b_small = 2 * math.log(math.pi ** 2 * 2 / (6 * 0.1))
    b_big = 2 * math.log(math.pi ** 2 * 20 / (6 * 0.1))
    # no data: prior mean 0.5, std 0.2 for every candidate
    assert s.ucb_scores("small")["a"] == pytest.approx(0.5 + math.sqrt(b_small) * 0.2)
    assert s.ucb_scores("big")["m0"] == pytest.approx(0.5 + math.sqrt(b_big) * 0.2)


def test_never_repicks_a_trained_model_and_stops_when_done():
    q, c = synthetic_dataset(8, 6, 0.5, 0.5, seed=4)
    for policy in ("greedy", "hybrid", "eirate", "roundrobin", "random", "fcfs"):
        s = Scheduler(policy, seed=1)
        for i in range(3):
            s.add_tenant(f"t{i}", [f"m{j}" for j in range(6)], c[i].tolist())
        seen = set()
        while (step := s.next_step()) is not None:
            assert step not in seen
            seen.add(step)
            t, m = step
            if m == "m3":
                s.observe_failure(t, m)       # failures are not retried either
            else:
                s.observe(t, m, float(q[int(t[1:]), int(m[1:])]), 1.0)
        assert len(seen) == 18
        assert s.summary()["t0"]["failed"] == ["m3"]
        with pytest.raises(PrerequisiteStateError, match="already trained"):
            s.observe("t0", "m0", 0.5)


def test_withdrawn_candidates_are_no_outcome_and_survive_the_state():
    # a deleted job's candidates were retired as failed outcomes: each a step of the log, fed
    # to HYBRID's stall counter (ten of them switched it to round-robin)
    q, c = synthetic_dataset(8, 6, 0.5, 0.5, seed=4)
    s = Scheduler("hybrid", seed=1)
    for i in range(3):
        s.add_tenant(f"t{i}", [f"m{j}" for j in range(6)], c[i].tolist())
    for _ in range(4):
        t, m = s.next_step()
        s.observe(t, m, float(q[int(t[1:]), int(m[1:])]), 1.0)
    policy_before = json.dumps(s.policy.state_dict())
    log_before = len(s.log)
    gone = s.retire("t1", s.untried("t1"))
    assert gone and s.untried("t1") == [] and s.retire("t1", gone) == []      # once only
    assert len(s.log) == log_before and json.dumps(s.policy.state_dict()) == policy_before
    assert s.summary()["t1"]["retired"] == gone and s.summary()["t1"]["failed"] == []
    for again in (Scheduler.from_state(json.loads(json.dumps(s.state_dict()))),
                  Scheduler.replay(json.loads(json.dumps(s.state_dict())), policy="greedy")):
        assert again.untried("t1") == [] and again.summary()["t1"]["retired"] == gone
        while (step := again.next_step()) is not None:
            assert step[0] != "t1"
            t, m = step
            again.observe(t, m, float(q[int(t[1:]), int(m[1:])]), 1.0)


def test_next_step_is_pure():
    s = Scheduler("random", seed=3)
    for i in range(4):
        s.add_tenant(f"t{i}", ["a", "b", "c"])
    first = s.next_step()
    assert all(s.next_step() == first for _ in range(5))


# ---------------------------------------------------------------- determinism & resume
def _drive(s, q, steps):
    out = []
    for _ in range(steps):
        step = s.next_step()
        if step is None:
            break
        t, m = step
        i, j = int(t[1:]), int(m[1:])
        if (i + j) % 7 == 0:
            s.observe_failure(t, m, cost=0.1)
        else:
            s.observe(t, m, float(q[i, j]), 0.5)
        out.append(step)
    return out


@pytest.mark.parametrize("policy", ["greedy", "hybrid", "eirate", "roundrobin", "random", "fcfs"])
def test_resume_from_state_dict_gives_same_decisions(policy):
    q, c = synthetic_dataset(20, 10, 0.5, 0.5, seed=2)
    history = [{f"m{j}": float(q[i, j]) for j in range(10)} for i in range(10, 20)]

    def fresh():
        s = Scheduler(policy, seed=5, history=history, patience=2,
                      quality_max=1.0 if policy == "eirate" else None)
        for i in range(6):
            s.add_tenant(f"u{i}", [f"m{j}" for j in range(10)], c[i].tolist())
        return s

    full = fresh()
    expected = _drive(full, q, 50)
    part = fresh()
    first = _drive(part, q, 23)
    blob = json.dumps(part.state_dict(), allow_nan=False)      # strict JSON, no NaN/Infinity
    resumed = Scheduler.from_state(json.loads(blob))
    rest = _drive(resumed, q, 27)
    assert first + rest == expected
    assert resumed.state_dict() == full.state_dict()
    if policy == "hybrid":   # the switch to round-robin happens after the resume point
        assert part.mode == "greedy" and resumed.mode == full.mode == "roundrobin"


def test_resume_after_refresh_and_late_tenant_rebuilds_identical_posteriors():
    q, c = synthetic_dataset(12, 6, 0.5, 0.5, seed=3)
    keys = [f"m{j}" for j in range(6)]
    s = Scheduler("greedy", seed=2)
    for i in range(4):
        s.add_tenant(f"u{i}", keys, c[i].tolist())
    _drive(s, q, 9)
    s.refresh_priors()
    s.add_tenant("u5", keys, c[5].tolist())      # prior built from the 9 outcomes so far
    _drive(s, q, 4)
    r = Scheduler.from_state(json.loads(json.dumps(s.state_dict())))
    for name in s.tenants:
        assert r.ucb_scores(name) == s.ucb_scores(name)
    assert _drive(r, q, 8) == _drive(s, q, 8)


def test_simulation_is_deterministic_under_a_seed():
    q, c = synthetic_dataset(40, 12, 0.5, 0.1, seed=9)
    for policy in ("hybrid", "random"):
        a = simulate(q, c, policy, True, seed=11, n_test=5)
        b = simulate(q, c, policy, True, seed=11, n_test=5)
        assert a.trace == b.trace
        np.testing.assert_array_equal(a.avg_loss, b.avg_loss)
    assert simulate(q, c, "random", True, seed=1, n_test=5).trace != \
        simulate(q, c, "random", True, seed=2, n_test=5).trace


# ---------------------------------------------------------------- simulation metric
def test_simulation_loss_curves_and_metric_helpers():
    q, c = synthetic_dataset(30, 8, 0.5, 0.5, seed=1)
    r = simulate(q, c, "greedy", False, seed=0, n_test=4, budget_fraction=1.0)
    assert len(r.trace) == 32                          # every model of every tenant trained
    assert np.all(np.diff(r.avg_loss) <= 1e-15) and r.avg_loss[-1] == 0.0 and r.max_loss[-1] == 0.0
    np.testing.assert_allclose(r.cum_cost, np.arange(33.0))   # cost-oblivious: one per run
    best = q[r.test_users].max(axis=1)
    assert r.avg_loss[0] == pytest.approx(best.mean()) and r.max_loss[0] == pytest.approx(best.max())
    assert np.all(r.max_loss >= r.avg_loss)
    grid = np.array([0.0, 0.5, 1.0, 3.5, 100.0])
    np.testing.assert_allclose(loss_on_grid(r, grid), r.avg_loss[[0, 0, 1, 3, 32]])
    agg = aggregate([r, r], grid)
    np.testing.assert_allclose(agg["avg"], loss_on_grid(r, grid))
    assert cost_to_reach(grid, agg["avg"], 0.0) == 100.0
    assert cost_to_reach(grid, agg["avg"], -1.0) == float("inf")
    aware = simulate(q, c, "hybrid", True, seed=0, n_test=4, budget_fraction=0.3)
    test_cost = c[aware.test_users].sum()
    assert aware.cum_cost[-1] >= 0.3 * test_cost and aware.cum_cost[-2] < 0.3 * test_cost


def _brute_force_best(seqs, optimum, threshold):
    """Every combination of one prefix per tenant, written out."""
    import itertools

    best = float("inf")
    for lengths in itertools.product(*[range(len(s) + 1) for s in seqs]):
        cost = sum(sum(c for c, _q in s[:n]) for s, n in zip(seqs, lengths))
        loss = sum(o - max([0.0] + [q for _c, q in s[:n]]) for s, o, n in zip(seqs, optimum, lengths))
        if loss / len(seqs) <= threshold + 1e-12:
            best = min(best, cost)
    return best


def test_best_interleaving_cost_equals_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(20):
        seqs = [[(float(rng.uniform(0.1, 1.0)), float(rng.uniform(0.3, 0.9))) for _ in range(int(rng.integers(1, 5)))]
                for _ in range(3)]
        optimum = [max(q for _c, q in s) + float(rng.choice([0.0, 0.05])) for s in seqs]
        for thr in (0.0, 0.02, 0.05, 0.2, 1.0):
            assert best_interleaving_cost(seqs, optimum, thr) == pytest.approx(_brute_force_best(seqs, optimum, thr))
    # a hand-made case: tenant A is done after its first (cheap) model, B needs its second
    seqs = [[(1.0, 0.9), (5.0, 0.5)], [(2.0, 0.5), (3.0, 0.8)]]
    assert best_interleaving_cost(seqs, [0.9, 0.8], 0.0) == 6.0       # A1 + B1 + B2
    assert best_interleaving_cost(seqs, [0.9, 0.8], 0.15) == 3.0      # A1 + B1: losses 0 and 0.3
    assert best_interleaving_cost(seqs, [0.9, 0.8], 0.4) == 1.0       # A1 only: losses 0 and 0.8
    assert best_interleaving_cost(seqs, [1.0, 0.8], 0.0) == float("inf")
    with pytest.raises(InvalidParameterError, match="one entry per tenant"):
        best_interleaving_cost(seqs, [0.9], 0.1)


def test_tenant_sequences_are_policy_independent_and_bound_every_policy():
    q, c = synthetic_dataset(40, 15, 0.01, 1.0, seed=3)
    runs = [simulate(q, c, p, True, seed=2, n_test=5, budget_fraction=0.3)
            for p in ("greedy", "hybrid", "eirate", "roundrobin", "random", "fcfs")]
    seqs = tenant_sequences(runs)          # the tenants' own GP-UCB orders agree across policies
    assert len(seqs) == 5 and all(seqs)
    for t, seq in enumerate(seqs):
        for r in runs:
            mine = [(cost, qq) for tt, _j, qq, cost in r.trace if tt == t]
            assert mine == seq[:len(mine)]
    for thr in (0.05, 0.02):
        bound = best_interleaving_cost(seqs, runs[0].optimum, thr)
        for r in runs:
            hit = np.nonzero(r.avg_loss <= thr)[0]
            if hit.size:
                assert bound <= r.cum_cost[hit[0]] + 1e-12
    tampered = simulate(q, c, "roundrobin", True, seed=2, n_test=5, budget_fraction=0.3)
    tampered.trace[7] = (tampered.trace[7][0], tampered.trace[7][1], 0.123, tampered.trace[7][3])
    with pytest.raises(InvalidParameterError, match="different order"):
        tenant_sequences([runs[0], tampered])
    with pytest.raises(InvalidParameterError, match="at least one run"):
        tenant_sequences([])


def test_synthetic_generator_structure():
    q, c = synthetic_dataset(100, 20, 0.5, 0.01, seed=0)
    assert q.shape == c.shape == (100, 20)
    assert q.min() >= 0.0 and q.max() <= 1.0
    # the paper's U(0, 1) costs, one per (user, model), never exactly 0
    assert c.min() > 0.0 and c.max() <= 1.0 and abs(c.mean() - 0.5) < 0.03
    assert len(np.unique(c)) == c.size
    _, c2 = synthetic_dataset(100, 20, 0.5, 0.01, cost_low=0.2, cost_high=0.4, seed=0)
    assert c2.min() > 0.2 and c2.max() <= 0.4
    q3, c3 = synthetic_dataset(100, 20, 0.5, 0.01, cost_per_model=True, seed=0)
    np.testing.assert_array_equal(q3, q)                        # qualities do not depend on the cost mode
    assert (c3 == c3[0]).all() and len(np.unique(c3[0])) == 20  # one cost per model, shared by all users
    with pytest.raises(InvalidParameterError, match="'cost_high' value of synthetic_dataset must be > 0.5"):
        synthetic_dataset(10, 5, 0.5, 0.1, cost_low=0.5, cost_high=0.5)
    means = q.mean(axis=1)
    assert abs(means[0::2].mean() - 0.75) < 0.03 and abs(means[1::2].mean() - 0.25) < 0.03
    np.testing.assert_array_equal(q, synthetic_dataset(100, 20, 0.5, 0.01, seed=0)[0])
    # strong model correlation (wide sigma_m): a user's models move together
    wide, _ = synthetic_dataset(200, 10, 5.0, 0.2, baseline_groups=[(0.5, 0.0)], seed=1)
    narrow, _ = synthetic_dataset(200, 10, 0.01, 0.2, baseline_groups=[(0.5, 0.0)], seed=1)
    assert wide.std(axis=1).mean() < 0.5 * narrow.std(axis=1).mean()
    noisy, _ = synthetic_dataset(50, 10, 0.5, 0.1, user_weight=0.1, sigma_u=0.3, noise=0.02, seed=1)
    assert noisy.shape == (50, 10)
    # a width whose square underflows: independent models, not a NaN covariance (which would be
    # reported as an internal 'quality' argument the caller never passed)
    tiny, _ = synthetic_dataset(20, 10, 1e-300, 0.1, seed=1)
    assert np.isfinite(tiny).all() and tiny.shape == (20, 10)


# ---------------------------------------------------------------- bad input
def test_bad_input_raises_clear_errors():
    s = Scheduler()
    with pytest.raises(UndefinedObjectError, match="Tenant 'ghost' is not known"):
        s.observe("ghost", "m", 0.5)
    with pytest.raises(InvalidParameterError, match="'candidates' value of tenant 'a' must be a non-empty"):
        s.add_tenant("a", [])
    with pytest.raises(InvalidParameterError, match="'cost' value of tenant 'a' must be > 0; got -1"):
        s.add_tenant("a", ["x"], [-1])
    s.add_tenant("a", ["x"])
    with pytest.raises(InvalidParameterError, match="already registered"):
        s.add_tenant("a", ["y"])
    with pytest.raises(UndefinedObjectError, match="'nope' is not a candidate of tenant 'a'"):
        s.observe("a", "nope", 0.5)
    with pytest.raises(InvalidParameterError, match="'quality' value of tenant 'a' must be a finite number"):
        s.observe("a", "x", float("nan"))
    with pytest.raises(InvalidParameterError, match="'delta' value of the scheduler must be < 1"):
        Scheduler(delta=1.5)
    with pytest.raises(InvalidParameterError, match="'policy' value of the scheduler must be one of"):
        Scheduler("lifo")
    with pytest.raises(InvalidParameterError, match="'version' value of scheduler state"):
        Scheduler.from_state({"version": 99, "config": {}})
    assert Scheduler().next_step() is None
    # the simulated accuracy loss starts each tenant at quality 0: qualities outside [0, 1] are refused
    with pytest.raises(InvalidParameterError, match=r"'quality' value of simulate must lie in \[0, 1\]; "
                                                    r"got values in \[-0.5, 0.9\]"):
        simulate(np.array([[-0.5, 0.2], [0.9, 0.1]]), n_test=1)


# ---------------------------------------------------------------- EIRATE (expected improvement per unit of cost)
def test_expected_improvement_closed_form_and_cap():
    x = np.linspace(-7.0, 7.0, 1401)
    ref = np.array([math.erfc(t) for t in x])
    assert np.max(np.abs(_erfc(x) - ref) / ref) < 2e-7
    # mean at the best so far: std * phi(0)
    assert expected_improvement([0.5], [0.1], 0.5)[0] == pytest.approx(0.1 / math.sqrt(2 * math.pi), rel=1e-6)
    # known outcome (std 0): the plain improvement, clipped at the cap
    assert expected_improvement([0.7, 0.4, 1.3], [0.0, 0.0, 0.0], 0.5, cap=1.0).tolist() == pytest.approx([0.2, 0.0, 0.5])
    # the cap removes the mass above it: EI(best) - EI(cap); nothing left once best >= cap
    ei, capped = expected_improvement([0.95], [0.1], 0.9), expected_improvement([0.95], [0.1], 0.9, cap=1.0)
    assert capped[0] == pytest.approx(ei[0] - expected_improvement([0.95], [0.1], 1.0)[0])
    assert 0 < capped[0] < ei[0]
    assert expected_improvement([1.2, 0.8], [0.3, 0.3], 1.0, cap=1.0).tolist() == [0.0, 0.0]
    assert (expected_improvement(np.linspace(-3, 3, 7), np.full(7, 0.05), 2.5) >= 0).all()


def _solved_and_open(policy, **options):
    # Past jobs: x is usually the best key, w follows the job's level, y and z are poorer.
    history = [{"x": 0.6 + d, "y": 0.5 + d, "z": 0.55 - d, "w": 0.5 + d / 2}
               for d in (-0.2, -0.1, 0.0, 0.1, 0.2, 0.05)]
    s = Scheduler(policy, history=history, **options)
    s.add_tenant("solved", ["x", "y", "z", "w"], costs=[1.0, 0.01, 0.01, 0.01])
    s.add_tenant("open", ["x", "y", "z", "w"], costs=[1.0, 1.0, 1.0, 1.0])
    s.observe("solved", "x", 1.0)        # its best model already ...
    s.observe("open", "x", 0.5)
    s.observe("solved", "y", 0.3)        # ... and then a poor cheap one (GP-UCB explores cheap models)
    return s


def test_eirate_leaves_a_solved_tenant_that_greedy_serves_for_its_cheap_models():
    # GREEDY: "solved" has the larger gap (its latest model was poor) and, through sqrt(beta / 0.01),
    # the far larger UCB of its cheap untried models -- it is served although nothing is left to gain.
    for policy in ("greedy", "hybrid"):
        s = _solved_and_open(policy)
        view = {v.name: v for v in s._view(True)}
        assert view["solved"].gap > view["open"].gap and view["solved"].top_ucb > 2 * view["open"].top_ucb
        assert s.next_step() == ("solved", "z")
    # EIRATE: the GP expects nothing above 1.0 from solved's cheap models, 0.14 per unit cost from open's
    s = _solved_and_open("eirate")
    view = {v.name: v for v in s._view(True)}
    assert view["solved"].gain_rate < 1e-6 < 0.1 < view["open"].gain_rate
    assert s.next_step() == ("open", "z")
    # the candidate is still the tenant's own GP-UCB choice, as under every policy
    scores = s.ucb_scores("open")
    assert max((v, k) for k, v in scores.items() if v is not None)[1] == "z"


def test_quality_max_stops_eirate_from_serving_a_tenant_at_the_metric_maximum():
    # y follows x across past jobs, with some spread: after x = 1.0 the GP expects y near 0.91 +- 0.09
    history = [{"x": b, "y": b + e} for b, e in ((0.5, 0.1), (0.9, -0.1), (0.6, -0.1), (0.8, 0.1),
                                                 (0.7, 0.0), (0.55, 0.05), (0.85, -0.05))]

    def run(**options):
        s = Scheduler("eirate", history=history, **options)
        s.add_tenant("top", ["x", "y"], costs=[1.0, 0.1])
        s.add_tenant("open", ["x", "y"], costs=[1.0, 1.0])
        s.observe("top", "x", 1.0)
        s.observe("open", "x", 0.6)
        return s

    # unbounded: the small chance that y beats 1.0, at a tenth of the cost, outweighs open's chance
    assert run().next_step() == ("top", "y")
    # accuracy cannot exceed 1: top has nothing left to gain
    capped = run(quality_max=1.0)
    assert {v.name: v.gain_rate for v in capped._view(True)}["top"] == 0.0
    assert capped.next_step() == ("open", "y")


def test_eirate_prefers_the_cheaper_of_two_equally_promising_steps():
    history = [{"a": 0.5 + d, "b": 0.5 - d} for d in (-0.2, -0.1, 0.0, 0.1, 0.2)]
    for aware, expected in ((True, "t2"), (False, "t1")):
        s = Scheduler("eirate", cost_aware=aware, history=history)
        s.add_tenant("t1", ["a", "b"], costs=[1.0, 4.0])
        s.add_tenant("t2", ["a", "b"], costs=[1.0, 1.0])
        s.observe("t1", "a", 0.5)
        s.observe("t2", "a", 0.5)
        # same GP, same best: same expected improvement; cost-aware, t2's step costs a quarter
        # (cost-oblivious every step costs 1: the tie goes to the earlier arrival)
        assert s.next_step() == (expected, "b")


def test_quality_max_is_validated_and_kept_in_the_state():
    with pytest.raises(InvalidParameterError, match="'quality_max' value of the scheduler must be a number"):
        Scheduler("eirate", quality_max="1")
    with pytest.raises(InvalidParameterError, match="must be a finite number"):
        Scheduler("eirate", quality_max=float("inf"))
    s = Scheduler("eirate", quality_max=1.0)
    s.add_tenant("t", ["a", "b"], costs=[1.0, 2.0])
    s.observe("t", "a", 0.7)
    state = json.loads(json.dumps(s.state_dict(), allow_nan=False))
    assert state["config"]["quality_max"] == 1.0
    assert Scheduler.from_state(state).quality_max == 1.0
    # states written before the option existed load with the default (no cap)
    del state["config"]["quality_max"]
    assert Scheduler.from_state(state).quality_max is None
    # another configuration over the same outcomes
    r = Scheduler.replay(s.state_dict(), policy="hybrid", quality_max=None)
    assert r.policy_name == "hybrid" and r.quality_max is None and r.log == s.log


def test_estimated_cost_of_candidates_is_finite_or_refused():
    from groupml.tenancy import estimated_cost

    assert estimated_cost("logistic", {}, 1000, 3) == pytest.approx(1000 * 4 * 100 / 100)
    assert estimated_cost("lightgbm", {"num_boost_round": 10}, 1000, 3) > 0
    assert estimated_cost("mlp", {"epochs": 2}, 1000, 3) > 0
    # every iteration count is bounded (2^30), so only an absurd table size overflows now
    with pytest.raises(InvalidParameterError) as e:
        estimated_cost("logistic", {"max_iter": 2 ** 30}, 1e308, 10)
    assert e.value.message == "The estimated cost of a logistic candidate must be a finite number; got inf"
    assert "Lower its iterations" in e.value.hint


def test_a_candidates_library_is_loaded_before_its_training_is_timed():
    # the first MLP of a backend must not be timed with torch's import and its first optimizer's
    # (torch._dynamo): 1.4-2.6 s against 0.01 s, on every pg_cron tick (a new backend)
    import subprocess
    import sys
    code = ("import sys; from groupml.udf.tenancy import load_library; "
            "load_library('mlp'); load_library('lightgbm'); load_library('logistic'); "
            "print(all(m in sys.modules for m in ('torch', 'torch._dynamo', 'lightgbm')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "True", out.stderr[-2000:]
