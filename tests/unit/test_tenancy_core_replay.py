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


def test_beta_rule_algorithm_is_log_k_t2_over_delta():
    s = _run(beta_rule="algorithm", steps=5)
    b = s.tenants["u0"]
    t = int(b.tried.sum()) + 1
    assert s._beta(b) == pytest.approx(math.log(12 * t * t / 0.1))
    assert Scheduler.from_state(s.state_dict()).beta_rule == "algorithm"
    theorem = _run(steps=5)
    assert theorem._beta(theorem.tenants["u0"]) > s._beta(b)
    with pytest.raises(InvalidParameterError):
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
