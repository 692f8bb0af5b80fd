"""Steering a model hopper run (pure parts): trials added and stopped from outside the search
procedure between epoch blocks (run_search's ``requests``), and workers joining the randomized
scheduler between sub-epochs (seeded simulations)."""

import random

import pytest

from groupml.learners import HopScheduler, joining_partitions, replica_holders, visit_log_violations
from groupml.search import make_procedure, parse_search, run_search, search_state
from test_search_procedures import FakeTrainer

GRID = {"lr": [0.1, 1.0], "max_epochs": 4}


def add(rid, tid, **params):
    return {"request_id": rid, "kind": "add_trial", "trial_id": tid, "params": params}


def stop(rid, tid):
    return {"request_id": rid, "kind": "stop_trial", "trial_id": tid, "params": None}


class Inbox:
    """Requests as a session files them: ``at[block]`` lists those visible from that block on."""

    def __init__(self, at):
        self.at, self.block = at, 0

    def __call__(self):
        return [r for b, rs in sorted(self.at.items()) if b <= self.block for r in rs]


def steer(inbox, slots=2, resume=None, proc=None, trainer=None):
    events = []
    trainer = trainer or FakeTrainer()
    proc = proc or make_procedure(parse_search(dict(GRID, epoch_iters=10)))

    def on_epoch(e):
        events.append((e.block, list(e.reports), list(e.requests), list(e.added), search_state(e)))
        inbox.block = e.block

    res = run_search(proc, trainer, slots=slots, epoch_iters=10, max_epochs=4, on_epoch=on_epoch, resume=resume,
                     requests=inbox)
    return res, events, trainer


def test_an_added_trial_starts_at_the_next_block_outside_the_procedures_slots():
    inbox = Inbox({1: [add(7, 1000000, lr=0.5, converge_iters=20, finish="max_iter")]})
    res, events, trainer = steer(inbox)
    trials = {t.trial_id: t for t in res.trials}
    assert set(trials) == {0, 1, 1000000}
    # block 1 ran the grid's two trials; the added one joined for blocks 2 and 3 (2 slots: the
    # grid's trials kept theirs)
    runs = [a for kind, a in trainer.log if kind == "run"]
    assert runs[0] == (0, 1) and runs[1] == (0, 1, 1000000) and trainer.max_active == 3
    assert trials[1000000].epochs == 2 and trials[1000000].status == "max_iter"
    assert all(t.epochs == 4 for tid, t in trials.items() if tid != 1000000)
    # the request counts as applied from the block that ran with it, and only once
    assert events[0][2] == [] and all(e[2] == [7] for e in events[1:])
    assert all(e[3] == [1000000] for e in events[1:])
    assert trainer.log.count(("add", 1000000)) == 1


def test_a_stop_request_ends_a_trial_at_the_next_block_boundary():
    inbox = Inbox({2: [stop(3, 0)]})
    res, events, trainer = steer(inbox)
    t0 = next(t for t in res.trials if t.trial_id == 0)
    assert t0.status == "stopped" and t0.epochs == 2 and "request 3" in t0.stop_reason
    assert next(t for t in res.trials if t.trial_id == 1).epochs == 4
    # the block after the stop reports it as STOP (its last loss), then never again
    assert (0, 2, t0.scores[-1], "STOP") in events[2][1]
    assert all(r[0] != 0 for e in events[3:] for r in e[1])
    assert ("remove", 0) in trainer.log


def test_a_stop_of_an_unknown_or_finished_trial_is_applied_as_nothing():
    inbox = Inbox({0: [stop(1, 42)], 4: [stop(2, 1)]})
    res, events, _ = steer(inbox)
    assert all(t.epochs == 4 for t in res.trials) and events[0][2] == [1]


def test_stopping_the_last_trials_still_reports_the_requests_applied():
    inbox = Inbox({1: [stop(5, 0), stop(6, 1)]})
    res, events, _ = steer(inbox)
    assert [t.status for t in res.trials] == ["stopped", "stopped"]
    assert events[-1][2] == [5, 6] and events[-1][0] == 1        # no block ran after the stops


def test_a_resumed_search_neither_loses_nor_repeats_a_request():
    requests = {0: [add(1, 1000000, lr=0.5)], 2: [stop(2, 1)], 3: [add(3, 1000001, lr=2.0, converge_iters=10)]}
    whole, events, _ = steer(Inbox(dict(requests)))
    # stop after block 2 (the stop of trial 1 filed meanwhile), resume from its state
    state = events[1][4]
    trainer = FakeTrainer()
    for t in state["active"]:
        trainer.add(t, next(x["params"] for x in state["trials"] if x["trial_id"] == t))
        trainer._iters[t] = 20
    from groupml.search import SearchProcedure

    inbox = Inbox(dict(requests))
    inbox.block = 2
    again, _, trainer = steer(inbox, resume=state, proc=SearchProcedure.from_state(state["procedure"]),
                              trainer=trainer)
    assert trainer.log.count(("add", 1000000)) == 1            # restored, not added again
    assert [(t.trial_id, t.epochs, t.status) for t in again.trials] == \
        [(t.trial_id, t.epochs, t.status) for t in whole.trials]


def _run_with_a_joiner(seed, p, k, epochs, join_at, replicas=1):
    """Simulate the randomized scheduler; a worker joins (holding joining_partitions) at virtual
    time ``join_at``, as the executor adds it between sub-epochs."""
    rng = random.Random(seed)
    homes = list(range(p))
    sched = HopScheduler(homes, seed=seed, policy="randomized", holders=replica_holders(homes, replicas))
    for t in range(k):
        sched.start(t, 0, epochs)
    now, inflight, log, joined = 0.0, [], [], False
    while sched.pending():
        if not joined and now >= join_at:
            sched.add_worker(p, joining_partitions(p, sched.holders))
            joined = True
        for tid, e, s, w in sched.next_placements():
            assert w in sched.holders[s]
            inflight.append({"trial": tid, "epoch": e, "shard": s, "worker": w, "start": now,
                             "end": now + rng.uniform(0.5, 3.0)})
        inflight.sort(key=lambda v: v["end"])
        v = inflight.pop(0)
        now = v["end"]
        log.append(v)
        sched.finished(v["trial"])
    return log


@pytest.mark.parametrize("case", range(30))
def test_a_worker_joining_mid_run_takes_units_and_keeps_every_invariant(case):
    rng = random.Random(500 + case)
    p, k, epochs = rng.randint(1, 4), rng.randint(2, 6), rng.randint(2, 4)
    log = _run_with_a_joiner(case, p, k, epochs, join_at=rng.uniform(0.0, 3.0), replicas=rng.randint(1, 2))
    assert visit_log_violations(log, p, {t: epochs for t in range(k)}) == []
    assert any(v["worker"] == p for v in log)


def test_a_joining_worker_holds_every_partition_and_the_schedule_is_seeded():
    assert joining_partitions(3, [[0], [1], [2]]) == [0, 1, 2]
    assert _run_with_a_joiner(4, 3, 5, 2, 1.5) == _run_with_a_joiner(4, 3, 5, 2, 1.5)


def test_a_trial_asked_to_stop_ends_with_the_epoch_it_finished():
    sched = HopScheduler([0, 1], seed=3, policy="randomized")
    sched.start(0, 0, 5)
    sched.start(1, 0, 5)
    log, now = [], 0.0
    while sched.pending():
        for tid, e, s, w in sched.next_placements():
            log.append({"trial": tid, "epoch": e, "shard": s, "worker": w, "start": now, "end": now + 1})
        now += 1
        for v in [v for v in log if v["end"] == now]:
            if sched.finished(v["trial"]) and v["trial"] == 0 and sched.epoch(0) == 2:
                sched.stop(0)
    assert visit_log_violations(log, 2, {0: 2, 1: 5}) == []
    with pytest.raises(ValueError):
        busy = HopScheduler([0], seed=0, policy="randomized")
        busy.start(0, 0, 1)
        busy.next_placements()
        busy.stop(0)


def _glm_run_catalog(monkeypatch):
    """The catalog calls of a request for a running GLM run under 'mop'; returns what was filed."""
    from groupml import catalog

    filed = []
    monkeypatch.setattr(catalog, "request_target", lambda s, rid: {"status": "running", "family": "logistic",
                                                                   "strategy": "mop"})
    monkeypatch.setattr(catalog, "recorded_plan", lambda s, rid: None)
    monkeypatch.setattr(catalog, "next_added_trial_id", lambda s, rid, base: base)
    monkeypatch.setattr(catalog, "insert_run_request", lambda s, rid, kind, **kw: filed.append((rid, kind, kw)) or 1)
    return filed


def test_a_trial_added_to_a_glm_mop_run_is_an_sgd_configuration(monkeypatch):
    from groupml.errors import InvalidParameterError
    from groupml.executor.steering import ADDED_TRIAL_BASE, file_add_trial

    filed = _glm_run_catalog(monkeypatch)
    assert file_add_trial(None, 7, {"lr": 0.05, "l2": 0.01}) == ADDED_TRIAL_BASE
    (rid, kind, kw), = filed
    assert rid == 7 and kind == "add_trial" and kw["params"]["solver"] == "sgd" and kw["params"]["lr"] == 0.05
    with pytest.raises(InvalidParameterError) as info:       # SGD is what the run trains: lbfgs is refused
        file_add_trial(None, 7, {"solver": "lbfgs"})
    assert info.value.sqlstate == "22023" and "'solver'" in info.value.message and info.value.hint
    assert len(filed) == 1
