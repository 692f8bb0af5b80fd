"""Pure-Python parts of the grouped executor: snapshot splitting, shard pieces, partial sums,
the sharded trainer, schedule invariants, redaction."""

import numpy as np
import pytest

from groupml.executor.glm import ShardedGLMTrainer
from groupml.executor.invariants import schedule_violations
from groupml.executor.plan import group_tasks, placement_for
from groupml.executor.pool import redact
from groupml.executor.snapshot import pieces_for, split_group
from groupml.executor.core import pack_stats, unpack_stats
from groupml.executor.worker import _shard_trainer, partial_sums
from groupml.learners import GLMTrainer, holdout_mask
from groupml.learners._glm import standardization


def data(n=3000, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + rng.normal(size=n) > 0).astype(float)
    return X, y


def test_split_group_marks_the_holdout_like_holdout_mask():
    X, y = data()
    X[5, 1] = np.nan
    raw = np.column_stack([X, y]).astype(">f8").tobytes()
    part = split_group(raw, 3002, 4, 0.2, 7, 500)
    ok = np.isfinite(X).all(axis=1)
    val = holdout_mask(X[ok], y[ok], 0.2, 7)
    assert part["n_skipped"] == 3 and part["n_val"] == int(val.sum()) and part["n_train"] == int((~val).sum())
    assert sum(part["train_rows"]) == part["n_train"] and len(part["blocks"]) == 6
    assert part["n_pos"] == int((y[ok][~val] > 0.5).sum())
    assert split_group(b"", 4, 4, 0.2, 7, 500)["n_skipped"] == 4


def test_pieces_cover_a_row_range():
    rows = [10, 10, 7]
    assert pieces_for(rows, 0, 27) == [[0, 0, 10], [1, 0, 10], [2, 0, 7]]
    assert pieces_for(rows, 5, 10) == [[0, 5, 5], [1, 0, 5]]
    assert pieces_for(rows, 20, 7) == [[2, 0, 7]]


@pytest.mark.parametrize("tol", [1e-6, 1e-4])
@pytest.mark.parametrize("balanced", [False, True])
def test_shard_sums_equal_one_process_training(balanced, tol):
    # tol 1e-6: float64 passes, equal to rounding; the default tol: float32 passes (the
    # intercept-free config keeps float64 passes, on the shards as in one process), whose
    # shards add other blocks of rows than one process does, so they agree to float32 rounding
    X, y = data()
    d = X.shape[1]
    params = [{"l2": 0.01, "class_weight": "balanced" if balanced else None, "tol": tol},
              {"l2": 0.5, "fit_intercept": False, "tol": tol}]
    ref = GLMTrainer("logistic", X[:2400], y[:2400], X[2400:], y[2400:])
    M = np.column_stack([X[:2400], y[:2400]])
    shards = [_shard_trainer("logistic", M[a:b], d) for a, b in ((0, 1000), (1000, 1700), (1700, 2400))]

    def evaluator(Theta, cfgs):
        cw = tr.class_weights() if balanced else None
        outs = [partial_sums(s, [c.params for c in cfgs], Theta, cw) for s in shards]
        k = Theta.shape[1]
        f = sum(o[1:1 + k] for o in outs)
        G = sum(o[1 + k:].reshape(d + 1, k) for o in outs)
        return f, G

    # the column centres and scales merged from each shard's moments, as the workers send them
    std = standardization([unpack_stats(pack_stats(s.X, s.y), d) for s in shards], d)
    tr = ShardedGLMTrainer("logistic", 2400, int((y[:2400] > 0.5).sum()), d, X[2400:], y[2400:], evaluator,
                           standardization=std)
    for i, p in enumerate(params):
        ref.add(i, p)
        tr.add(i, p)
    ref.run(100)
    tr.run(100)
    float64 = tol < 1e-5
    for i in range(2):
        np.testing.assert_allclose(tr.model(i).coef, ref.model(i).coef, atol=1e-8 if float64 else 1e-5)
        if float64:
            assert tr.score(i) == pytest.approx(ref.score(i), abs=1e-9)
        else:
            z_tr, z_ref = tr._val_margins(tr._check(i)), ref._val_margins(ref._check(i))
            assert np.mean(np.sign(z_tr) == np.sign(z_ref)) >= 0.99


def test_schedule_invariants_detect_violations():
    ok = [
        {"group_key": "a", "pass": 0, "worker": 0, "shard": 0, "row_start": 0, "n_rows": 5, "trials": [0, 1],
         "started": 0.0, "finished": 1.0},
        {"group_key": "a", "pass": 0, "worker": 1, "shard": 1, "row_start": 5, "n_rows": 5, "trials": [0, 1],
         "started": 0.0, "finished": 1.5},
        {"group_key": "a", "pass": 1, "worker": 0, "shard": 0, "row_start": 0, "n_rows": 5, "trials": [0, 1],
         "started": 1.6, "finished": 2.0},
        {"group_key": "a", "pass": 1, "worker": 1, "shard": 1, "row_start": 5, "n_rows": 5, "trials": [0, 1],
         "started": 1.6, "finished": 2.0},
    ]
    assert schedule_violations(ok, {"a": 10}, {}) == []
    early = [dict(e) for e in ok]
    early[2]["started"] = 1.2                       # pass 1 before pass 0's last shard reported
    assert any("config isolation" in v for v in schedule_violations(early, {"a": 10}, {}))
    gap = [dict(e) for e in ok]
    gap[1]["row_start"] = 6
    assert any("data sharding" in v for v in schedule_violations(gap, {"a": 11}, {}))
    overlap = ok + [{"group_key": "b", "pass": 0, "worker": 0, "shard": 0, "row_start": 0, "n_rows": 3,
                     "trials": [0], "started": 0.5, "finished": 0.7}]
    assert any("worker exclusivity" in v for v in schedule_violations(overlap, {"a": 10, "b": 3}, {}))



def _task(worker, p, row_start, n_rows, started, finished, group="g", kind=None, trials=(1, 2), shard=0):
    e = {"group_key": group, "pass": p, "worker": worker, "shard": shard, "row_start": row_start, "n_rows": n_rows,
         "trials": list(trials), "started": started, "finished": finished}
    if kind is not None:
        e["kind"] = kind
    return e


def test_a_worker_overlapping_two_tasks_is_flagged_even_when_the_second_ends_later():
    # worker exclusivity: a task that starts before the previous one ended is a clash, whatever its end
    tasks = [_task(0, 0, 0, 100, 0, 10), _task(0, 0, 0, 50, 5, 20, group="h")]
    assert schedule_violations(tasks, {"g": 100, "h": 50}, {}) == [
        "worker exclusivity: worker 0 started h pass 0 at 5.000000 before g pass 0 finished at 10.000000"]


def test_shards_reaching_past_the_group_are_flagged():
    # a pass's shards must end exactly at n_train, not beyond it
    tasks = [_task(0, 0, 0, 60, 0, 1), _task(1, 0, 60, 50, 0, 1)]
    assert schedule_violations(tasks, {"g": 100}, {}) == ["data sharding: group g pass 0 covered rows [0, 110) of 100"]


def test_overlapping_shards_are_flagged():
    # rows 40..59 trained twice in one pass break the tiling even though [0, 100) is covered
    tasks = [_task(0, 0, 0, 60, 0, 1), _task(1, 0, 40, 60, 0, 1)]
    assert schedule_violations(tasks, {"g": 100}, {}) == [
        "data sharding: group g pass 0 rows [60, 40) missing or overlapping"]


def test_two_shards_of_one_pass_on_one_worker_are_flagged():
    # one worker per shard of a pass, even when its two shards ran one after the other
    tasks = [_task(0, 0, 0, 50, 0, 1), _task(0, 0, 50, 50, 1, 2)]
    assert schedule_violations(tasks, {"g": 100}, {}) == ["data sharding: group g pass 0 put two shards on one worker"]


def test_shard_statistics_past_the_group_are_flagged():
    # the standardisation shards must tile [0, n) exactly, not run past it
    stats = [_task(0, 0, 0, 60, 0, 1, kind="stats", trials=()), _task(1, 0, 60, 60, 0, 1, kind="stats", trials=())]
    assert schedule_violations(stats, {"g": 100}, {}) == [
        "data sharding: the shard statistics of group g do not tile [0, 100)"]


def test_a_config_going_back_an_epoch_is_flagged():
    # MLP visits: a config's epochs only move forward in time
    visits = [_task(0, 0, 0, 50, 0, 1, kind="visit", trials=[1]), _task(1, 1, 50, 50, 1, 2, kind="visit", trials=[1]),
              _task(1, 0, 50, 50, 2, 3, kind="visit", trials=[1]), _task(0, 1, 0, 50, 3, 4, kind="visit", trials=[1])]
    assert schedule_violations(visits, {"g": 100}, {}) == [
        "config isolation: config 1 of group g went back from epoch 1 to epoch 0"]


def test_group_tasks_follow_the_strategy():
    groups = [{"group_no": 0, "n_train": 900, "train_rows": [300, 300, 300]},
              {"group_no": 1, "n_train": 100, "train_rows": [100]},
              {"group_no": 2, "n_train": 0, "train_rows": []}]
    sizes = {g["group_no"]: g["n_train"] for g in groups}
    dp = group_tasks("dp", placement_for("dp", sizes, 3), groups, 3)
    assert [s[:3] for s in dp[0]["shards"]] == [(0, 0, 300), (1, 300, 300), (2, 600, 300)]
    assert 2 not in dp
    gtp = group_tasks("gtp", placement_for("gtp", sizes, 3), groups, 3)
    assert len(gtp[0]["shards"]) == 1 and gtp[0]["shards"][0][3] == [[0, 0, 300], [1, 0, 300], [2, 0, 300]]
    mtp = group_tasks("mtp", placement_for("mtp", sizes, 3), groups, 3)
    assert mtp[1]["mode"] == "configs" and [s[0] for s in mtp[1]["shards"]] == [0, 1, 2]
    grouped = group_tasks("grouped", placement_for("grouped", sizes, 3), groups, 3)
    assert len(grouped[0]["shards"]) >= 2



def test_only_dp_on_the_sequential_pattern_runs_per_step_tasks():
    # 'steps' (synchronous data parallelism) is dp's mode for MLPs alone; grouped and gtp MLP groups hop shards
    groups = [{"group_no": 0, "n_train": 900, "train_rows": [300, 300, 300]},
              {"group_no": 1, "n_train": 100, "train_rows": [100]}]
    sizes = {0: 900, 1: 100}
    seq = "sequential"
    modes = {st: {g: t["mode"] for g, t in group_tasks(st, placement_for(st, sizes, 3, seq), groups, 3, seq).items()}
             for st in ("grouped", "gtp", "dp")}
    assert modes == {"grouped": {0: "shards", 1: "shards"}, "gtp": {0: "shards", 1: "shards"},
                     "dp": {0: "steps", 1: "steps"}}
    glm_dp = group_tasks("dp", placement_for("dp", sizes, 3), groups, 3, "algebraic")
    assert {g: t["mode"] for g, t in glm_dp.items()} == {0: "shards", 1: "shards"}


def test_workload_of_rounds_the_per_config_iterations_up():
    # the budget's iterations spread over the configs in flight round up, never down
    from groupml.executor.plan import workload_of
    from groupml.learners import get_learner_family
    from groupml.search import parse_search

    logistic = get_learner_family("logistic")       # max_iter 100, epoch_iters 10
    hyperband = parse_search({"method": "hyperband", "space": {"l2": {"loguniform": [1e-4, 1]}},
                              "max_epochs": 9, "eta": 3})
    # 78 epoch blocks x 10 iterations over 17 in flight = 45.9 -> 46
    assert workload_of(hyperband, logistic) == {"n_configs": 17, "epochs": 46, "blocks": 5}
    tpe = parse_search({"method": "tpe", "n_trials": 7, "space": {"l2": {"loguniform": [1e-4, 1]}}, "max_epochs": 5})
    # 35 x 10 over 4 in flight = 87.5 -> 88
    assert workload_of(tpe, logistic) == {"n_configs": 4, "epochs": 88, "blocks": 9}


class _Cfg:
    def __init__(self, trial):
        self.params, self.trial_id = {"l2": 0.0, "fit_intercept": True}, trial


class _StuckPool:
    """A worker whose task never reports (a hung connection, a dead thread)."""

    def submit(self, w, request, theta, meta, fn="partial"):
        from concurrent.futures import Future
        return Future()


def test_glm_pass_returns_promptly_after_an_abort_although_a_worker_never_reports():
    import threading
    import time

    from groupml.executor.core import Aborted
    from groupml.executor.glm import ShardEvaluator

    abort = threading.Event()
    ev = ShardEvaluator(_StuckPool(), snapshot_id=1, group_no=0, group_key='{"g": 1}', family="logistic", d=2,
                        shards=[(0, 0, 10, [[0, 0, 10]]), (1, 10, 10, [[0, 10, 10]])], abort=abort)
    threading.Timer(0.2, abort.set).start()
    t0 = time.monotonic()
    with pytest.raises(Aborted):
        ev(np.zeros((3, 2)), [_Cfg(1), _Cfg(2)])
    assert time.monotonic() - t0 < 2.0


def test_closing_the_pool_fails_tasks_a_stuck_worker_still_holds():
    from groupml.executor.pool import Task, WorkerLostError, WorkerPool

    pool = WorkerPool([{"name": "w0", "dsn": "host=h"}], run_id=1)     # never started: no thread drains it
    queued = pool.submit(0, "{}", b"", {"group_key": "g"})
    running = Task(0, "{}", b"", {"group_key": "g"})
    pool._running[0] = running                                           # as if its query ignored the cancel
    pool.close()
    for fut in (queued, running.future):
        assert isinstance(fut.exception(timeout=0), WorkerLostError)
    assert pool.submit(0, "{}", b"", {}).exception(timeout=0) is not None   # closed: refused at once


def test_a_worker_failing_outside_psycopg_fails_its_tasks_instead_of_dying_silently():
    # any exception in a worker's thread (here: a task that returned NULL, and one whose
    # driver raised TypeError) ends that worker with an error on the task, and the tasks
    # queued behind it are refused, so no driver waits for a thread that is gone
    import threading

    from groupml.executor.pool import WorkerLostError, WorkerPool

    class _Cursor:
        def __init__(self, behaviour):
            self.behaviour = behaviour

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def execute(self, sql, params):
            if self.behaviour == "typeerror":
                raise TypeError("unexpected")

        def fetchone(self):
            return (None,)

    class _Conn:
        def __init__(self, behaviour):
            self.behaviour = behaviour

        def cursor(self, binary=False):
            return _Cursor(self.behaviour)

    for behaviour, text in (("null", "the task returned no result"), ("typeerror", "TypeError: unexpected")):
        pool = WorkerPool([{"name": "w0", "dsn": "host=h password=secret"}], run_id=1)
        pool.conns[0], pool.pids[0] = _Conn(behaviour), 4242
        first = pool.submit(0, "{}", b"", {"group_key": "g"})
        second = pool.submit(0, "{}", b"", {"group_key": "g"})
        t = threading.Thread(target=pool._loop, args=(0,), daemon=True)
        t.start()
        exc = first.exception(timeout=5)
        assert isinstance(exc, WorkerLostError) and exc.message == \
            f"worker 0 ('w0', backend pid 4242) failed: {text}"
        assert isinstance(second.exception(timeout=5), WorkerLostError)
        pool.queues[0].put((9, 1 << 62, None))
        t.join(5)
        assert not t.is_alive()


def test_redact():
    assert redact("host=h password=pw user=u") == "host=h password=*** user=u"
    assert redact("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    # unquoted libpq values may hold backslash-escaped spaces; quoted ones any escape
    assert redact(r"host=h password=abc\ def user=u") == "host=h password=*** user=u"
    assert redact(r"host=h password=a\\b\ c\'d user=u") == "host=h password=*** user=u"
    assert redact(r"host=h password='a b\' c' user=u") == "host=h password=*** user=u"
    assert redact("host=h PASSWORD = secret") == "host=h PASSWORD = ***"
    assert redact("postgresql://u@h/db?password=secret") == "postgresql://u@h/db?password=***"


def test_lightgbm_ranks_listen_on_their_workers_addresses():
    from groupml.errors import FeatureNotSupportedError
    from groupml.executor.pool import rank_hosts

    names = ["w0", "w1", "w2", "w3"]
    # unix socket (NULL), loopback v4 and v6: the coordinator's own host
    assert rank_hosts([None, "127.0.0.1", "::1", None], [0, 1, 2], names) == ["127.0.0.1"] * 3
    # other servers: the address each was reached at, one per rank
    assert rank_hosts(["10.0.0.5", "10.0.0.6", None, None], [1, 0], names) == ["10.0.0.6", "10.0.0.5"]
    with pytest.raises(FeatureNotSupportedError) as e:
        rank_hosts(["10.0.0.5", None, None, "fe80::1"], [0, 3], names)
    assert str(e.value) == "Distributed LightGBM needs IPv4 worker addresses; worker 'w3' is reached at fe80::1"
    assert "IPv4 host" in e.value.hint
    with pytest.raises(FeatureNotSupportedError) as e:
        rank_hosts(["10.0.0.5", None, "127.0.0.1", None], [0, 1, 2], names)
    assert "on the coordinator's host (w1, w2" in str(e.value) and "cannot connect to 127.0.0.1" in str(e.value)
    assert "network address" in e.value.hint


def test_free_ports_are_distinct_and_bindable():
    import socket

    from groupml.learners._lgbm import free_ports

    ports = free_ports(4, host="")
    assert len(set(ports)) == 4
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_parallel_snapshot_parts_are_balanced_and_keys_match_by_value():
    from groupml.executor.snapshot import _key_value, assign_buckets, can_build_in_parallel

    # largest bucket first onto the least loaded part; ties -> lower bucket, lower part
    assert assign_buckets({0: 50, 1: 30, 2: 20, 3: 20, 4: 5}, 2) == [[0, 3], [1, 2, 4]]   # 70 | 55
    assert assign_buckets({7: 10}, 4) == [[7]]                      # no empty parts
    assert assign_buckets({}, 3) == []
    parts = assign_buckets({b: (b * 37) % 11 + 1 for b in range(64)}, 3)
    assert sorted(b for p in parts for b in p) == list(range(64))
    loads = [sum((b * 37) % 11 + 1 for b in p) for p in parts]
    assert max(loads) - min(loads) <= 11
    # one group whatever the numeric key's scale or zero's sign; other values stay apart
    assert _key_value('{"tier": 1.0, "c": "a"}') == _key_value('{"c": "a", "tier": 1.00}') == \
        _key_value('{"c": "a", "tier": 1}')
    assert _key_value('{"x": -0.0}') == _key_value('{"x": 0}')
    assert _key_value('{"x": 0.1000000000000000001}') != _key_value('{"x": 0.1}')
    assert can_build_in_parallel(["country"], {"country": "text"})
    assert not can_build_in_parallel([], {})
    assert not can_build_in_parallel(["c"], {"c": "integer[]"})


def test_a_resumed_run_keeps_its_first_attempts_plan():
    from groupml.executor.plan import placement_for, resumed_plan

    sizes = {0: 900, 1: 300, 2: 200, 3: 100}
    first = placement_for("gtp", sizes, 2)
    prev = {"placement": first.to_dict(), "explanation": "..."}
    again = resumed_plan("gtp", prev, sizes, 2, "auto")
    assert again is not None and again[0] == "gtp" and again[1].to_dict() == first.to_dict()
    assert resumed_plan("gtp", prev, sizes, 2, "gtp")[0] == "gtp"
    # nothing planned yet, another explicit strategy, another worker count, other groups: plan anew
    assert resumed_plan("auto", {}, sizes, 2, "auto") is None
    assert resumed_plan("gtp", prev, sizes, 2, "mtp") is None
    assert resumed_plan("gtp", prev, sizes, 3, "auto") is None
    assert resumed_plan("gtp", prev, {0: 900, 1: 300}, 2, "auto") is None
    assert resumed_plan("gtp", {"placement": {"algorithm": "x"}}, sizes, 2, "auto") is None


def test_a_parallel_snapshot_sends_each_part_only_its_own_groups():
    # every part got the numbers of every group in one jsonb request: 45,000 keys of 10 kB
    # passed jsonb's 256 MB limit
    import contextlib
    import json

    from groupml.executor.snapshot import KEY_SETTINGS, build_snapshot

    class Session:
        callers_path = "public"

        def __init__(self, groups):
            self.groups = groups

        def query(self, sql, args=None, types=None):
            if sql.startswith("INSERT INTO groupml.snapshots"):
                return [{"snapshot_id": 7}]
            if "AS gkey" in sql:
                return self.groups
            if "current_setting" in sql:
                return [{n: "x" for n in KEY_SETTINGS}]
            return []

        def callers_search_path(self, path=None):
            return contextlib.nullcontext()

        def commit(self):
            pass

    class Parallel:
        parts = 3

        def __call__(self, sid, requests):
            self.requests = requests
            return [{"rows": 1, "groups": len(r["group_nos"])} for r in requests]

    groups = [{"gkey": json.dumps({"g": i}), "n": 10 + i, "b": i % 7} for i in range(40)]
    par = Parallel()
    build_snapshot(Session(groups), "public.t", ["g"], ["f1"], "y", {}, seed=0, fraction=0.2, parallel=par)
    seen = {}
    for req in par.requests:
        buckets = set(req["buckets"])
        assert req["settings"] == {n: "x" for n in KEY_SETTINGS}     # keys are written as the caller's
        for key, no in req["group_nos"].items():
            assert groups[no]["gkey"] == key and groups[no]["b"] in buckets
            seen[key] = no
    assert len(seen) == 40


def test_shard_passes_take_the_coordinators_pass_dtype():
    # partial sums evaluate every config with an intercept (the coordinator zeroes its
    # gradient), but a config without one keeps the float64 passes it would have in one process
    X, y = data()
    d = X.shape[1]
    theta = np.zeros((d + 1, 1))
    plain = _shard_trainer("logistic", np.column_stack([X, y]), d)
    partial_sums(plain, [{"l2": 0.1, "fit_intercept": False}], theta)
    assert list(plain._rows) == [np.float64]
    partial_sums(plain, [{"l2": 0.1}], theta)
    assert np.float32 in plain._rows
