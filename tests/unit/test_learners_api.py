"""Learner families' parameters, metrics, model format and the content-hashed holdout."""

import io
import json
import math
import pickle

import numpy as np
import pytest

from groupml.errors import (ArrayLengthError, FeatureNotSupportedError, InvalidParameterError,
                            ModelFormatError, SearchSpecError, UndefinedObjectError)
from groupml.learners import (FAMILIES, GLMModel, METRICS, fit_many, get_family, get_learner_family,
                              holdout_mask, load_model, register_loader)
from groupml.learners._model import MAGIC, pack_model


# ---------------------------------------------------------------- families and params
def test_families_and_defaults():
    assert sorted(FAMILIES) == ["linear", "logistic", "svm"]
    p = get_family("logistic").validate_params({})
    assert p == {"l2": 0.0, "l1": 0.0, "fit_intercept": True, "class_weight": None,
                 "solver": "lbfgs", "lr": 0.1, "max_iter": 100, "tol": 1e-4,
                 "batch_size": 256, "seed": 0}
    assert get_family("logistic").validate_params({"l1": 0.1})["solver"] == "gd"
    assert get_family("svm").validate_params({"loss": "hinge", "lr": 0.5})["solver"] == "gd"
    assert get_family("logistic").validate_params({"l1": 0.1, "lr": 0.5})["lr"] == 0.5
    assert get_family("linear").validate_params({"l1": 0.1})["solver"] == "gd"
    assert get_family("svm").validate_params({"loss": "hinge"})["solver"] == "gd"
    assert get_family("svm").validate_params({})["loss"] == "squared_hinge"
    assert "class_weight" not in get_family("linear").param_names
    assert get_family("svm").param_names == tuple(sorted(get_family("svm").param_names))
    # JSON integers are accepted for floats and integral floats for ints
    q = get_family("linear").validate_params({"l2": 1, "max_iter": 50.0})
    assert q["l2"] == 1.0 and isinstance(q["max_iter"], int)
    # validating a validated dict is a no-op
    assert get_family("logistic").validate_params(p) == p


def test_unknown_family():
    with pytest.raises(UndefinedObjectError) as e:
        get_family("tree")
    assert e.value.message == "Unknown model family 'tree'"
    assert e.value.hint == "Known model families are linear, logistic, svm."


def test_param_error_messages():
    fam = get_family("logistic")
    with pytest.raises(SearchSpecError) as e:
        fam.validate_params({"alpha": 1})
    assert e.value.message == (
        "Unknown parameter 'alpha' for model 'logistic'; allowed parameters are batch_size, "
        "class_weight, fit_intercept, l1, l2, lr, max_iter, seed, solver, tol")
    assert e.value.hint
    cases = [
        ({"l2": -1}, "The 'l2' value of model 'logistic' must be >= 0; got -1"),
        ({"lr": 0}, "The 'lr' value of model 'logistic' must be > 0; got 0"),
        ({"max_iter": 0}, "The 'max_iter' value of model 'logistic' must be >= 1; got 0"),
        ({"max_iter": 2.5}, "The 'max_iter' value of model 'logistic' must be an integer; got 2.5"),
        ({"fit_intercept": "yes"},
         "The 'fit_intercept' value of model 'logistic' must be true or false; got 'yes'"),
        ({"class_weight": "auto"},
         "The 'class_weight' value of model 'logistic' must be one of null, 'balanced'; "
         "got 'auto'"),
        ({"solver": "newton"}, "The 'solver' value of model 'logistic' must be one of 'auto', "
                               "'lbfgs', 'gd', 'sgd'; got 'newton'"),
        ({"l1": 0.1, "solver": "lbfgs"},
         "The 'solver' value of model 'logistic' must be 'gd' or 'sgd' when l1 > 0; got 'lbfgs'"),
        ({"tol": float("nan")},
         "The 'tol' value of model 'logistic' must be a finite number; got NaN"),
        ({"max_iter": 2 ** 30 + 1}, "The 'max_iter' value of model 'logistic' must be <= 1073741824; "
                                    "got 1073741825"),
        ({"batch_size": 1e12}, "The 'batch_size' value of model 'logistic' must be <= 2147483647; "
                               "got 1000000000000"),
        ({"seed": 2 ** 63}, "The 'seed' value of model 'logistic' must be <= 9223372036854775807; "
                            "got 9223372036854775808"),
    ]
    for params, message in cases:
        with pytest.raises(InvalidParameterError) as e:
            fam.validate_params(params)
        assert e.value.message == message
    # integer hyperparameters that reach a C int (LightGBM) or a loop count are bounded, so a
    # typo gives this message instead of LightGBM's "Check failed" from deep inside training
    bounded = [
        ("lightgbm", {"min_data_in_leaf": 10 ** 12},
         "The 'min_data_in_leaf' value of model 'lightgbm' must be <= 2147483647; got 1000000000000"),
        ("lightgbm", {"num_boost_round": 2 ** 31},
         "The 'num_boost_round' value of model 'lightgbm' must be <= 1073741824; got 2147483648"),
        ("lightgbm", {"max_depth": 2 ** 31},
         "The 'max_depth' value of model 'lightgbm' must be <= 2147483647; got 2147483648"),
        ("mlp", {"epochs": 2 ** 40},
         "The 'epochs' value of model 'mlp' must be <= 1073741824; got 1099511627776"),
    ]
    for name, params, message in bounded:
        with pytest.raises(InvalidParameterError) as e:
            get_learner_family(name).validate_params(params)
        assert e.value.message == message
    with pytest.raises(InvalidParameterError) as e:
        get_family("svm").validate_params({"loss": "hinge", "solver": "lbfgs"})
    assert e.value.message == ("The 'solver' value of model 'svm' must be 'gd' or 'sgd' when "
                               "loss is 'hinge'; got 'lbfgs'")
    with pytest.raises(SearchSpecError):
        get_family("linear").validate_params({"class_weight": "balanced"})
    with pytest.raises(SearchSpecError) as e:
        get_family("linear").validate_params([("l2", 1)])
    assert e.value.message == "The parameters of model 'linear' must be an object; got list"


# ---------------------------------------------------------------- metrics
def test_metrics_hand_computed():
    y = np.array([0.0, 0.0, 1.0, 1.0])
    assert METRICS["auc"](y, np.array([0.1, 0.4, 0.35, 0.8])) == pytest.approx(0.75)
    # ties: positive 0.5 vs negative 0.5 counts one half -> (0.5 + 1 + 1 + 1) / 4
    assert METRICS["auc"](np.array([0.0, 1.0, 0.0, 1.0]),
                          np.array([0.5, 0.5, 0.2, 0.9])) == pytest.approx(0.875)
    assert METRICS["auc"](np.array([0.0, 1.0]), np.array([3.0, 3.0])) == pytest.approx(0.5)
    assert math.isnan(METRICS["auc"](np.ones(3), np.arange(3.0)))
    assert METRICS["accuracy"](y, np.array([-1.0, 0.0, 2.0, -0.5])) == pytest.approx(0.75)
    # p = 0.5 and p = 0.75 for labels 1 and 0: (log 2 + log 4) / 2
    assert METRICS["logloss"](np.array([1.0, 0.0]), np.array([0.0, math.log(3)])) == \
        pytest.approx(1.5 * math.log(2))
    t, z = np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 5.0])
    assert METRICS["mse"](t, z) == pytest.approx(4 / 3)
    assert METRICS["rmse"](t, z) == pytest.approx(math.sqrt(4 / 3))
    assert METRICS["mae"](t, z) == pytest.approx(2 / 3)
    assert METRICS["r2"](t, z) == pytest.approx(1 - 4 / 2)
    assert math.isnan(METRICS["r2"](np.ones(3), z))
    assert math.isnan(METRICS["accuracy"](np.empty(0), np.empty(0)))



def test_logloss_stays_finite_for_huge_margins():
    # margins past exp's range (|z| > 710) give the limit log(1 + e^z) - y z, not inf
    from groupml.learners._metrics import logloss, validation_loss

    assert logloss(np.array([1.0, 0.0]), np.array([800.0, -800.0])) == 0.0
    y, z = np.array([1.0, 0.0, 1.0]), np.array([800.0, -5.0, 3.0])
    want = (0.0 + math.log1p(math.exp(-5)) + math.log1p(math.exp(-3))) / 3
    assert logloss(y, z) == pytest.approx(want) and validation_loss("logloss", y, z) == pytest.approx(want)
    assert logloss(np.array([0.0]), np.array([800.0])) == pytest.approx(800.0)     # confidently wrong


def test_r2_is_minimised_as_one_minus_r2():
    # the search minimises 1 - r2: a perfect fit is loss 0, r2 = -1 is loss 2
    from groupml.learners._metrics import validation_loss

    t = np.array([1.0, 2.0, 3.0])
    assert validation_loss("r2", t, np.array([1.0, 2.0, 5.0])) == pytest.approx(2.0)     # r2 = 1 - 4/2
    assert validation_loss("r2", t, t) == 0.0


def test_extreme_margins_are_stable():
    from groupml.learners._families import ColumnWeights
    fam = get_family("logistic")
    Z = np.array([[800.0, -800.0, 0.0]]).T.copy()
    y = np.array([1.0, 0.0, 1.0])
    f = fam.batch_loss(Z, y, ColumnWeights(np.ones(3), None, 1), [{}],
                       (np.empty_like(Z), np.empty_like(Z)))
    assert f[0] == pytest.approx(math.log(2))
    np.testing.assert_allclose(Z[:, 0], [0.0, 0.0, -0.5], atol=1e-300)


# ---------------------------------------------------------------- models and format
def _fitted(family="logistic"):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] - X[:, 2] > 0).astype(float)
    (model, _), = fit_many(family, X, y, [{"l2": 0.01}])
    return model, X


@pytest.mark.parametrize("family", ["logistic", "svm", "linear"])
def test_round_trip(family):
    model, X = _fitted(family)
    data = model.to_bytes()
    assert data.startswith(MAGIC)
    back = load_model(data)
    assert isinstance(back, GLMModel) and back.family == family
    np.testing.assert_array_equal(back.coef, model.coef)
    assert back.intercept == model.intercept and back.params == model.params
    np.testing.assert_array_equal(back.predict(X), model.predict(X))
    assert load_model(memoryview(data)).family == family


def test_predict_shapes_and_errors():
    model, X = _fitted("logistic")
    z = model.decision_function(X)
    np.testing.assert_array_equal(model.predict(X), (z > 0).astype(int))
    np.testing.assert_allclose(model.predict_proba(X), 1 / (1 + np.exp(-z)))
    assert model.predict(X[0]).shape == (1,)
    with pytest.raises(ArrayLengthError) as e:
        model.predict(np.ones(4))
    assert e.value.message == "The model expects 3 features; got 4"
    svm, _ = _fitted("svm")
    with pytest.raises(FeatureNotSupportedError) as e:
        svm.predict_proba(X)
    assert e.value.hint
    lin, _ = _fitted("linear")
    assert lin.predict(X).dtype == np.float64


def _npz(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_garbage_is_model_format_error():
    model, _ = _fitted()
    good = model.to_bytes()
    header = np.frombuffer(json.dumps({"family": "logistic", "params": {}, "n_features": 2})
                           .encode(), dtype=np.uint8)
    bad_inputs = [
        b"", b"hello world", good[:10], good[:-20], good[:40],
        pickle.dumps(model.coef),
        b"GROUPML\x00" + bytes([2, 3]) + b"glm" + good[12:],          # future version
        pack_model("torch", b"whatever"),                              # unknown kind
        pack_model("glm", b"PK\x03\x04garbage"),
        pack_model("glm", _npz(coef=np.array([1.0, 2.0], dtype=object),
                               intercept=np.array(0.0), header=header)),  # needs pickle
        pack_model("glm", _npz(coef=np.ones(3), intercept=np.array(0.0), header=header)),
        pack_model("glm", _npz(coef=np.ones(2), intercept=np.array(0.0),
                               header=np.frombuffer(b"{not json", dtype=np.uint8))),
        pack_model("glm", _npz(coef=np.ones(2), intercept=np.array(0.0), header=header,
                               extra=np.ones(1))),
        "a string",
    ]
    for data in bad_inputs:
        with pytest.raises(ModelFormatError) as e:
            load_model(data)
        assert e.value.hint


def test_loader_registry_dispatches_by_kind():
    class Dummy:
        family = "dummy"

    register_loader("test-dummy", lambda payload: (Dummy(), payload))
    obj, payload = load_model(pack_model("test-dummy", b"abc"))
    assert isinstance(obj, Dummy) and payload == b"abc"


def test_a_loader_out_of_memory_is_not_a_corrupt_model():
    # MemoryError (and an SPI error with a SQLSTATE) became 'cannot be decoded' (22P03)
    def no_memory(payload):
        raise MemoryError()

    class SpiError(Exception):
        sqlstate = "53100"

    def no_disk(payload):
        raise SpiError("could not extend file")

    def bad_header(payload):       # a loader's own check of a forged header: a corrupt model
        raise InvalidParameterError("The 'lr' value of model 'mlp' must be > 0; got -1")

    register_loader("test-oom", no_memory)
    register_loader("test-disk", no_disk)
    register_loader("test-forged", bad_header)
    with pytest.raises(MemoryError):
        load_model(pack_model("test-oom", b"abc"))
    with pytest.raises(SpiError):
        load_model(pack_model("test-disk", b"abc"))
    with pytest.raises(ModelFormatError):
        load_model(pack_model("test-forged", b"abc"))


# ---------------------------------------------------------------- holdout
def test_holdout_is_order_independent_and_accurate():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(50_000, 6))
    y = (rng.random(50_000) < 0.3).astype(float)
    mask = holdout_mask(X, y, 0.2, seed=1)
    assert mask.dtype == bool
    assert abs(mask.mean() - 0.2) < 4 * math.sqrt(0.2 * 0.8 / 50_000)
    perm = rng.permutation(50_000)
    np.testing.assert_array_equal(holdout_mask(X[perm], y[perm], 0.2, seed=1), mask[perm])
    other = holdout_mask(X, y, 0.2, seed=2)
    assert 0.25 < np.mean(other != mask) < 0.39       # independent draws differ on ~32%
    bigger = holdout_mask(X, y, 0.5, seed=1)
    assert np.all(bigger[mask])                         # nested in the fraction
    from groupml.learners import row_hash
    from groupml.learners._holdout import mask_of_hash
    np.testing.assert_array_equal(mask_of_hash(row_hash(X, y, 1), 0.2), mask)   # one hash, two uses
    # the label takes part in the hash; -0.0 and 0.0 are the same value
    flipped = holdout_mask(X, 1.0 - y, 0.2, seed=1)
    assert np.mean(flipped != mask) > 0.2
    Z = np.zeros((4, 2))
    np.testing.assert_array_equal(holdout_mask(Z, np.zeros(4), 0.5),
                                  holdout_mask(-Z, -np.zeros(4), 0.5))


def test_copies_of_a_row_are_split_one_by_one():
    # hashing content alone put every copy of a row on one side: a group of few distinct rows
    # lost whole cells to validation (a 500-row group of two classes came out "too small")
    from groupml.fitting import fit_group
    from groupml.learners._holdout import _content_hash, row_hash

    rng = np.random.default_rng(5)
    cells = np.array([[0, 0, 0], [0, 1, 1], [1, 0, 0], [1, 1, 1]], dtype=float)   # (f1, f2, y)
    rows = cells[rng.integers(0, 4, size=4000)]
    X, y = rows[:, :2], rows[:, 2]
    mask = holdout_mask(X, y, 0.2, seed=3)
    for c in cells:
        in_cell = (rows == c).all(axis=1)
        share = mask[in_cell].mean()
        assert abs(share - 0.2) < 4 * math.sqrt(0.2 * 0.8 / in_cell.sum()), (c, share)
    perm = rng.permutation(4000)     # copies are interchangeable: each cell keeps its count
    pmask = holdout_mask(X[perm], y[perm], 0.2, seed=3)
    for c in cells:
        assert pmask[(rows[perm] == c).all(axis=1)].sum() == mask[(rows == c).all(axis=1)].sum()
    # rows that occur once keep the content hash: splits of such data are unchanged
    U = rng.normal(size=(1000, 3))
    np.testing.assert_array_equal(row_hash(U, U[:, 0], 7), _content_hash(U, U[:, 0], 7))
    i = np.arange(500)
    fit = fit_group(np.tile([1.0, 0.0], (500, 1)), (i % 5 != 0).astype(float), "logistic", {}, {})
    assert fit.status == "ok" and 60 < fit.n_validation < 140, (fit.status, fit.n_validation)



def test_the_order_returned_with_the_hash_sorts_the_copy_numbered_hash():
    # row_hash_and_order's order sorts the final hashes (copies renumbered), not the content hashes
    from groupml.learners._holdout import row_hash, row_hash_and_order

    X = np.array([[1.0], [1.0], [1.0], [2.0], [3.0], [1.0], [2.0], [4.0]])
    y = np.array([0, 0, 0, 1, 1, 0, 1, 1.0])
    h, order = row_hash_and_order(X, y, 0)
    np.testing.assert_array_equal(h, row_hash(X, y, 0))
    np.testing.assert_array_equal(order, np.argsort(row_hash(X, y, 0), kind="stable"))
    assert np.all(h[order][1:] > h[order][:-1])        # every copy got a hash of its own, in sorted order


def test_the_content_hash_is_the_same_in_blocks_of_rows():
    # a column at a time over all rows, as the hash is defined, against the blocked computation
    # (every block takes every column in turn), across block boundaries
    from groupml.learners import _holdout
    from groupml.learners._holdout import _GOLDEN, _MASK, _content_hash, _splitmix64_scalar

    def by_columns(X, y, seed):
        state = _splitmix64_scalar(seed & _MASK)
        h = np.full(X.shape[0], state, dtype=np.uint64)
        for j in range(X.shape[1] + 1):
            col = (X[:, j] if j < X.shape[1] else y) + 0.0
            state = _splitmix64_scalar(state)
            h ^= col.view(np.uint64) * np.uint64(state | 1)
            h += np.uint64(_GOLDEN)
            for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, None)):
                h ^= h >> np.uint64(shift)
                if mult is not None:
                    h *= np.uint64(mult)
        return h

    rng = np.random.default_rng(8)
    for n in (0, 1, _holdout.HASH_BLOCK_ROWS - 1, 2 * _holdout.HASH_BLOCK_ROWS + 5):
        X = rng.normal(size=(n, 3))
        X[::5, 1] = -0.0
        y = (rng.random(n) < 0.5).astype(float)
        for seed in (0, 99):
            np.testing.assert_array_equal(_content_hash(X, y, seed), by_columns(X, y, seed))


def test_holdout_validation():
    X, y = np.ones((3, 2)), np.ones(3)
    for bad in (0, 1, -0.1, 1.5):
        with pytest.raises(InvalidParameterError) as e:
            holdout_mask(X, y, bad)
        assert "must be" in e.value.message
    with pytest.raises(InvalidParameterError) as e:
        holdout_mask(X, y, 1)
    assert e.value.message == "The 'fraction' value of holdout must be < 1; got 1"
    with pytest.raises(ArrayLengthError):
        holdout_mask(X, np.ones(2), 0.5)
