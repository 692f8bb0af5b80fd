"""Bounds and cancel points that keep one call from exhausting a backend (under an
address-space limit each case below would grow a backend without honouring cancel, and
LightGBM's std::bad_alloc abort would restart the server)."""

import numpy as np
import pytest

from groupml.errors import InvalidParameterError
from groupml.learners import _mlp, get_learner_family, make_trainer


class Stop(Exception):
    pass


def _counting(limit):
    calls = []

    def check():
        calls.append(1)
        if len(calls) >= limit:
            raise Stop()
    return check, calls


def _data(n=2000, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    return X, (X[:, 0] + 0.3 * rng.standard_normal(n) > 0).astype(float)


def test_lightgbm_total_leaves_are_bounded():
    fam = get_learner_family("lightgbm")
    with pytest.raises(InvalidParameterError) as info:
        fam.validate_params({"num_boost_round": 1_000_000})
    assert info.value.message == (
        "The 'num_boost_round' value of model 'lightgbm' must be <= 129032 with num_leaves 31 (the trees' leaves, "
        "num_boost_round x num_leaves = 31000000, must stay <= 4000000: they bound the model's memory); got 1000000")
    assert fam.validate_params({"num_boost_round": 129032})["num_boost_round"] == 129032
    with pytest.raises(InvalidParameterError):
        fam.validate_params({"num_boost_round": 31, "num_leaves": 131072})


def test_lightgbm_checks_for_cancel_within_a_block(monkeypatch):
    # a block of a million rounds used to be checked only at its end; now at most every
    # CHECK_EVERY_S (0 here: every round)
    from groupml.learners import _lgbm

    monkeypatch.setattr(_lgbm, "CHECK_EVERY_S", 0.0)
    X, y = _data()
    tr = make_trainer("lightgbm", X[:1600], y[:1600], X[1600:], y[1600:])
    tr.add(0, {"num_boost_round": 1000, "num_leaves": 7})
    tr.interrupt_check, calls = _counting(5)
    with pytest.raises(Stop):
        tr.run(1000)
    assert len(calls) == 5 and tr.passes == 5


def test_an_mlp_epoch_checks_for_cancel_every_64_batches():
    X, y = _data()
    tr = make_trainer("mlp", X[:1600], y[:1600], X[1600:], y[1600:])
    tr.add(0, {"layers": [8], "batch_size": 1, "epochs": 1})
    tr.interrupt_check, calls = _counting(3)
    with pytest.raises(Stop):
        tr.run(1)                                   # one epoch = 1,600 batches
    assert len(calls) == 3 and tr.passes == 0       # stopped inside the first epoch


def test_mlp_batch_activations_are_bounded():
    fam = get_learner_family("mlp")
    layers = [65536, 1] * 7 + [65536]
    with pytest.raises(InvalidParameterError) as info:
        fam.validate_params({"layers": layers, "batch_size": 256})
    assert info.value.message.startswith("The 'batch_size' value of model 'mlp' must be <= 15 with 524295 hidden "
                                         "units (batch_size x hidden units = 134219520, ")
    assert fam.validate_params({"layers": layers, "batch_size": 15})["batch_size"] == 15


def test_decision_values_in_chunks_equal_one_pass(monkeypatch):
    X, y = _data(3000)
    tr = make_trainer("mlp", X[:2400], y[:2400], X[2400:], y[2400:])
    tr.add(0, {"layers": [16, 8], "epochs": 2})
    tr.run(2)
    net = tr._runs[0].net
    whole = _mlp.decision_values(net, X, False)
    monkeypatch.setattr(_mlp, "DECISION_CHUNK_VALUES", 16 * 100)       # 100 rows per chunk
    np.testing.assert_allclose(_mlp.decision_values(net, X, False), whole, rtol=1e-6, atol=1e-6)
    assert _mlp.decision_values(net, X[:0], False).shape == (0,)
