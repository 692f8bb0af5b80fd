"""Epoch checkpoints: the safe codec, and searches resumed from any block end as uninterrupted."""

import io

import numpy as np
import pytest

from groupml.errors import ModelFormatError, PrerequisiteStateError
from groupml.executor.checkpoint import decode, encode, fingerprint
from groupml.fitting import plan_group, search_and_select, validate_request
from groupml.learners import make_trainer


def test_codec_round_trip_keeps_arrays_bytes_and_non_finite_floats():
    tree = {"a": np.arange(6, dtype=np.float64).reshape(2, 3), "empty": np.empty((0, 4)),
            "i": np.array([1, 2], dtype=np.int64), "blob": b"\x00state\xff", "nan": float("nan"),
            "inf": [float("inf"), -np.inf, 1.5, np.float64(2.5)], "n": np.int64(7), "ok": np.bool_(True),
            "nested": [{"s": "x", "none": None, "arr": np.array([np.nan, 1e-300])}]}
    back = decode(encode(tree))
    assert np.array_equal(back["a"], tree["a"]) and back["a"].dtype == np.float64
    assert back["empty"].shape == (0, 4)
    assert back["i"].dtype == np.int64 and back["i"].tolist() == [1, 2]
    assert back["blob"] == b"\x00state\xff"
    assert np.isnan(back["nan"])
    assert back["inf"] == [float("inf"), float("-inf"), 1.5, 2.5]
    assert back["n"] == 7 and back["ok"] is True
    assert back["nested"][0]["s"] == "x" and back["nested"][0]["none"] is None
    assert np.isnan(back["nested"][0]["arr"][0]) and back["nested"][0]["arr"][1] == 1e-300


def test_codec_refuses_what_it_cannot_store_safely():
    with pytest.raises(TypeError):
        encode({"x": np.array([object()], dtype=object)})
    with pytest.raises(TypeError):
        encode({1: "int keys would come back as strings"})
    with pytest.raises(TypeError):
        encode({"$npz": "a0"})
    with pytest.raises(TypeError):
        encode({"x": {1, 2}})


def test_decode_rejects_garbage_and_pickled_arrays():
    with pytest.raises(ModelFormatError):
        decode(b"not a checkpoint")
    blob = encode({"x": np.zeros(2)})
    with pytest.raises(ModelFormatError):
        decode(blob[:-20])                                    # truncated npz body
    # a body whose array needs unpickling is refused (np.load with allow_pickle=False)
    from groupml.learners import _container
    buf = io.BytesIO()
    np.savez(buf, a0=np.array([{"evil": 1}], dtype=object))
    forged = _container.pack({"format": "groupml-checkpoint", "version": 1, "tree": {"x": {"$npz": "a0"}}},
                             buf.getvalue())
    with pytest.raises(ModelFormatError):
        decode(forged)


def test_an_array_header_claiming_more_memory_than_exists_is_a_damaged_checkpoint():
    # numpy allocates the array a .npy header declares before it reads the data: a header
    # altered to a huge shape raised MemoryError, which a resume did not take for damage
    import zipfile
    from groupml.learners import _container

    header, body = _container.unpack(encode({"w": np.zeros(4)}), "checkpoint")
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        (name,) = z.namelist()
        raw = z.read(name)
    size = int.from_bytes(raw[8:10], "little")                      # .npy format 1.0: header length
    npy_header = raw[10:10 + size].decode("latin1").replace("(4,)", "(10000000000000,)")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(name, raw[:10] + npy_header.rstrip().ljust(size - 1).encode("latin1") + b"\n" + raw[10 + size:])
    with pytest.raises(ModelFormatError, match="corrupt array body: Unable to allocate"):
        decode(_container.pack(header, out.getvalue()))


def test_fingerprint_ignores_the_shard_rows_for_glms_only():
    one = [(0, 0, 100, None)]
    two = [(0, 0, 60, None), (1, 60, 40, None)]
    kw = dict(model="logistic", search={"l2": [0.1]}, fit_options={})
    assert fingerprint(pattern="algebraic", mode="shards", shards=one, **kw) == \
        fingerprint(pattern="algebraic", mode="shards", shards=two, **kw)
    assert fingerprint(pattern="algebraic", mode="shards", shards=one, **kw) != \
        fingerprint(pattern="algebraic", mode="configs", shards=one, **kw)       # MTP: another schedule
    kw["model"] = "mlp"
    assert fingerprint(pattern="sequential", mode="shards", shards=one, **kw) != \
        fingerprint(pattern="sequential", mode="shards", shards=two, **kw)
    assert fingerprint(pattern="algebraic", mode="shards", shards=one, model="logistic", search={"l2": [0.1]},
                       fit_options={}) != \
        fingerprint(pattern="algebraic", mode="shards", shards=one, model="logistic", search={"l2": [0.2]},
                    fit_options={})


def _data(seed=0, n=600, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + rng.normal(size=n) > 0).astype(float)
    Xv = rng.normal(size=(150, d))
    yv = (Xv @ rng.normal(size=d) > 0).astype(float)
    return X, y, Xv, yv


def _without_seconds(res):
    return [{k: v for k, v in t.items() if k != "seconds"} for t in res.trials]


@pytest.mark.parametrize("search", [
    {"l2": [0.1, 0.01, 0.001], "class_weight": [None, "balanced"], "max_iter": 60, "tol": 1e-12,
     "epoch_iters": 3},
    {"method": "hyperband", "space": {"l2": {"loguniform": [1e-4, 1]}}, "max_epochs": 9, "epoch_iters": 2,
     "seed": 3},
    {"method": "random", "n_trials": 6, "slots": 2, "seed": 1, "epoch_iters": 4,
     "space": {"l2": {"loguniform": [1e-4, 1]}, "max_iter": [50], "solver": ["lbfgs", "gd"], "lr": [0.5]},
     "early_stopping": {"partial_iters": 8, "epsilon": 0.001}},
    {"epoch_iters": 3},        # no dimensions: one configuration, the learner's defaults
])
def test_a_search_resumed_from_any_block_equals_the_uninterrupted_one(search):
    X, y, Xv, yv = _data()
    family, spec, _ = validate_request("logistic", search, {})
    plan = plan_group(spec, family, X.shape[0], X.shape[1])
    base = dict(family=family.name, n_skipped=0, n_features=X.shape[1], n_train=X.shape[0], n_validation=150)
    saved = []
    full = search_and_select(make_trainer("logistic", X, y, Xv, yv), spec, plan, base,
                             checkpoint=lambda e, state: saved.append((e.block, encode(state))))
    assert [b for b, _ in saved] == list(range(1, len(saved) + 1)) and len(saved) >= 3
    for block, blob in saved[:-1]:
        state = decode(blob)                        # what a resumed run reads from the catalog
        assert state["search"]["blocks"] == block
        again = search_and_select(make_trainer("logistic", X, y, Xv, yv), spec, plan, base, resume=state)
        assert again.model == full.model, block     # bit for bit
        assert again.score == full.score and again.params == full.params
        assert _without_seconds(again) == _without_seconds(full)
        assert again.passes == full.passes and again.mean_batch == full.mean_batch


def test_a_checkpoint_of_another_trainer_is_refused():
    X, y, Xv, yv = _data()
    family, spec, _ = validate_request("logistic", {"l2": [0.1], "epoch_iters": 2}, {})
    plan = plan_group(spec, family, X.shape[0], X.shape[1])
    base = dict(family=family.name, n_skipped=0, n_features=5, n_train=600, n_validation=150)
    saved = []
    search_and_select(make_trainer("logistic", X, y, Xv, yv), spec, plan, base,
                      checkpoint=lambda e, state: saved.append(state))
    state = decode(encode(saved[0]))
    other = make_trainer("logistic", X, y, Xv, yv, metric="auc")
    with pytest.raises(PrerequisiteStateError):
        other.load_checkpoint(state["trainer"])
    state["trainer"]["configs"][0]["theta"] = np.zeros(3)
    with pytest.raises(PrerequisiteStateError):
        make_trainer("logistic", X, y, Xv, yv).load_checkpoint(state["trainer"])


def test_lightgbm_texts_of_a_checkpoint_are_checked_before_a_resume_loads_them():
    from groupml.errors import ModelFormatError
    from groupml.executor.core import check_checkpoint_models
    from groupml.executor.patterns import ShardedLGBMTrainer

    import lightgbm as lgb
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    good = lgb.train({"objective": "binary", "verbose": -1, "num_leaves": 4}, lgb.Dataset(X, (X[:, 0] > 0) * 1.0),
                     num_boost_round=3).model_to_string().encode()
    lgbm_state = {"format": ShardedLGBMTrainer.CKPT_FORMAT, "passes": 1, "jobs": 1,
                  "configs": [{"trial_id": 0, "text": good}, {"trial_id": 1, "text": None}], "retired": []}
    check_checkpoint_models({"trainer": lgbm_state}, 3)                      # loads and predicts in a child
    # states of other trainers hold no LightGBM text; a bytes field there is not a model
    check_checkpoint_models({"trainer": {"format": "mlp-dp-1", "configs": [{"text": b"junk"}]}}, 3)
    check_checkpoint_models({"search": {}}, 3)
    for where in ("configs", "retired"):
        bad = dict(lgbm_state, **{where: [{"trial_id": 2, "text": b"tree\nversion=v4\nnot a model"}]})
        with pytest.raises(ModelFormatError, match="The lightgbm model is damaged"):
            check_checkpoint_models({"trainer": bad}, 3)
    # the child also checks the feature count of a text it has not seen (texts that passed are
    # trusted by their SHA-256: they do not crash LightGBM, and predict checks the width)
    other = lgb.train({"objective": "binary", "verbose": -1, "num_leaves": 4}, lgb.Dataset(X, (X[:, 1] > 0) * 1.0),
                      num_boost_round=2).model_to_string().encode()
    with pytest.raises(ModelFormatError, match="n_features does not match the trees"):
        check_checkpoint_models({"trainer": dict(lgbm_state, configs=[{"trial_id": 0, "text": other}])}, 4)
