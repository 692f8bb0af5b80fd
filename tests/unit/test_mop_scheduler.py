"""Cerebro's randomized scheduler (HopScheduler policy 'randomized'), replicas and faults:
property-style cases over many seeded simulations with random unit times and failures."""

import random

import pytest

from groupml.learners import HopScheduler, replica_holders, visit_log_violations


def _simulate(sched, *, epochs, rng, fail_p=0.0, kill=None, clock_step=1.0):
    """Run the scheduler against simulated workers on a virtual clock: every launched unit
    takes a random time; with ``fail_p`` a unit's worker may fail it (the unit is reported
    failed); ``kill`` = (time, worker): that worker dies at that time, its unit failing.
    Returns the executed log as visit mappings (what run_schedule stores)."""
    now, inflight, log = 0.0, [], []
    dead_at = dict([kill]) if kill else {}
    while sched.pending():
        for tid, e, s, w in sched.next_placements():
            assert w in sched.holders[s] and w not in sched.dead
            inflight.append({"trial": tid, "epoch": e, "shard": s, "worker": w, "start": now,
                             "end": now + rng.uniform(0.5, 3.0)})
        # what is in flight never breaks isolation or exclusivity
        assert len({v["trial"] for v in inflight}) == len(inflight)
        assert len({v["worker"] for v in inflight}) == len(inflight)
        assert inflight, "nothing running and nothing launched: the scheduler is stuck"
        inflight.sort(key=lambda v: v["end"])
        v = inflight.pop(0)
        now = v["end"]
        for w, t in list(dead_at.items()):
            if t <= now and w not in sched.dead:
                sched.lose_worker(w)
                for u in [u for u in inflight if u["worker"] == w] + ([v] if v["worker"] == w else []):
                    sched.failed(u["trial"])
                    if u is not v:
                        inflight.remove(u)
                if v["worker"] == w:
                    v = None
                if sched.unreachable():
                    return log, sched.unreachable()
        if v is None:
            continue
        if fail_p and rng.random() < fail_p:
            sched.failed(v["trial"])
            continue
        log.append(v)
        sched.finished(v["trial"])
    return log, []


@pytest.mark.parametrize("case", range(40))
def test_randomized_schedules_keep_every_invariant(case):
    rng = random.Random(case)
    p, k, epochs = rng.randint(1, 6), rng.randint(1, 9), rng.randint(1, 4)
    workers = [f"w{i}" for i in range(p)]
    sched = HopScheduler(workers, seed=case, policy="randomized")
    for t in range(k):
        sched.start(t, 0, epochs)
    log, lost = _simulate(sched, epochs=epochs, rng=rng, fail_p=0.1 if case % 3 == 0 else 0.0)
    assert not lost
    assert visit_log_violations(log, p, {t: epochs for t in range(k)}) == []
    # rows stay on their worker: without replicas partition s is only ever trained on worker s
    assert all(v["worker"] == workers[v["shard"]] for v in log)


def test_the_randomized_policy_is_seeded():
    def schedule(seed):
        sched = HopScheduler(["a", "b", "c"], seed=seed, policy="randomized")
        for t in range(4):
            sched.start(t, 0, 2)
        first = sched.next_placements()
        return first
    assert schedule(3) == schedule(3)
    assert any(schedule(3) != schedule(s) for s in range(4, 12))


@pytest.mark.parametrize("case", range(25))
def test_replicas_survive_a_dead_worker(case):
    rng = random.Random(1000 + case)
    p, k, epochs = rng.randint(2, 5), rng.randint(1, 6), rng.randint(1, 3)
    workers = list(range(p))
    sched = HopScheduler(workers, seed=case, policy="randomized", holders=replica_holders(workers, 2))
    for t in range(k):
        sched.start(t, 0, epochs)
    victim = rng.randrange(p)
    log, lost = _simulate(sched, epochs=epochs, rng=rng, kill=(victim, rng.uniform(0.5, 4.0)))
    assert not lost
    assert visit_log_violations(log, p, {t: epochs for t in range(k)}) == []
    assert all(v["worker"] in replica_holders(workers, 2)[v["shard"]] for v in log)


def test_without_replicas_a_dead_worker_leaves_its_partition_unreachable():
    sched = HopScheduler([0, 1, 2], seed=1, policy="randomized")
    for t in range(3):
        sched.start(t, 0, 2)
    log, lost = _simulate(sched, epochs=2, rng=random.Random(5), kill=(1, 0.1))
    assert lost == [1]


def test_a_worker_added_between_visits_is_used():
    sched = HopScheduler([0, 1], seed=2, policy="randomized")
    for t in range(4):
        sched.start(t, 0, 3)
    launched = sched.next_placements()
    assert {w for *_, w in launched} == {0, 1}
    sched.add_worker(2, [0, 1])            # a third worker with copies of both partitions
    more = sched.next_placements()
    assert [w for *_, w in more] == [2]


def test_a_failed_unit_goes_back_and_reruns():
    sched = HopScheduler(["a", "b"], seed=0, policy="ordered", holders=[["a", "b"], ["b", "a"]])
    sched.start(7, 0, 1)
    (tid, e, s, w), = sched.next_placements()
    assert sched.failed(7) == (w, s)
    sched.lose_worker(w)
    (tid2, e2, s2, w2), = sched.next_placements()
    assert (tid2, e2, s2) == (7, 0, s) and w2 != w


def test_the_log_checker_names_broken_rules():
    ok = [{"trial": 0, "epoch": 0, "shard": s, "worker": s, "start": s, "end": s + 1} for s in range(2)]
    assert visit_log_violations(ok, 2) == []
    twice = ok + [{"trial": 0, "epoch": 0, "shard": 1, "worker": 1, "start": 5, "end": 6}]
    assert any("exactly once" in m for m in visit_log_violations(twice, 2))
    overlap = [dict(ok[0]), dict(ok[1], start=0.5)]
    assert any("two visits at once" in m for m in visit_log_violations(overlap, 2))
    assert any("expected" in m for m in visit_log_violations(ok, 2, {0: 2}))


def test_the_log_checker_lets_a_forked_configuration_start_at_its_fork_epoch():
    forked = [{"trial": 5, "epoch": e, "shard": s, "worker": s, "start": 2 * e + s, "end": 2 * e + s + 1}
              for e in (2, 3) for s in range(2)]
    assert any("expected [0, 1]" in m for m in visit_log_violations(forked, 2))
    assert visit_log_violations(forked, 2, first={5: 2}) == []
    assert visit_log_violations(forked, 2, {5: 4}, first={5: 2}) == []
    assert any("expected [2, 3, 4]" in m for m in visit_log_violations(forked, 2, {5: 5}, first={5: 2}))


def test_bad_policy_and_holders_are_refused():
    with pytest.raises(ValueError):
        HopScheduler([0], seed=0, policy="fifo")
    with pytest.raises(ValueError):
        HopScheduler([0, 1], seed=0, holders=[[0]])
