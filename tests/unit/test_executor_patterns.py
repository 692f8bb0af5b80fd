"""Pure-Python parts of the sequential (MLP) and sampling (LightGBM) patterns of the executor:
the model hopper over a fake in-process pool, replay of its visit log, invariants of the new
task kinds, strategy checks, local fits."""

import json
from concurrent.futures import Future

import numpy as np
import pytest

from groupml.errors import FeatureNotSupportedError
from groupml.executor import worker
from groupml.executor.invariants import schedule_violations
from groupml.executor.core import GroupCtx, check_strategy, fit_with_trainer, unpack_fit, validate_any
from groupml.executor.patterns import ShardedMLPTrainer, local_fit
from groupml.fitting import budget_cap
from groupml.learners import MLPTrainer, load_model, replay
from groupml.learners._sharded import state_weights


def data(n=400, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] - X[:, 1] + rng.normal(scale=0.5, size=n) > 0).astype(float)
    return X, y


class FakePool:
    """Runs each task at once in the calling thread through worker.gap_task; logs like WorkerPool."""

    size = 2                          # workers 0 and 1

    def __init__(self, arrays):
        self.arrays = arrays          # json(pieces) -> (X, y)
        self.log = []
        self.clock = 0.0

    def load(self, w):
        return 0

    def alive(self, w):
        return True

    def submit(self, w, request, blob, meta, fn="task"):
        return self.submit_gang([(w, request, blob, meta)], fn)[0]

    def submit_gang(self, items, fn="task"):
        out = []
        for w, request, blob, meta in items:
            f = Future()
            f.set_result(worker.gap_task(None, json.loads(request), blob))
            self.log.append(dict(meta, worker=w, started=self.clock, finished=self.clock + 1))
            self.clock += 1
            out.append(f)
        return out


def fake_group(monkeypatch, X, y, cuts):
    """A group of rows ``X``, ``y`` cut into shards ``cuts`` [(start, n), ...] on two fake
    workers: (pool, ctx); the worker ops read the shards' rows from memory."""
    arrays = {json.dumps([[s, 0, n]]): (X[s:s + n], y[s:s + n]) for s, n in cuts}
    monkeypatch.setattr(worker, "shard_arrays", lambda session, req: arrays[json.dumps(req["pieces"])])
    pool = FakePool(arrays)
    shards = [(i % 2, s, n, [[s, 0, n]]) for i, (s, n) in enumerate(cuts)]
    return pool, GroupCtx(pool, snapshot_id=1, group_no=0, group_key="g", d=X.shape[1], shards=shards, mem_mb=64)


@pytest.fixture
def sharded(monkeypatch):
    X, y = data()
    cuts = [(0, 150), (150, 130), (280, 120)]
    monkeypatch.setattr(worker, "validation_arrays", lambda session, req: data(100, seed=1))
    pool, ctx = fake_group(monkeypatch, X, y, cuts)
    return X, y, cuts, pool, ctx


def test_hops_replay_bit_for_bit_and_keep_the_invariants(sharded):
    X, y, cuts, pool, ctx = sharded
    Xv, yv = data(100, seed=1)
    fam, spec, opts = validate_any("mlp", {"method": "grid", "epoch_iters": 1,
                                           "space": {"lr": [0.01, 0.001], "layers": ["4"], "epochs": [2]}}, {})
    tr = ShardedMLPTrainer(fam, ctx, Xv, yv, seed=3)
    res = fit_with_trainer(tr, fam, spec, n_train=400, n_val=100, n_skipped=0, d=3, pattern="sequential")
    assert res.status == "ok" and len(res.trials) == 2 and res.passes == 4
    visits = [e for e in pool.log if e["kind"] == "visit"]
    assert len(visits) == 2 * 2 * 3
    assert schedule_violations(pool.log, {"g": 400}, {}) == []
    shard_data = [(X[s:s + n], y[s:s + n]) for s, n in cuts]
    for tid in (0, 1):
        log = [(e["pass"], e["shard"], e["worker"]) for e in visits if e["trials"] == [tid]]
        want = state_weights(replay(log, shard_data, tr.params(tid), family="mlp"))
        got = load_model(tr.model(tid).to_bytes()).net.state_dict()
        for k, v in want.items():
            assert np.array_equal(v, got[k].detach().numpy()), k


def test_one_shard_hopper_equals_the_mlp_trainer(monkeypatch):
    X, y = data()
    Xv, yv = data(100, seed=1)
    arrays = {json.dumps([[0, 0, 400]]): (X, y)}
    monkeypatch.setattr(worker, "shard_arrays", lambda session, req: arrays[json.dumps(req["pieces"])])
    monkeypatch.setattr(worker, "validation_arrays", lambda session, req: (Xv, yv))
    ctx = GroupCtx(FakePool(arrays), snapshot_id=1, group_no=0, group_key="g", d=3, shards=[(0, 0, 400, [[0, 0, 400]])],
               mem_mb=64)
    fam, _, _ = validate_any("mlp", {}, {})
    params = {"layers": [5], "epochs": 3, "dropout": 0.2, "seed": 4}
    tr = ShardedMLPTrainer(fam, ctx, Xv, yv, seed=0)
    ref = MLPTrainer("mlp", X, y, Xv, yv)
    for t in (tr, ref):
        t.add(7, params)
        t.run(2)
        t.run(2)
    assert tr.status(7) == ref.status(7) == "max_iter" and tr.iterations(7) == 3
    assert tr.score(7) == ref.score(7)


def test_local_fit_round_trips_through_bytes():
    X, y = data()
    Mv = np.column_stack(data(100, seed=1))
    req = {"model": "lightgbm", "search": {"num_leaves": [4, 8], "num_boost_round": [6]},
           "fit_options": {}, "d": 3, "n_skipped": 2}
    res, events = unpack_fit(local_fit(req, X, y, Mv))
    assert res.status == "ok" and res.n_skipped == 2 and len(res.trials) == 2
    assert sum(t["is_best"] for t in res.trials) == 1 and res.model
    assert events and all(len(r) == 4 for _, _, reports in events for r in reports)


def test_invariants_of_the_new_task_kinds():
    def e(kind, p, w, s, start, n, trials, t0, t1):
        return {"group_key": "g", "kind": kind, "pass": p, "worker": w, "shard": s, "row_start": start,
                "n_rows": n, "trials": trials, "started": t0, "finished": t1}
    ok = [e("visit", 0, 0, 0, 0, 5, [1], 0, 1), e("visit", 0, 1, 1, 5, 5, [1], 1, 2),
          e("visit", 0, 1, 1, 5, 5, [2], 0, 0.5), e("visit", 0, 0, 0, 0, 5, [2], 1.5, 2.5)]
    assert schedule_violations(ok, {"g": 10}, {}) == []
    overlap = ok[:1] + [e("visit", 0, 1, 1, 5, 5, [1], 0.5, 2)]
    assert any(v.startswith("config isolation") for v in schedule_violations(overlap, {"g": 10}, {}))
    assert any(v.startswith("data sharding") for v in schedule_violations(ok[:1], {"g": 10}, {}))
    ranks = [e("rank", 0, 0, 0, 0, 5, [1], 0, 2), e("rank", 0, 1, 1, 5, 5, [1], 0, 2)]
    assert schedule_violations(ranks, {"g": 10}, {}) == []
    same_worker = [ranks[0], dict(ranks[1], worker=0, started=2, finished=3)]
    assert any("two ranks on one worker" in v for v in schedule_violations(same_worker, {"g": 10}, {}))
    twice = ranks + [dict(r, **{"pass": 1, "started": 3, "finished": 4}) for r in ranks]
    assert any("trained by 2 LightGBM jobs" in v for v in schedule_violations(twice, {"g": 10}, {}))
    assert schedule_violations([e("fit", 0, 0, 0, 0, 10, [], 0, 1)], {"g": 10}, {}) == []
    assert schedule_violations([e("fit", 0, 0, 0, 0, 9, [], 0, 1)], {"g": 10}, {}) != []


def test_strategy_checks_and_budget_cap():
    check_strategy("sequential", "gtp", "mlp")
    check_strategy("sampling", "dp", "lightgbm")
    check_strategy("sequential", "mtp", "mlp")
    with pytest.raises(FeatureNotSupportedError, match="got 'tp'"):
        check_strategy("sampling", "tp", "lightgbm")
    fam, spec, _ = validate_any("lightgbm", {"num_boost_round": [5, 40]}, {})
    assert budget_cap(spec.to_dict().get("space", {}), fam) == 40
    fam, spec, _ = validate_any("mlp", {}, {})
    assert budget_cap(spec.to_dict().get("space", {}), fam) == 20


def test_hyperband_drives_the_hopper_for_a_regressor(sharded, monkeypatch):
    X, y, cuts, pool, ctx = sharded
    yr = X[:, 0] * 2.0 + 0.1 * X[:, 1]
    arrays = {json.dumps([[s, 0, n]]): (X[s:s + n], yr[s:s + n]) for s, n in cuts}
    monkeypatch.setattr(worker, "shard_arrays", lambda session, req: arrays[json.dumps(req["pieces"])])
    Xv, _ = data(100, seed=1)
    yv = Xv[:, 0] * 2.0 + 0.1 * Xv[:, 1]
    monkeypatch.setattr(worker, "validation_arrays", lambda session, req: (Xv, yv))
    fam, spec, opts = validate_any("mlp_regressor", {
        "method": "hyperband", "epoch_iters": 1, "max_epochs": 3, "eta": 3, "seed": 2,
        "space": {"lr": {"loguniform": [1e-3, 3e-2]}, "layers": ["4"], "epochs": [3]}}, {})
    tr = ShardedMLPTrainer(fam, ctx, Xv, yv, seed=0)
    reports = []
    res = fit_with_trainer(tr, fam, spec, n_train=400, n_val=100, n_skipped=0, d=3, pattern="sequential",
                           on_epoch=lambda e: reports.extend(e.reports))
    assert res.status == "ok" and res.metric == "rmse"
    assert len(res.trials) > 3 and any(t["status"] == "stopped" for t in res.trials)
    assert {str(r[3]) for r in reports} == {"CONTINUE", "STOP", "CONVERGED"}   # CONTINUE/STOP per config
    assert schedule_violations(pool.log, {"g": 400}, {}) == []
    # every trained config visited each shard once per epoch it ran
    for t in res.trials:
        n_visits = sum(1 for e in pool.log if e["kind"] == "visit" and e["trials"] == [t["trial_id"]])
        assert n_visits == 3 * t["iterations"]


class NodePool(FakePool):
    """A FakePool whose workers are holders on nodes: each reads its own node snapshot (the
    request's snapshot id becomes 100 + worker, as ``for_holder`` does), ``dead`` ones fail."""

    def __init__(self, arrays, dead=()):
        super().__init__(arrays)
        self.dead = set(dead)
        self.errors = [None] * 8

    def alive(self, w):
        return w not in self.dead

    def submit_gang(self, items, fn="task"):
        from groupml.executor.pool import WorkerLostError

        out = []
        for w, request, blob, meta in items:
            if w in self.dead:
                f = Future()
                f.set_exception(WorkerLostError(f"worker {w} ('n{w}:5432 t') failed: node stopped"))
                out.append(f)
                continue
            req = dict(json.loads(request), snapshot=100 + w)
            out.extend(super().submit_gang([(w, json.dumps(req), blob, meta)], fn))
        return out


def test_a_group_spread_over_nodes_scores_each_validation_part_where_it_lives(sharded, monkeypatch):
    from groupml.executor.pool import NodeLostError

    X, y, cuts, pool, ctx = sharded
    Xv, yv = data(100, seed=1)
    # node snapshots: worker 0 and its replica 2 hold validation rows 0..59, worker 1 rows 60..99
    parts = {100: (Xv[:60], yv[:60]), 102: (Xv[:60], yv[:60]), 101: (Xv[60:], yv[60:])}
    monkeypatch.setattr(worker, "validation_arrays", lambda session, req: parts[req["snapshot"]])
    fam, _, _ = validate_any("mlp", {}, {})
    params = {"layers": [4], "epochs": 2, "seed": 1}
    shards = [(0, 0, 150, [[0, 0, 150]]), (1, 150, 130, [[150, 0, 130]]), (3, 280, 120, [[280, 0, 120]])]

    def trained(dead=()):
        node_ctx = GroupCtx(NodePool(pool.arrays, dead), snapshot_id=1, group_no=0, group_key="g", d=3, shards=shards,
                            mem_mb=64, holders=[[0, 2], [1], [3]], val_holders=[[0, 2], [1]])
        tr = ShardedMLPTrainer(fam, node_ctx, Xv, yv, seed=3, flexible=False)
        tr.add(7, params)
        tr.run(2)
        return tr, node_ctx.pool

    monkeypatch.setattr(worker, "validation_arrays",
                        lambda session, req: parts[req["snapshot"]] if req["snapshot"] >= 100 else (Xv, yv))
    whole = ShardedMLPTrainer(fam, GroupCtx(FakePool(pool.arrays), snapshot_id=1, group_no=0, group_key="g", d=3,
                                            shards=shards, mem_mb=64), Xv, yv, seed=3, flexible=False)
    whole.add(7, params)
    whole.run(2)
    tr, _ = trained()
    # the parts scored where they live, concatenated in the gathered order == the whole set scored at once
    assert np.array_equal(tr._margins(7), whole._margins(7)) and tr.score(7) == whole.score(7)
    # the holder of part 0 is gone: its replica trains its shard and scores its rows
    tr, node_pool = trained(dead={0})
    assert np.array_equal(tr._margins(7), whole._margins(7))
    assert {e["worker"] for e in node_pool.log if e["kind"] == "visit" and e["shard"] == 0} == {2}
    # worker 1 was the only holder of shard 1: no live node, 08001
    with pytest.raises(NodeLostError) as info:
        trained(dead={1})
    assert info.value.sqlstate == "08001" and "no live node" in info.value.message and "n1:5432" in info.value.message
