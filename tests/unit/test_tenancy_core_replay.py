"""Pure-Python checks of the core additions the SQL layer relies on: Scheduler.replay and beta_rule.

(Kept next to the SQL tests because the coordinator is their only user; no database needed.)"""

from __future__ import annotations

import math

import pytest

from groupml.errors import InvalidParameterError
from groupml.tenancy import Scheduler, synthetic_dataset


def _run(policy="hybrid", steps=25, **kw):
    q, c = synthetic_dataset(30, 12, 0.5, 1.0, seed=4)
    keys = [f"m{j}" for j in range(12)]
    s = Scheduler(policy, history=[dict(zip(keys, q[i].tolist())) for i in range(20, 30)], **kw)
    for i in range(3):
        s.add_tenant(f"u{i}", keys, c[i].tolist())
    for n in range(steps):
        if n == 10:
            s.add_tenant("late", keys, c[3].tolist())
        tenant, key = s.next_step()
        row = 3 if tenant == "late" else int(tenant[1:])
        if key == "m5":
            s.observe_failure(tenant, key, 0.1)
        else:
            s.observe(tenant, key, float(q[row, int(key[1:])]), float(c[row, int(key[1:])]))
    return s


def test_replay_with_same_config_reproduces_state_and_decisions():
    s = _run()
    state = s.state_dict()
    r = Scheduler.replay(state)
    assert r.state_dict() == state
    assert r.next_step() == s.next_step()


def test_replay_under_another_policy_keeps_outcomes():
    s = _run("greedy")
    r = Scheduler.replay(s.state_dict(), policy="roundrobin", cost_aware=False)
    st = r.state_dict()
    assert st["log"] == s.state_dict()["log"]
    assert st["config"]["policy"] == "roundrobin" and st["config"]["cost_aware"] is False
    assert [t["prior_upto"] for t in st["tenants"]] == [0, 0, 0, 10]
    tenant, key = r.next_step()
    assert not r.tenants[tenant].tried[r.tenants[tenant].index[key]]
    with pytest.raises(InvalidParameterError):
        Scheduler.replay(s.state_dict(), colour="red")


def test_beta_rules_theorem1_theorem_and_algorithm():
    # default: Theorem 1 on the tenant's own K (12 candidates) and own pick count t
    s = _run(steps=5)
    assert s.beta_rule == "theorem1"
    b = s.tenants["u0"]
    t = int(b.tried.sum()) + 1
    assert s._beta(b) == pytest.approx(2 * math.log(math.pi ** 2 * 12 * t * t / (6 * 0.1)))
    # the multi-tenant Theorems 2-3: n * K_max in the logarithm (4 tenants after step 10)
    multi = _run(beta_rule="theorem", steps=5)
    bm = multi.tenants["u0"]
    tm = int(bm.tried.sum()) + 1
    assert multi._beta(bm) == pytest.approx(2 * math.log(math.pi ** 2 * 3 * 12 * tm * tm / (6 * 0.1)))
    # the line of Algorithms 1-2
    alg = _run(beta_rule="algorithm", steps=5)
    ba = alg.tenants["u0"]
    ta = int(ba.tried.sum()) + 1
    assert alg._beta(ba) == pytest.approx(math.log(12 * ta * ta / 0.1))
    for sched in (s, multi, alg):
        assert Scheduler.from_state(sched.state_dict()).beta_rule == sched.beta_rule
    with pytest.raises(InvalidParameterError, match="'beta_rule' value of the scheduler must be one of"):
        Scheduler(beta_rule="paper")


def test_refresh_every_reestimates_priors_deterministically():
    s = _run(steps=12, refresh_every=5)
    state = s.state_dict()
    assert [t["prior_upto"] for t in state["tenants"]] == [10, 10, 10, 10]
    assert Scheduler.from_state(state).next_step() == s.next_step()
    assert Scheduler.replay(state).state_dict() == state
    fixed = _run(steps=12)
    assert [t["prior_upto"] for t in fixed.state_dict()["tenants"]] == [0, 0, 0, 10]


def test_hybrid_returns_to_greedy_when_a_tenant_arrives():
    s = Scheduler("hybrid", patience=2)
    s.add_tenant("a", ["x", "y", "z", "w"])
    s.add_tenant("b", ["x", "y", "z", "w"])
    for _ in range(6):
        tenant, key = s.next_step()
        s.observe(tenant, key, 0.5)   # nothing ever improves: HYBRID freezes and switches
    assert s.mode == "roundrobin"
    s.add_tenant("c", ["x", "y"])
    assert s.mode == "greedy"
    assert s.next_step()[0] == "c"     # GREEDY serves the newcomer first
    assert Scheduler.from_state(s.state_dict()).mode == "greedy"
