"""The MTP and DP baselines for the MLP and LightGBM (groupml.executor.baselines) over an
in-process pool that runs the real worker ops: equivalences with single-process training,
the schedule they log, and its invariants."""

import json
from concurrent.futures import Future

import numpy as np
import pytest

from groupml.executor import checkpoint, worker
from groupml.executor.baselines import DataParallelMLPTrainer, MTPLGBMTrainer, MTPMLPTrainer
from groupml.executor.invariants import schedule_violations
from groupml.executor.core import GroupCtx, check_strategy, fit_with_trainer, validate_any
from groupml.learners import LightGBMTrainer, MLPTrainer, load_model, train_lightgbm
from groupml.learners import _dpsgd, _mlp


def data(n=400, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] - X[:, 1] + 0.5 * X[:, 0] * X[:, 2] + rng.normal(scale=0.5, size=n) > 0).astype(float)
    return X, y


class FakePool:
    """Runs each task at once through worker.gap_task on the given worker; logs like WorkerPool."""

    def __init__(self):
        self.log = []
        self.clock = 0.0

    def load(self, w):
        return 0

    def alive(self, w):
        return True

    def submit(self, w, request, blob, meta, fn="task"):
        f = Future()
        f.set_result(worker.gap_task(None, json.loads(request), blob))
        self.log.append(dict(meta, worker=w, started=self.clock, finished=self.clock + 1))
        self.clock += 1
        return f


@pytest.fixture
def group(monkeypatch):
    """A 400-row group, its validation rows, and a context builder over row ranges."""
    X, y = data()
    Xv, yv = data(100, seed=1)
    monkeypatch.setattr(worker, "shard_arrays",
                        lambda session, req: tuple(a[req["pieces"][0][0]:req["pieces"][0][0] + req["pieces"][0][2]]
                                                   for a in (X, y)))
    monkeypatch.setattr(worker, "validation_arrays", lambda session, req: (Xv, yv))

    def ctx(bounds, workers=None):
        workers = workers or list(range(len(bounds)))
        shards = [(w, s, n, [[s, 0, n]]) for w, (s, n) in zip(workers, bounds)]
        return GroupCtx(FakePool(), snapshot_id=1, group_no=0, group_key="g", d=3, shards=shards, mem_mb=64)
    return X, y, Xv, yv, ctx


def weights(model_bytes):
    return {k: v.detach().numpy().copy() for k, v in load_model(model_bytes).net.state_dict().items()}


MLP_SPEC = {"method": "grid", "epoch_iters": 1,
            "space": {"lr": [0.01, 0.003], "layers": ["6,4"], "epochs": [3], "batch_size": [48], "dropout": [0.2]}}


def test_mtp_mlp_is_gtp_bit_for_bit_and_logs_whole_group_blocks(group):
    X, y, Xv, yv, ctx = group
    fam, spec, _ = validate_any("mlp", MLP_SPEC, {})
    c = ctx([(0, 400), (0, 400)])                         # one whole-group copy per worker
    mtp = fit_with_trainer(MTPMLPTrainer(fam, c, Xv, yv), fam, spec, n_train=400, n_val=100, n_skipped=0, d=3)
    ref = fit_with_trainer(MLPTrainer("mlp", X, y, Xv, yv), fam, spec, n_train=400, n_val=100, n_skipped=0, d=3)
    assert mtp.status == ref.status == "ok" and mtp.passes == ref.passes == 6
    assert [(t["trial_id"], t["score"], t["status"], t["epoch_losses"]) for t in mtp.trials] == \
        [(t["trial_id"], t["score"], t["status"], t["epoch_losses"]) for t in ref.trials]
    a, b = weights(mtp.model), weights(ref.model)
    assert all(np.array_equal(a[k], b[k]) for k in b)
    blocks = [e for e in c.pool.log if e["kind"] == "block"]
    assert len(blocks) == 2 * 3                            # a task per config and epoch block
    assert {e["worker"] for e in blocks if e["trials"] == [0]} != {e["worker"] for e in blocks if e["trials"] == [1]}
    assert all((e["row_start"], e["n_rows"]) == (0, 400) for e in blocks)
    assert schedule_violations(c.pool.log, {"g": 400}, {"g": "configs"}) == []


def test_mtp_lightgbm_equals_single_node(group):
    X, y, Xv, yv, ctx = group
    fam, spec, _ = validate_any("lightgbm", {"method": "grid", "epoch_iters": 4, "space": {
        "num_leaves": [4, 8], "num_boost_round": [12], "min_data_in_leaf": [10]}}, {})
    c = ctx([(0, 400), (0, 400)])
    mtp = fit_with_trainer(MTPLGBMTrainer(fam, c, Xv, yv), fam, spec, n_train=400, n_val=100, n_skipped=0, d=3)
    ref = fit_with_trainer(LightGBMTrainer("lightgbm", X, y, Xv, yv), fam, spec, n_train=400, n_val=100,
                           n_skipped=0, d=3)
    assert [(t["score"], t["iterations"]) for t in mtp.trials] == [(t["score"], t["iterations"]) for t in ref.trials]
    ours = load_model(mtp.model)
    single = train_lightgbm("lightgbm", X, y, mtp.params)
    assert ours.model_text.split("end of trees")[0] == single.split("end of trees")[0]
    boosts = [e for e in c.pool.log if e["kind"] == "boost"]
    assert sorted(e["trials"][0] for e in boosts) == [0, 1] and {e["worker"] for e in boosts} == {0, 1}
    assert schedule_violations(c.pool.log, {"g": 400}, {"g": "configs"}) == []


@pytest.mark.parametrize("family", ["mlp", "mlp_regressor"])
def test_dp_on_one_shard_is_single_process_training_bit_for_bit(group, family, monkeypatch):
    X, y, Xv, yv, ctx = group
    if family == "mlp_regressor":
        y, yv = X[:, 0] * 2 + X[:, 1], Xv[:, 0] * 2 + Xv[:, 1]
        monkeypatch.setattr(worker, "shard_arrays", lambda session, req: (X, y))
    fam, spec, _ = validate_any(family, MLP_SPEC, {})
    c = ctx([(0, 400)])
    dp = fit_with_trainer(DataParallelMLPTrainer(fam, c, Xv, yv), fam, spec, n_train=400, n_val=100, n_skipped=0,
                          d=3)
    ref = fit_with_trainer(MLPTrainer(family, X, y, Xv, yv), fam, spec, n_train=400, n_val=100, n_skipped=0, d=3)
    assert [(t["score"], t["epoch_losses"]) for t in dp.trials] == [(t["score"], t["epoch_losses"])
                                                                    for t in ref.trials]
    a, b = weights(dp.model), weights(ref.model)
    assert all(np.array_equal(a[k], b[k]) for k in b)


def test_dp_over_shards_equals_single_process_to_float32_rounding(group):
    X, y, Xv, yv, ctx = group
    fam, spec, _ = validate_any("mlp", MLP_SPEC, {})
    c = ctx([(0, 170), (170, 130), (300, 100)])
    tr = DataParallelMLPTrainer(fam, c, Xv, yv)
    dp = fit_with_trainer(tr, fam, spec, n_train=400, n_val=100, n_skipped=0, d=3)
    ref = fit_with_trainer(MLPTrainer("mlp", X, y, Xv, yv), fam, spec, n_train=400, n_val=100, n_skipped=0, d=3)
    for t, r in zip(dp.trials, ref.trials):
        assert t["params"] == r["params"] and t["score"] == pytest.approx(r["score"], abs=1e-6)
    a, b = weights(dp.model), weights(ref.model)
    assert max(float(np.abs(a[k] - b[k]).max()) for k in b) < 1e-5
    steps = [e for e in c.pool.log if e["kind"] == "step"]
    # the two configs share every round: 3 epochs of ceil(400 / 48) = 9 steps, one task per shard
    assert tr.rounds == 27 and len(steps) == 27 * 3
    assert all(e["trials"] == [0, 1] for e in steps)
    assert schedule_violations(c.pool.log, {"g": 400}, {"g": "steps"}) == []


def test_dp_resumes_from_an_epoch_checkpoint_bit_for_bit(group):
    X, y, Xv, yv, ctx = group
    fam, _, _ = validate_any("mlp", {}, {})
    params = {"layers": [5], "epochs": 3, "dropout": 0.3, "batch_size": 32, "seed": 4}
    bounds = [(0, 250), (250, 150)]
    whole = DataParallelMLPTrainer(fam, ctx(bounds), Xv, yv)
    whole.add(1, params)
    whole.run(3)
    first = DataParallelMLPTrainer(fam, ctx(bounds), Xv, yv)
    first.add(1, params)
    first.run(1)
    saved = checkpoint.decode(checkpoint.encode(first.checkpoint_state()))
    again = DataParallelMLPTrainer(fam, ctx(bounds), Xv, yv, stats=saved["stats"])
    again.load_checkpoint(saved)
    assert again.rounds == first.rounds == 13 and again.iterations(1) == 1
    again.run(2)
    assert again.status(1) == whole.status(1) == "max_iter" and again.score(1) == whole.score(1)
    a, b = weights(again.model(1).to_bytes()), weights(whole.model(1).to_bytes())
    assert all(np.array_equal(a[k], b[k]) for k in b)


def test_mtp_mlp_resumes_and_rescores_from_a_checkpoint(group):
    X, y, Xv, yv, ctx = group
    fam, _, _ = validate_any("mlp", {}, {})
    params = {"layers": [5], "epochs": 2, "batch_size": 64}
    first = MTPMLPTrainer(fam, ctx([(0, 400), (0, 400)]), Xv, yv)
    first.add(3, params)
    first.run(1)
    saved = checkpoint.decode(checkpoint.encode(first.checkpoint_state()))
    again = MTPMLPTrainer(fam, ctx([(0, 400), (0, 400)]), Xv, yv)
    again.load_checkpoint(saved)
    assert again.score(3) == first.score(3)               # recomputed by a worker (op mlp_eval)
    again.run(1)
    ref = MLPTrainer("mlp", X, y, Xv, yv)
    ref.add(3, params)
    ref.run(2)
    assert again.score(3) == ref.score(3) and again.status(3) == ref.status(3) == "max_iter"


def test_dp_worker_op_rejects_a_malformed_step():
    X, y = data(20)
    net_params = {"layers": [3], "epochs": 1}
    req = {"op": "mlp_grad", "family": "mlp", "d": 3, "configs": [{"params": net_params, "rows": 2, "masks": False}]}
    fam = _mlp._family("mlp")
    run = _mlp.new_run(fam, net_params, 3, _mlp.merge_stats([_mlp.partial_stats(X, y)], 3))
    state = _dpsgd.state_vector(run.net).astype("<f8").tobytes()
    from groupml.errors import InvalidParameterError
    from groupml.executor.baselines import mlp_grad
    out = np.frombuffer(mlp_grad(req, state + np.array([0, 5], "<i4").tobytes(), X, y), dtype="<f8")
    assert out.size == 1 + _dpsgd.grad_size(run.net) and np.isfinite(out).all()
    with pytest.raises(InvalidParameterError, match="outside this shard"):
        mlp_grad(req, state + np.array([0, 99], "<i4").tobytes(), X, y)
    with pytest.raises(InvalidParameterError, match="sent"):
        mlp_grad(req, state + np.array([0, 5, 7], "<i4").tobytes(), X, y)
    for rows in (-2, "2", 2.0, None, True):                   # -2 would fail inside numpy
        bad = dict(req, configs=[dict(req["configs"][0], rows=rows)])
        with pytest.raises(InvalidParameterError, match=r"A DP step's 'rows' must be a count of rows; got "):
            mlp_grad(bad, state + np.array([0, 5], "<i4").tobytes(), X, y)


def test_invariants_of_the_baseline_task_kinds():
    def e(kind, p, w, s, start, n, trials, t0, t1):
        return {"group_key": "g", "kind": kind, "pass": p, "worker": w, "shard": s, "row_start": start,
                "n_rows": n, "trials": trials, "started": t0, "finished": t1}
    blocks = [e("block", 0, 0, 0, 0, 10, [1], 0, 1), e("block", 0, 1, 1, 0, 10, [2], 0, 1),
              e("block", 1, 1, 1, 0, 10, [1], 1, 2)]
    assert schedule_violations(blocks, {"g": 10}, {}) == []
    bad = schedule_violations([blocks[0], e("block", 0, 1, 1, 0, 10, [1], 0.5, 2)], {"g": 10}, {})
    assert any("config isolation" in v and "started a block" in v for v in bad)
    assert any("ran epoch 0 again" in v for v in bad)
    assert any("not a whole copy" in v for v in schedule_violations([e("block", 0, 0, 0, 0, 9, [1], 0, 1)],
                                                                    {"g": 10}, {}))
    boosts = [e("boost", 0, 0, 0, 0, 10, [1], 0, 1), e("boost", 1, 1, 1, 0, 10, [1], 0, 1)]
    assert any("trained by 2 MTP tasks" in v for v in schedule_violations(boosts, {"g": 10}, {}))
    steps = [e("step", 0, 0, 0, 0, 6, [1, 2], 0, 1), e("step", 0, 1, 1, 6, 4, [1, 2], 0, 1),
             e("step", 1, 0, 0, 0, 6, [1, 2], 1, 2), e("step", 1, 1, 1, 6, 4, [1, 2], 1, 2)]
    assert schedule_violations(steps, {"g": 10}, {}) == []
    early = steps[:3] + [dict(steps[3], started=0.5)]
    assert any("step 1 started" in v for v in schedule_violations(early, {"g": 10}, {}))
    assert any("rows [0, 6) of 10" in v for v in schedule_violations(steps[:1], {"g": 10}, {}))
    assert any("different configs" in v for v in schedule_violations(steps[:1] + [dict(steps[1], trials=[1])],
                                                                      {"g": 10}, {}))
    assert any("numbers [1] are not consecutive" in v for v in schedule_violations(steps[2:], {"g": 10}, {}))


def test_every_pattern_runs_every_strategy():
    for pattern, model in (("algebraic", "logistic"), ("sequential", "mlp"), ("sampling", "lightgbm")):
        for strategy in ("auto", "grouped", "gtp", "mtp", "dp"):
            check_strategy(pattern, strategy, model)
    from groupml.errors import FeatureNotSupportedError
    with pytest.raises(FeatureNotSupportedError) as exc:
        check_strategy("sequential", "sp", "mlp")
    assert str(exc.value) == ("The 'strategy' value of train_groups must be one of auto, grouped, gtp, mtp, dp, mop "
                              "for model 'mlp' (sequential pattern); got 'sp'")
    check_strategy("sequential", "mop", "mlp")          # model hopper parallelism: SGD-trained MLPs and GLMs
    check_strategy("algebraic", "mop", "logistic")
    with pytest.raises(FeatureNotSupportedError):
        check_strategy("sampling", "mop", "lightgbm")
    assert "'auto' picks the cheapest" in exc.value.hint
