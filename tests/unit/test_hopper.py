"""The model hopper's pure scheduler (groupml.learners.HopScheduler): hand-computed cases
and invariants over simulated runs with random finishing orders."""

import random

import pytest

from groupml.learners import HopScheduler, hop_order


def _drive(sched, durations, rng, load=None, running=()):
    """Simulate workers: launch what the scheduler says, finish visits in a random order
    (``running``: visits launched before). Returns the executed log
    [(trial, epoch, shard, worker)] and the epochs completed."""
    log, epochs_done, inflight = [], {}, list(running)
    while sched.pending():
        for tid, e, s in sched.next_visits(load=load):
            inflight.append((tid, e, s))
            # the invariants at launch time: one visit per config and per worker
            assert len({t for t, _, _ in inflight}) == len(inflight)
            workers = [sched.shard_workers[x] for _, _, x in inflight]
            assert len(set(workers)) == len(workers)
        assert inflight, "nothing running and nothing launched: the scheduler is stuck"
        weights = [durations(t, x) for t, _, x in inflight]
        i = rng.choices(range(len(inflight)), weights=weights)[0]
        tid, e, s = inflight.pop(i)
        log.append((tid, e, s, sched.shard_workers[s]))
        if sched.finished(tid):
            epochs_done[tid] = epochs_done.get(tid, 0) + 1
    return log, epochs_done


def test_hop_order_is_a_seeded_permutation():
    a = hop_order(7, 3, 0, 6)
    assert sorted(a) == list(range(6))
    assert a == hop_order(7, 3, 0, 6)
    assert {tuple(hop_order(7, 3, e, 6)) for e in range(5)} != {tuple(a)}    # epochs differ


def test_rigid_hopping_follows_the_hop_order_and_waits_for_a_busy_worker():
    # shards 0 and 1 on worker "a", shard 2 on "b"; two configs
    sched = HopScheduler(["a", "a", "b"], seed=1, flexible=False)
    sched.start(0, 0, 1)
    sched.start(1, 0, 1)
    o0, o1 = hop_order(1, 0, 0, 3), hop_order(1, 1, 0, 3)
    first = sched.next_visits()
    assert first[0] == (0, 0, o0[0])                      # equal visits: lower trial id first
    w0 = sched.shard_workers[o0[0]]
    if sched.shard_workers[o1[0]] == w0:                  # config 1's next shard is on the busy worker
        assert first == [(0, 0, o0[0])]
    else:
        assert first == [(0, 0, o0[0]), (1, 0, o1[0])]
    assert sched.next_visits() == []                      # nothing new until a visit ends


def test_flexible_hopping_takes_a_free_worker_and_covers_every_shard_once():
    # config 0's hop order for seed 4 starts on shard 2 (worker "b") ...
    sched = HopScheduler(["a", "b", "b"], seed=4, flexible=True)
    order0 = hop_order(4, 0, 0, 3)
    sched.start(0, 0, 1)
    sched.start(1, 0, 1)
    first = sched.next_visits()
    assert first[0] == (0, 0, order0[0])
    # ... so config 1 cannot use "b" and takes its only shard on "a" (shard 0), or the reverse
    if sched.shard_workers[order0[0]] == "b":
        assert first[1] == (1, 0, 0)
    else:
        assert first[1][0] == 1 and sched.shard_workers[first[1][2]] == "b"
    log, done = _drive(sched, lambda t, s: 1.0, random.Random(0), running=first)
    for tid in (0, 1):
        assert sorted(s for t, _, s, _ in log if t == tid) == [0, 1, 2]
    assert done == {0: 1, 1: 1}


def test_a_loaded_worker_is_avoided_when_the_caller_reports_load():
    sched = HopScheduler([0, 1, 2, 3], seed=0, flexible=True)
    sched.start(5, 0, 1)
    load = {0: 3, 1: 0, 2: 2, 3: 1}
    assert sched.next_visits(load=load.get) == [(5, 0, 1)]
    rigid = HopScheduler([0, 1, 2, 3], seed=0, flexible=False)
    rigid.start(5, 0, 1)
    assert rigid.next_visits(load=load.get) == [(5, 0, hop_order(0, 5, 0, 4)[0])]


def test_configs_with_fewer_visits_go_first():
    sched = HopScheduler([0, 1], seed=2, flexible=True)
    sched.start(9, 0, 2)
    (t, e, s), = [v for v in sched.next_visits() if v[0] == 9]
    assert sched.finished(9) is False
    sched.start(3, 0, 2)          # a newcomer has made 0 visits, config 9 one: 3 is served first
    launched = sched.next_visits()
    assert launched[0][0] == 3



def test_three_configs_on_two_workers_take_turns():
    # fewest visits first: with more configs than workers, the config left out last round goes next
    sched = HopScheduler(["w0", "w1"], seed=1, flexible=True)
    for tid in (0, 1, 2):
        sched.start(tid, 0, 2)
    rounds = []
    for _ in range(6):
        launched = sched.next_visits()
        rounds.append([tid for tid, _, _ in launched])
        for tid, _, _ in launched:
            sched.finished(tid)
    assert rounds == [[0, 1], [2, 0], [1, 2], [0, 1], [2, 0], [1, 2]]
    assert not sched.pending()           # 3 configs x 2 epochs x 2 shards = 12 visits = 6 rounds of 2


def test_hop_order_differs_between_configs():
    # each config gets its own seeded order, not one order shared by every config of the epoch
    orders = [hop_order(7, tid, 0, 5) for tid in (0, 1, 2)]
    assert all(sorted(o) == list(range(5)) for o in orders)
    assert len({tuple(o) for o in orders}) == 3


def test_epochs_resume_from_done_and_stop_at_target():
    sched = HopScheduler([0, 1, 2], seed=5, flexible=False)
    sched.start(1, 2, 4)          # resumed after two epochs, two to go
    log, done = _drive(sched, lambda t, s: 1.0, random.Random(1))
    assert done == {1: 2}
    assert [s for _, e, s, _ in log if e == 2] == hop_order(5, 1, 2, 3)
    assert [s for _, e, s, _ in log if e == 3] == hop_order(5, 1, 3, 3)
    assert sched.epoch(1) == 4
    idle = HopScheduler([0, 1], seed=5)
    idle.start(1, 3, 3)           # nothing left to do
    assert not idle.pending() and idle.next_visits() == []


@pytest.mark.parametrize("flexible", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_finishing_orders_keep_every_rule(flexible, seed):
    rng = random.Random(seed)
    shard_workers = [rng.randrange(4) for _ in range(9)]          # 9 shards on up to 4 workers
    targets = {tid: rng.randint(1, 4) for tid in range(7)}
    sched = HopScheduler(shard_workers, seed=seed, flexible=flexible)
    for tid, n in targets.items():
        sched.start(tid, 0, n)
    log, done = _drive(sched, lambda t, s: 1 + (s * 7 + t) % 5, rng)
    assert done == targets
    assert len(log) == 9 * sum(targets.values())
    for tid, n in targets.items():
        for e in range(n):
            mine = [s for t, ee, s, _ in log if t == tid and ee == e]
            assert sorted(mine) == list(range(9))                  # every shard once per epoch
            if not flexible:
                assert mine == hop_order(seed, tid, e, 9)          # timing does not matter
        epochs = [ee for t, ee, _, _ in log if t == tid]
        assert epochs == sorted(epochs)                            # epochs in order


def test_finished_without_a_visit_and_restart_in_flight_are_refused():
    sched = HopScheduler([0], seed=0)
    sched.start(1, 0, 1)
    with pytest.raises(KeyError):
        sched.finished(2)
    sched.next_visits()
    with pytest.raises(ValueError):
        sched.start(1, 0, 2)
