"""PyTorch MLP learner: families, Trainer protocol, safe model format, sharded hopping (MOP/GAP)."""

import io

import numpy as np
import pytest

from groupml.engine import Trainer
from groupml.errors import (ArrayLengthError, DataError, FeatureNotSupportedError,
                            InvalidParameterError, ModelFormatError, PrerequisiteStateError,
                            SearchSpecError, UndefinedObjectError)
from groupml.learners import (LEARNER_FAMILIES, GLMTrainer, LightGBMTrainer, MLPModel, MLPTrainer,
                              access_pattern, get_learner_family, load_model, make_trainer,
                              replay, run_mop, train_sharded, visit)
from groupml.learners import _container, _sharded
from groupml.learners._model import pack_model
from groupml.search import make_procedure, parse_search, run_search


def _data(n=800, d=4, seed=0, regression=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1.0, 3.0, 0.5, 10.0][:d]) + 5.0
    Z = (X - 5.0) / np.array([1.0, 3.0, 0.5, 10.0][:d])
    f = Z[:, 0] + 0.8 * Z[:, 1] ** 2 - Z[:, 2] * Z[:, 3]
    if regression:
        return X, 3.0 * f + 0.1 * rng.normal(size=n) + 100.0
    return X, (f + 0.3 * rng.normal(size=n) > 0.8).astype(float)


def _split(X, y, k=600):
    return X[:k], y[:k], X[k:], y[k:]


def _weights(model):
    return {k: v.detach().numpy().copy() for k, v in model.net.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


FAST = {"layers": [16, 8], "epochs": 4, "batch_size": 32}


# ---------------------------------------------------------------- families and factory
def test_families_defaults_and_validation():
    fam = get_learner_family("mlp")
    p = fam.validate_params({})
    assert p == {"layers": [64, 32], "activation": "relu", "dropout": 0.0, "batch_size": 64,
                 "optimizer": "adam", "lr": 0.001, "momentum": 0.0, "weight_decay": 0.0,
                 "epochs": 20, "seed": 0}
    assert fam.validate_params(p) == p
    assert fam.kind == "classification" and get_learner_family("mlp_regressor").kind == "regression"
    assert fam.validate_params({"layers": [8.0], "epochs": 3.0})["layers"] == [8]
    assert fam.validate_params({"layers": []})["layers"] == []
    with pytest.raises(InvalidParameterError) as e:
        fam.validate_params({"activation": "sigmoid"})
    assert e.value.message == ("The 'activation' value of model 'mlp' must be one of 'relu', "
                               "'tanh', 'gelu'; got 'sigmoid'")
    with pytest.raises(InvalidParameterError) as e:
        fam.validate_params({"dropout": 1})
    assert e.value.message == "The 'dropout' value of model 'mlp' must be < 1; got 1" and e.value.hint
    with pytest.raises(InvalidParameterError) as e:
        fam.validate_params({"layers": [16, 0]})
    assert e.value.message == "The 'layers' value of model 'mlp' must be >= 1; got 0"
    with pytest.raises(InvalidParameterError) as e:
        fam.validate_params({"layers": [1] * 17})
    assert "must be a list of at most 16 hidden layer sizes; got" in e.value.message
    assert fam.validate_params({"layers": 16})["layers"] == [16]
    assert fam.validate_params({"layers": "64, 32"})["layers"] == [64, 32]
    assert fam.validate_params({"layers": ""})["layers"] == []
    with pytest.raises(InvalidParameterError):
        fam.validate_params({"layers": "64;32"})
    with pytest.raises(InvalidParameterError):
        fam.validate_params({"layers": {"a": 1}})
    with pytest.raises(InvalidParameterError):
        fam.validate_params({"lr": 0})
    with pytest.raises(InvalidParameterError):
        fam.validate_params({"optimizer": "rmsprop"})
    with pytest.raises(SearchSpecError) as e:
        fam.validate_params({"l2": 0.1})
    assert e.value.message.startswith("Unknown parameter 'l2' for model 'mlp'; allowed parameters "
                                      "are activation, batch_size, dropout, epochs, layers")


def test_learner_families_and_make_trainer_dispatch():
    assert sorted(LEARNER_FAMILIES) == ["lightgbm", "lightgbm_regressor", "linear", "logistic",
                                        "mlp", "mlp_regressor", "svm"]
    assert [access_pattern(f) for f in ("logistic", "mlp", "lightgbm")] == [
        "algebraic", "sequential", "sampling"]
    with pytest.raises(UndefinedObjectError) as e:
        get_learner_family("tree")
    assert e.value.hint == ("Known model families are lightgbm, lightgbm_regressor, linear, "
                            "logistic, mlp, mlp_regressor, svm.")
    X, y = _data(200)
    assert isinstance(make_trainer("logistic", X, y), GLMTrainer)
    assert isinstance(make_trainer("mlp", X, y), MLPTrainer)
    assert isinstance(make_trainer("lightgbm", X, y), LightGBMTrainer)
    assert isinstance(make_trainer("mlp", X, y), Trainer)


# ---------------------------------------------------------------- trainer
def test_trainer_learns_a_nonlinear_boundary_and_counts_epochs():
    Xtr, ytr, Xva, yva = _split(*_data())
    tr = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    assert tr.metric == "logloss"
    tr.add(0, {**FAST, "epochs": 12, "lr": 0.01})
    tr.add(1, {**FAST, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "activation": "tanh",
               "epochs": 12})
    tr.run(2)
    first = tr.score(0)
    assert tr.iterations(0) == 2 and tr.passes == 4 and not tr.converged(0)
    tr.run(20)
    assert tr.converged(0) and tr.status(0) == "max_iter" and tr.iterations(0) == 12
    assert tr.passes == 24
    assert tr.score(0) < first
    for tid in (0, 1):
        m = tr.metrics(tid)
        assert set(m) == {"accuracy", "auc", "logloss"}
        assert m["auc"] > 0.9, m
        assert tr.score(tid) == pytest.approx(m["logloss"])


def test_configs_are_isolated_and_seeded():
    """A config's weights do not depend on its batch-mates or on join/leave timing."""
    Xtr, ytr, Xva, yva = _split(*_data())
    cfg = {**FAST, "dropout": 0.3, "seed": 7}
    alone = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    alone.add(5, cfg)
    alone.run(4)
    mixed = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    mixed.add(1, {**FAST, "activation": "gelu"})
    mixed.run(1)
    mixed.add(5, cfg)            # joins mid-run
    mixed.run(2)
    mixed.remove(1)              # leaves mid-run; its model stays readable
    assert mixed.active() == [5] and mixed.iterations(1) == 3
    mixed.run(2)
    assert _same(_weights(alone.model(5)), _weights(mixed.model(5)))
    assert mixed.metrics(1)["auc"] > 0.5
    other = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    other.add(0, {**cfg, "seed": 8})
    other.run(4)
    assert not _same(_weights(alone.model(5)), _weights(other.model(0)))
    with pytest.raises(InvalidParameterError):
        alone.add(5, cfg)
    with pytest.raises(UndefinedObjectError):
        alone.score(99)
    with pytest.raises(InvalidParameterError):
        alone.run(0)


def test_checkpoint_restore_equals_an_uninterrupted_run():
    Xtr, ytr, Xva, yva = _split(*_data())
    cfg = {**FAST, "dropout": 0.3, "epochs": 5, "seed": 2}
    straight = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    straight.add(0, cfg)
    straight.run(5)
    first = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    first.add(0, cfg)
    first.run(2)
    checkpoint = first.run_state(0)              # what a job commits after epoch 2
    resumed = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    resumed.restore(7, checkpoint)
    assert resumed.iterations(7) == 2 and not resumed.converged(7)
    resumed.run(10)
    assert resumed.iterations(7) == 5 and resumed.converged(7)
    assert _same(_weights(straight.model(0)), _weights(resumed.model(7)))
    with pytest.raises(InvalidParameterError):
        resumed.restore(7, checkpoint)
    with pytest.raises(PrerequisiteStateError):
        MLPTrainer("mlp", Xtr[:, :3], ytr).restore(0, checkpoint)
    with pytest.raises(PrerequisiteStateError):
        MLPTrainer("mlp_regressor", Xtr, ytr).restore(0, checkpoint)


def test_regressor_and_bad_input():
    X, y = _data(900, regression=True)
    Xtr, ytr, Xva, yva = _split(X, y, 700)
    tr = MLPTrainer("mlp_regressor", Xtr, ytr, Xva, yva, metric="r2")
    tr.add(0, {"layers": [32], "epochs": 40, "lr": 0.01, "batch_size": 32})
    tr.run(40)
    assert tr.metrics(0)["r2"] > 0.8
    model = tr.model(0)
    assert model.predict(Xva[:3]).dtype == np.float64
    with pytest.raises(FeatureNotSupportedError):
        model.predict_proba(Xva[:3])
    Xc, yc = _data(50)
    with pytest.raises(DataError) as e:
        MLPTrainer("mlp", Xc, yc * 2)
    assert e.value.message == "The labels of the training data for model 'mlp' must be 0 or 1; got 2"
    with pytest.raises(DataError):
        MLPTrainer("mlp", np.full((3, 2), np.nan), [0, 1, 0])
    with pytest.raises(ArrayLengthError):
        MLPTrainer("mlp", Xc, yc, Xc[:, :2], yc)
    with pytest.raises(InvalidParameterError):
        MLPTrainer("mlp", Xc, yc, metric="rmse")


def test_interrupt_check_runs_after_every_epoch():
    Xtr, ytr, _, _ = _split(*_data(300), 250)
    tr = MLPTrainer("mlp", Xtr, ytr)
    tr.add(0, FAST)
    calls = []

    def check():
        calls.append(tr.iterations(0))
        if len(calls) == 2:
            raise KeyboardInterrupt

    tr.interrupt_check = check
    with pytest.raises(KeyboardInterrupt):
        tr.run(4)
    assert calls == [1, 2] and tr.iterations(0) == 2
    tr.interrupt_check = None
    tr.run(4)
    assert tr.converged(0)


def test_search_driver_runs_mlp_configs():
    Xtr, ytr, Xva, yva = _split(*_data())
    fam = get_learner_family("mlp")
    spec = parse_search({"method": "successive_halving", "n_trials": 4, "epoch_iters": 1,
                         "max_epochs": 4, "eta": 2, "seed": 3,
                         "lr": {"loguniform": [0.001, 0.03]}, "layers": ["8", "16,8"],
                         "epochs": 4, "batch_size": 64},
                        param_names=fam.param_names)
    tr = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    result = run_search(make_procedure(spec), tr, slots=4, epoch_iters=spec.epoch_iters)
    assert len(result.trials) == 4 and result.best is not None
    assert sorted(t.epochs for t in result.trials)[-1] == 4
    assert any(t.status == "stopped" for t in result.trials)


# ---------------------------------------------------------------- model format
def test_model_round_trip_and_safe_loading():
    Xtr, ytr, Xva, yva = _split(*_data())
    tr = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    tr.add(0, {**FAST, "dropout": 0.2})
    tr.run(2)
    model = tr.model(0)
    data = model.to_bytes()
    back = load_model(data)
    assert isinstance(back, MLPModel) and back.family == "mlp" and back.n_features == 4
    assert back.params == model.params
    assert np.array_equal(back.decision_function(Xva), model.decision_function(Xva))
    assert np.array_equal(back.predict(Xva), (model.decision_function(Xva) > 0).astype(np.int64))
    assert np.all((back.predict_proba(Xva) > 0) & (back.predict_proba(Xva) < 1))
    # scores computed by the trainer come from the same network
    from groupml.learners._metrics import logloss
    assert tr.score(0) == pytest.approx(logloss(yva, back.decision_function(Xva)))
    with pytest.raises(ArrayLengthError):
        back.predict(Xva[:, :3])
    for bad in (data[:-40], data[:20], pack_model("mlp", b"\x00\x00\x00\x02{}")):
        with pytest.raises(ModelFormatError):
            load_model(bad)


class _Evil:
    def __reduce__(self):
        return (print, ("pickle code ran",))


def test_pickled_objects_in_a_model_are_refused(capsys):
    import torch
    buf = io.BytesIO()
    torch.save({"out.weight": _Evil()}, buf)
    header = {"family": "mlp", "params": {"layers": []}, "n_features": 2}
    with pytest.raises(ModelFormatError):
        load_model(pack_model("mlp", _signed(header, buf.getvalue())))
    assert "pickle code ran" not in capsys.readouterr().out
    # (the checksum is right in these payloads: the checks behind it are what is tested)
    # non-finite weights and wrong shapes are refused too
    model = MLPModel.from_payload(_signed(header, _state_bytes({"layers": []}, 2)))
    sd = model.net.state_dict()
    sd["out.weight"] = torch.full_like(sd["out.weight"], float("nan"))
    buf = io.BytesIO()
    torch.save(sd, buf)
    with pytest.raises(ModelFormatError):
        load_model(pack_model("mlp", _signed(header, buf.getvalue())))
    with pytest.raises(ModelFormatError):
        load_model(pack_model("mlp", _signed({**header, "n_features": 3},
                                                     _state_bytes({"layers": []}, 2))))


def test_a_deflated_torch_archive_is_sized_before_torch_reads_it(monkeypatch):
    # torch reads deflated archives too: 4 KB of value could unpack to any size before the
    # network's shapes were checked. A small limit here stands for MAX_TORCH_BYTES.
    import zipfile

    from groupml.learners import _mlp

    header = {"family": "mlp", "params": {"layers": []}, "n_features": 2}
    plain = _state_bytes({"layers": []}, 2)
    src = zipfile.ZipFile(io.BytesIO(plain))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(info.filename, src.read(info.filename))
    deflated = out.getvalue()
    assert isinstance(load_model(pack_model("mlp", _signed(header, deflated))), MLPModel)   # a real one reads
    monkeypatch.setattr(_mlp, "MAX_TORCH_BYTES", sum(i.file_size for i in src.infolist()) - 1)
    with pytest.raises(ModelFormatError, match=r"The mlp model is invalid: it would unpack to [\d,]+ bytes; "
                                               r"at most [\d,]+ are read"):
        load_model(pack_model("mlp", _signed(header, deflated)))
    with pytest.raises(ModelFormatError, match="it is not torch's archive format"):
        load_model(pack_model("mlp", _signed(header, b"not a zip at all")))
    # an archive of many empty entries is refused from its directory's count, before parsing it
    monkeypatch.setattr(_mlp, "MAX_TORCH_ENTRIES", 50)
    many = io.BytesIO()
    with zipfile.ZipFile(many, "w") as z:
        for i in range(51):
            z.writestr(f"archive/e{i}", b"")
    with pytest.raises(ModelFormatError, match="its archive lists 51 entries; at most 50 are read"):
        load_model(pack_model("mlp", _signed(header, many.getvalue())))


def test_a_tensor_that_claims_more_values_than_it_stores_is_refused_before_it_is_read():
    # an expanded tensor (stride 0) of one stored value can claim 2e8 values: isfinite over 20
    # such took 17 s and 1.6 GB from a 3 KB value, before the shapes were compared
    import torch

    header = {"family": "mlp", "params": {"layers": []}, "n_features": 2}
    buf = io.BytesIO()
    torch.save({f"w{i}": torch.zeros(1).expand(200_000_000) for i in range(20)}, buf)
    assert len(buf.getvalue()) < 10_000
    with pytest.raises(ModelFormatError, match="the weights do not fit the network of its params"):
        load_model(pack_model("mlp", _signed(header, buf.getvalue())))


def _signed(header, body):
    from groupml.learners._model import body_digest
    return _container.pack({**header, "sha256": body_digest(body)}, body)


def _state_bytes(params, d):
    import torch
    from groupml.learners._mlp import _build
    net, _ = _build(get_learner_family("mlp").validate_params(params), d)
    buf = io.BytesIO()
    torch.save(net.state_dict(), buf)
    return buf.getvalue()


# ---------------------------------------------------------------- sharded training (MOP / GAP)
def _shards(X, y, cuts):
    edges = [0] + list(cuts) + [len(y)]
    return [(X[a:b], y[a:b]) for a, b in zip(edges[:-1], edges[1:])]


def test_one_shard_equals_the_trainer_bit_for_bit():
    X, y = _data(400)
    cfg = {**FAST, "dropout": 0.25, "epochs": 3, "seed": 4}
    tr = MLPTrainer("mlp", X, y)
    tr.add(0, cfg)
    tr.run(3)
    state, log = train_sharded("mlp", cfg, [(X, y)])
    assert log == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert _same(_weights(tr.model(0)), _sharded.state_weights(state))


def test_hops_log_and_replay_reproduce_weights_bit_for_bit():
    X, y = _data(900)
    shards = _shards(X, y, [250, 520, 700])
    cfg = {**FAST, "dropout": 0.2, "epochs": 3, "seed": 11}
    state, log = train_sharded("mlp", cfg, shards, shard_workers=[0, 1, 1, 2], seed=5)
    # every epoch visits every shard exactly once, in the seeded hop order
    assert [e for e, _, _ in log] == [0] * 4 + [1] * 4 + [2] * 4
    for e in range(3):
        assert [s for ee, s, _ in log if ee == e] == _sharded.hop_order(5, 0, e, 4)
    assert all(w == [0, 1, 1, 2][s] for _, s, w in log)
    again = replay(log, shards, cfg)
    assert again == state                                   # identical bytes
    assert _same(_sharded.state_weights(again), _sharded.state_weights(state))
    # the order matters: another order gives other weights
    other = replay(list(reversed(log)), shards, cfg)
    assert not _same(_sharded.state_weights(other), _sharded.state_weights(state))
    model = _sharded.state_model(state)
    assert model.n_features == 4 and model.predict(X[:5]).shape == (5,)


def test_visit_is_a_pure_bytes_function_and_checks_its_shard():
    X, y = _data(300)
    shards = _shards(X, y, [150])
    s0 = _sharded.init_state("mlp", {**FAST, "optimizer": "sgd", "lr": 0.05, "momentum": 0.5},
                             shards)
    a = visit(s0, *shards[1], epoch=0, shard_id=1)
    b = visit(s0, *shards[1], epoch=0, shard_id=1)
    assert isinstance(a, bytes) and a == b and a != s0
    assert visit(s0, *shards[1], epoch=1, shard_id=1) != a   # the epoch seeds the row order
    with pytest.raises(ArrayLengthError):
        visit(s0, shards[0][0][:, :3], shards[0][1], epoch=0, shard_id=0)
    with pytest.raises(ModelFormatError):
        visit(b"junk", *shards[0], epoch=0, shard_id=0)
    with pytest.raises(InvalidParameterError):
        train_sharded("mlp", FAST, shards, shard_workers=[0])
    with pytest.raises(InvalidParameterError):
        replay([(0, 7, 0)], shards, FAST)


@pytest.mark.parametrize("flexible, policy", [(True, None), (False, None), (True, "randomized")])
def test_multi_worker_hopping_keeps_the_invariants_and_replays(flexible, policy):
    X, y = _data(1200, seed=2)
    shards = _shards(X, y, [300, 500, 800, 1000])             # 5 shards
    shard_workers = [0, 1, 2, 1, 0]                            # on 3 workers
    configs = {10: {**FAST, "epochs": 2, "seed": 1},
               11: {**FAST, "epochs": 3, "dropout": 0.1, "activation": "tanh"},
               12: {**FAST, "epochs": 2, "optimizer": "sgd", "lr": 0.05},
               13: {**FAST, "epochs": 1, "layers": [4]}}
    res = run_mop("mlp", configs, shards, shard_workers, seed=9, flexible=flexible, timeout=120, policy=policy)
    assert res.violations == []
    assert _sharded.check_invariants(res.events) == []
    assert len(res.events) == 5 * (2 + 3 + 2 + 1)
    # the workers really ran in parallel at some point (the check is not vacuous)
    spans = sorted((ev.start_ns, ev.end_ns) for ev in res.events)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))
    for tid, cfg in configs.items():
        log = res.logs[tid]
        epochs = cfg["epochs"]
        assert len(log) == 5 * epochs
        for e in range(epochs):
            assert sorted(s for ee, s, _ in log if ee == e) == [0, 1, 2, 3, 4]
            if not flexible:
                assert [s for ee, s, _ in log if ee == e] == _sharded.hop_order(9, tid, e, 5)
        assert all(w == shard_workers[s] for _, s, w in log)
        assert replay(log, shards, cfg) == res.states[tid]


def test_invariant_checker_flags_overlaps():
    ev = _sharded.VisitEvent
    events = [ev(1, 0, 0, 0, 0, 10), ev(2, 0, 1, 0, 5, 12), ev(1, 0, 1, 1, 8, 20)]
    problems = _sharded.check_invariants(events)
    assert any(p.startswith("worker 0:") for p in problems)
    assert any(p.startswith("config 1:") for p in problems)


def test_a_failing_visit_stops_the_run():
    X, y = _data(300)
    shards = _shards(X, y, [150])

    def broken(worker, state, epoch, shard):
        raise RuntimeError("worker lost")

    with pytest.raises(RuntimeError, match="worker lost"):
        run_mop("mlp", {0: FAST}, shards, [0, 1], visit_fn=broken, timeout=30)


_REMOTE = """
import io, sys
import numpy as np
from groupml.learners import _container, visit
header, body = _container.unpack(sys.stdin.buffer.read(), "job")
state = body[:header["state_len"]]
with np.load(io.BytesIO(body[header["state_len"]:]), allow_pickle=False) as npz:
    X, y = npz["X"], npz["y"]
sys.stdout.buffer.write(visit(state, X, y, epoch=header["epoch"], shard_id=header["shard"]))
"""


def test_a_visit_in_another_process_gives_the_same_bytes():
    """What a remote worker computes from (state bytes, shard) equals the local visit."""
    import subprocess
    import sys
    X, y = _data(500)
    shards = _shards(X, y, [200])
    s0 = _sharded.init_state("mlp", {**FAST, "dropout": 0.2, "seed": 3}, shards)
    local = visit(s0, *shards[1], epoch=2, shard_id=1)
    buf = io.BytesIO()
    np.savez(buf, X=shards[1][0], y=shards[1][1])
    job = _container.pack({"state_len": len(s0), "epoch": 2, "shard": 1}, s0 + buf.getvalue())
    out = subprocess.run([sys.executable, "-c", _REMOTE], input=job, capture_output=True,
                         timeout=120, check=True).stdout
    assert out == local


@pytest.mark.parametrize("activation", ["relu", "tanh", "gelu"])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
@pytest.mark.parametrize("regression", [False, True])
def test_hand_derived_step_equals_autograd(activation, dropout, regression):
    # train_step computes the gradients in closed form; the module's forward under autograd
    # (the same dropout draws, from a generator in the same state) must give the same loss
    # and the same gradient of every parameter
    import torch

    from groupml.learners._mlp import _build, standardize, train_step
    fam = "mlp_regressor" if regression else "mlp"
    p = LEARNER_FAMILIES[fam].validate_params({"layers": "16,8", "activation": activation, "dropout": dropout})
    net, _ = _build(p, 5)
    net.init_weights(torch.Generator().manual_seed(3))
    rng = np.random.default_rng(4)
    with torch.no_grad():
        net.x_mean.copy_(torch.tensor(rng.normal(size=5), dtype=torch.float64))
        net.x_scale.copy_(torch.tensor(rng.uniform(0.5, 2, size=5), dtype=torch.float64))
    X = torch.tensor(rng.normal(size=(37, 5)), dtype=torch.float64)
    t = torch.tensor(rng.normal(size=37) if regression else rng.integers(0, 2, 37), dtype=torch.float32)
    net.train()
    F = torch.nn.functional
    out = net(X, generator=torch.Generator().manual_seed(9))
    ref_loss = F.mse_loss(out, t) if regression else F.binary_cross_entropy_with_logits(out, t)
    net.zero_grad(set_to_none=True)
    ref_loss.backward()
    ref = [q.grad.clone() for q in net.parameters()]
    net.zero_grad(set_to_none=True)
    xs = standardize(net, X, t, False)[0]       # what train_epoch feeds train_step
    loss = train_step(net, xs, t, regression, torch.Generator().manual_seed(9))
    assert float(loss) == float(ref_loss.detach())   # the same forward pass, bit for bit
    for got, want in zip([q.grad for q in net.parameters()], ref):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_values_beyond_float32_are_refused_before_training():
    # an MLP trains in float32: labels of 1e300 overflowed inside torch (a RuntimeError)
    from groupml.fitting import fit_group
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    with pytest.raises(DataError, match=r"The labels of an MLP must lie within \+-1e\+30 \(it trains in float32\)"):
        fit_group(X, X[:, 0] * 1e300, "mlp_regressor", {"epochs": [1]}, {})
    with pytest.raises(DataError, match=r"The features of an MLP must lie within"):
        fit_group(X * 1e31, (X[:, 0] > 0).astype(float), "mlp", {"epochs": [1]}, {})


def test_network_size_is_capped():
    # widths of 65,536 each passed the per-layer check, and two of them asked torch for 17 GB
    from groupml.learners._mlp import _build
    fam = get_learner_family("mlp")
    with pytest.raises(InvalidParameterError, match=r"must be hidden layers with at most 10,000,000 weights"):
        fam.validate_params({"layers": "65536,65536"})
    with pytest.raises(InvalidParameterError, match=r"at most 50,000,000 weights with 1600 features"):
        _build(fam.validate_params({"layers": "65536"}), 1600)
    # a width too large got the hint for a width too small ("needs at least one unit")
    with pytest.raises(InvalidParameterError) as info:
        fam.validate_params({"layers": [1e308]})
    assert info.value.hint == "Every hidden layer has 1 to 65536 units, e.g. [64, 32]."


# ---------------------------------------------------------------- training states read from tables
def _trained_state(optimizer="adam", **params):
    """run_to_bytes of a config after one epoch: its optimizer holds moments for every parameter."""
    import torch
    from groupml.learners import _mlp

    X, y = _data(200)
    run = _mlp.new_run("mlp", get_learner_family("mlp").validate_params(
        {**FAST, "optimizer": optimizer, **params}), 4, _mlp.merge_stats([_mlp.partial_stats(X, y)], 4))
    _mlp.train_epoch(run, torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32), epoch=0)
    return _mlp.run_to_bytes(run), X, y


def _forge_state(blob, change, header_change=None):
    """``blob`` (a training state) with its torch object changed by ``change`` (in place)."""
    import torch

    header, body = _container.unpack(blob, "state")
    obj = torch.load(io.BytesIO(body), weights_only=True)
    change(obj)
    buf = io.BytesIO()
    torch.save(obj, buf)
    return _container.pack({**header, **(header_change or {})}, buf.getvalue())


def _moments(key, make):
    def change(obj):
        for entry in obj["opt"]["state"].values():
            entry[key] = make(entry[key])
    return change


_STEP_FORGED = """
import io, sys, numpy as np, torch
from groupml.learners import _container, _mlp
from groupml.learners._extfamilies import EXTRA_FAMILIES
blob = sys.stdin.buffer.read()
header, body = _container.unpack(blob, "state")
obj = torch.load(io.BytesIO(body), weights_only=True)
net, opt = _mlp._build(EXTRA_FAMILIES["mlp"].validate_params(header["params"]), 4)
net.load_state_dict(obj["net"])
opt.load_state_dict(obj["opt"])                 # what torch accepts without the check
X = torch.tensor(np.random.default_rng(0).normal(size=(64, 4)), dtype=torch.float32)
_mlp.train_epoch(_mlp.MLPRun(EXTRA_FAMILIES["mlp"], header["params"], 4, net, opt, torch.Generator()), X,
                 (X[:, 0] > 0).float(), epoch=1)
print("stepped")
"""


def test_an_optimizer_moment_smaller_than_its_parameter_crashes_torch_and_is_refused():
    """Torch's optimizer load_state_dict does not compare a moment's shape with its parameter's,
    and its fused Adam step then writes outside the smaller tensor: the process dies (in a
    worker backend, the server restarts every session). run_from_bytes refuses such a state."""
    import subprocess
    import sys
    from groupml.learners import _mlp

    blob, _, _ = _trained_state()
    import torch
    forged = _forge_state(blob, _moments("exp_avg", lambda v: torch.zeros(1)))
    env = {"PYTHONPATH": _mlp.__file__.rsplit("/groupml/", 1)[0], "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", _STEP_FORGED], input=forged, capture_output=True, env=env)
    assert done.returncode < 0, (done.returncode, done.stdout[-200:], done.stderr[-400:])   # killed by a signal
    ok = subprocess.run([sys.executable, "-c", _STEP_FORGED], input=blob, capture_output=True, env=env)
    assert ok.returncode == 0 and ok.stdout.endswith(b"stepped\n"), ok.stderr[-400:]
    with pytest.raises(ModelFormatError, match=r"The mlp training state is invalid: the optimizer's exp_avg of "
                                               r"parameter 0 does not fit it \(shape \(1,\), torch.float32\)"):
        _mlp.run_from_bytes(forged)


def _forgeries():
    import torch
    return [
        (_moments("exp_avg_sq", lambda v: torch.zeros(0)), "exp_avg_sq of parameter 0 does not fit it"),
        (_moments("exp_avg", lambda v: v.double()), r"exp_avg of parameter 0 does not fit it \(shape \(16, 4\), "
                                                    r"torch.float64\)"),
        (_moments("step", lambda v: torch.zeros(3)), "step of parameter 0 does not fit it"),
        (_moments("step", lambda v: torch.tensor(float("nan"))), "step of parameter 0 does not fit it"),
        (lambda o: [e.pop("exp_avg") for e in o["opt"]["state"].values()],
         r"the optimizer state of parameter 0 is not \['exp_avg', 'exp_avg_sq', 'step'\]"),
        (lambda o: o["opt"]["state"].__setitem__(99, {}), "names parameters the network does not have"),
        (lambda o: o["opt"]["param_groups"][0].__setitem__("lr", 5.0), "optimizer settings are not those of its params"),
        (lambda o: o["opt"]["param_groups"][0].__setitem__("betas", torch.zeros(2)), "optimizer settings"),
        (lambda o: o.__setitem__("opt", [1]), "optimizer settings are not those of its params"),
        (lambda o: o.__setitem__("gen", torch.zeros(3, dtype=torch.uint8)), "it does not fit the network: Expected"),
        (lambda o: o["net"].__setitem__("out.weight", torch.zeros(2, 2)), "it does not fit the network: Error"),
        (lambda o: o.__setitem__("extra", 1), "it is not a network, optimizer and generator state"),
    ]


def test_training_states_that_do_not_fit_their_network_are_refused():
    from groupml.learners import _mlp

    blob, X, y = _trained_state()
    assert _mlp.run_from_bytes(blob).epochs_done == 0
    for change, match in _forgeries():
        with pytest.raises(ModelFormatError, match=match) as info:
            _mlp.run_from_bytes(_forge_state(blob, change))
        assert info.value.message.startswith("The mlp training state is invalid: ") and "\n" not in info.value.message
    for header in ({"n_features": "4"}, {"visits": -1}, {"params": None}):
        with pytest.raises(ModelFormatError, match="the header's params, n_features or epoch counts"):
            _mlp.run_from_bytes(_forge_state(blob, lambda o: None, header))
    header, _ = _container.unpack(blob, "state")
    with pytest.raises(ModelFormatError, match="it is not torch's archive format"):
        _mlp.run_from_bytes(_container.pack(header, b"not torch" * 20))


@pytest.mark.parametrize("optimizer, extra", [("adam", {}), ("sgd", {"momentum": 0.5}), ("sgd", {})])
def test_genuine_training_states_load_and_continue_exactly(optimizer, extra):
    import torch
    from groupml.learners import _mlp

    blob, X, y = _trained_state(optimizer, **extra)
    a, b = _mlp.run_from_bytes(blob), _mlp.run_from_bytes(blob)
    Xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    _mlp.train_epoch(a, Xt, yt, epoch=1)
    _mlp.train_epoch(b, Xt, yt, epoch=1)
    assert _same({k: v.numpy() for k, v in a.net.state_dict().items()},
                 {k: v.numpy() for k, v in b.net.state_dict().items()})
    assert _mlp.run_to_bytes(a) == _mlp.run_to_bytes(b)


def test_mlp_states_of_a_checkpoint_are_checked_before_a_resume_uses_them():
    from groupml.executor.baselines import DataParallelMLPTrainer, MTPMLPTrainer
    from groupml.executor.core import check_checkpoint_models
    from groupml.executor.patterns import ShardedMLPTrainer

    blob, _, _ = _trained_state()
    import torch
    forged = _forge_state(blob, _moments("exp_avg", lambda v: torch.zeros(1)))
    for fmt in (ShardedMLPTrainer.CKPT_FORMAT, MTPMLPTrainer.CKPT_FORMAT, DataParallelMLPTrainer.CKPT_FORMAT):
        good = {"format": fmt, "passes": 1, "configs": [{"trial_id": 0, "state": blob},
                                                         {"trial_id": 1, "state": None}], "retired": []}
        check_checkpoint_models({"trainer": good}, 4)
        for where in ("configs", "retired"):
            with pytest.raises(ModelFormatError, match="exp_avg of parameter 0 does not fit it"):
                check_checkpoint_models({"trainer": dict(good, **{where: [{"trial_id": 2, "state": forged}]})}, 4)
        with pytest.raises(PrerequisiteStateError, match="an MLP state is for another feature count"):
            check_checkpoint_models({"trainer": good}, 5)


def test_predicting_with_a_stored_mlp_loads_neither_torch_compiler_nor_dynamo():
    # torch.use_deterministic_algorithms imports torch._inductor, and making an optimizer imports
    # TorchDynamo: 0.75 s and 0.7 s of a new session's first MLP predict, for nothing a
    # prediction uses. groupml sets the same kernel switch without the first and loads a model
    # into a network without an optimizer
    import subprocess
    import sys
    from groupml.learners import _mlp

    Xtr, ytr, Xva, yva = _split(*_data())
    tr = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    tr.add(0, FAST)
    tr.run(1)
    code = ("import sys, numpy as np; from groupml.learners import _mlp, load_model; torch = _mlp.torch_module(); "
            "m = load_model(sys.stdin.buffer.read()); m.predict(np.zeros((1, 4))); "
            "print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(), "
            "torch.get_num_threads(), 'torch._inductor' in sys.modules, 'torch._dynamo' in sys.modules)")
    env = {"PYTHONPATH": _mlp.__file__.rsplit("/groupml/", 1)[0], "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], input=tr.model(0).to_bytes(), capture_output=True, env=env)
    assert done.stdout.decode().split() == ["True", "False", str(_mlp.TORCH_THREADS), "False", "False"], \
        done.stderr[-500:]


def test_decision_values_score_in_eval_mode_whatever_mode_the_net_was_left_in():
    from groupml.learners import _mlp

    Xtr, ytr, Xva, yva = _split(*_data())
    tr = MLPTrainer("mlp", Xtr, ytr, Xva, yva)
    tr.add(0, {**FAST, "dropout": 0.5})
    tr.run(2)
    net = tr.model(0).net
    want = _mlp.decision_values(net, Xva, False)
    net.train()                                       # as an interrupted epoch leaves it: dropout on
    assert np.array_equal(_mlp.decision_values(net, Xva, False), want) and not net.training
    assert not any(m.training for m in net.modules())


def test_features_and_labels_far_from_zero_train_like_centred_ones():
    # inputs were cast to float32 before the mean was taken off (float32 steps by 128 near
    # 1.7e9) and the variance was sxx/n - mean^2: a timestamp-like feature trained a coin flip
    # and a label of 1e8 + sin(x) a constant
    from groupml.fitting import fit_group
    from groupml.learners._mlp import merge_stats, partial_stats
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 6, size=(3000, 1))
    cls = (np.sin(2 * x[:, 0]) + rng.normal(0, 0.1, 3000) > 0).astype(float)
    spec = {"layers": ["32"], "epochs": [30]}
    base = fit_group(x, cls, "mlp", spec, {"metric": "accuracy"})
    far = fit_group(1.7e9 + x, cls, "mlp", spec, {"metric": "accuracy"})      # was 0.53
    assert base.score > 0.95 and far.score > 0.9, (base.score, far.score)      # (another holdout)
    reg = fit_group(x, np.sin(x[:, 0]), "mlp_regressor", spec, {})
    reg_far = fit_group(x, 1e8 + np.sin(x[:, 0]), "mlp_regressor", spec, {})
    assert reg.score < 0.1 and reg_far.score < 1.1 * reg.score, (reg.score, reg_far.score)   # rmse; was 0.73
    # the statistics: to the precision of the data (1e8 + x is x to 1.5e-8), merged over shards as over the whole
    X = 1e8 + rng.normal(size=(1000, 2))
    y = 1e8 + rng.normal(size=1000)
    whole = merge_stats([partial_stats(X, y)], 2)
    parts = merge_stats([partial_stats(X[:300], y[:300]), partial_stats(X[300:0], y[300:0]),
                         partial_stats(X[300:], y[300:])], 2)
    np.testing.assert_allclose(whole["x_scale"], X.std(axis=0), rtol=1e-7)
    np.testing.assert_allclose(whole["y_scale"], y.std(), rtol=1e-7)
    for k in ("x_mean", "x_scale", "y_mean", "y_scale"):
        np.testing.assert_allclose(parts[k], whole[k], rtol=1e-7)
    # a small spread far from zero is still a spread (a cut at 1e-12 x |mean| made 1.7e9 + 0.001 x
    # constant); only what float64 cannot resolve at the mean is
    near = 1.7e9 + 0.001 * rng.normal(size=(500, 1))
    assert merge_stats([partial_stats(near, near[:, 0])], 1)["x_scale"][0] == pytest.approx(near.std(), rel=1e-3)
    flat = np.full((50, 1), 1.7e9)
    assert merge_stats([partial_stats(flat, flat[:, 0])], 1)["x_scale"] == [1.0]


def test_a_model_saved_with_float32_statistics_still_loads():
    # models stored before the statistics became float64 hold float32 buffers
    import torch

    from groupml.fitting import fit_group
    from groupml.learners import load_model
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    fit = fit_group(X, (X[:, 0] > 0).astype(float), "mlp", {"epochs": [2]}, {})
    new = load_model(fit.model)
    old = load_model(fit.model)
    for name in ("x_mean", "x_scale", "y_mean", "y_scale"):
        setattr(old.net, name, getattr(old.net, name).float())
    assert old.net.x_mean.dtype == torch.float32
    again = load_model(old.to_bytes())
    assert again.net.x_mean.dtype == torch.float64
    np.testing.assert_allclose(again.predict_proba(X), new.predict_proba(X), rtol=1e-6)
