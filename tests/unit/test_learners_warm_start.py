"""Warm starts of the GLM trainer: a large group's configurations start from their solution on
a sample of the rows (GLMTrainer._presolve) and reach the cold start's optimum; and the trial
list's one-metric shortcut (GLMTrainer.selected_metric)."""

import numpy as np
import pytest

from groupml.learners import GLMTrainer
from groupml.learners import _glm


def _data(n, d=6, seed=0, family="logistic"):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.exp(rng.normal(size=d)) + rng.normal(size=d) * 3
    w = rng.normal(size=d)
    z = (X - X.mean(0)) / X.std(0) @ w + 0.3
    if family == "linear":
        return X, z + rng.normal(size=n)
    return X, (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float64)


CONFIGS = [{"l2": 0.0}, {"l2": 1e-3, "class_weight": "balanced"}, {"l2": 0.1},
           {"l2": 1e-2, "fit_intercept": False}]


def _fit(X, y, configs, warm, family="logistic", iterations=None):
    tr = GLMTrainer(family, X, y)
    tr.warm_start = warm
    for i, p in enumerate(configs):
        tr.add(i, p)
    tr.run(iterations or 2000)
    return tr


@pytest.mark.parametrize("family", ["logistic", "linear", "svm"])
def test_warm_start_reaches_the_cold_start_optimum(family, monkeypatch):
    monkeypatch.setattr(_glm, "PRESOLVE_ROWS", 400)
    X, y = _data(4000, family=family)
    configs = [dict(p, tol=1e-9, max_iter=2000) for p in CONFIGS
               if family != "linear" or "class_weight" not in p]
    cold, warm = _fit(X, y, configs, False, family), _fit(X, y, configs, True, family)
    for i in range(len(configs)):
        assert warm.status(i) == cold.status(i) == "converged"
        mc, mw = cold.model(i), warm.model(i)
        np.testing.assert_allclose(mw.coef, mc.coef, atol=1e-6, rtol=1e-6)
        assert abs(mw.intercept - mc.intercept) < 1e-6
    if family == "logistic":     # the sample's solve did most of the work (a quadratic needs few anyway)
        assert sum(map(warm.iterations, range(len(configs)))) < sum(map(cold.iterations, range(len(configs))))
        assert warm.passes < cold.passes


def test_warm_start_at_default_tol_keeps_the_validation_metrics(monkeypatch):
    monkeypatch.setattr(_glm, "PRESOLVE_ROWS", 500)
    X, y = _data(6000, seed=3)
    Xv, yv = _data(2000, seed=3)
    got = {}
    for warm in (False, True):
        tr = GLMTrainer("logistic", X, y, Xv, yv)
        tr.warm_start = warm
        for i, p in enumerate(CONFIGS):
            tr.add(i, p)
        tr.run(100)
        got[warm] = (np.array([tr.metrics(i)["accuracy"] for i in range(len(CONFIGS))]), tr.passes)
    assert np.abs(got[True][0] - got[False][0]).max() <= 0.005
    assert got[True][1] < got[False][1]


def test_no_warm_start_for_small_groups_sgd_or_evaluated_configs(monkeypatch):
    monkeypatch.setattr(_glm, "PRESOLVE_ROWS", 400)
    X, y = _data(1000)           # fewer than PRESOLVE_MIN_STEP samples: nothing to gain
    small = _fit(X, y, CONFIGS, True, iterations=1)
    assert all(small.iterations(i) == 1 for i in range(len(CONFIGS)))
    ref = _fit(X, y, CONFIGS, False, iterations=1)
    for i in range(len(CONFIGS)):
        np.testing.assert_array_equal(small.model(i).coef, ref.model(i).coef)
    X, y = _data(4000)
    sgd = [{"solver": "sgd", "lr": 0.05, "max_iter": 2, "seed": 1}]
    np.testing.assert_array_equal(_fit(X, y, sgd, True).model(0).coef, _fit(X, y, sgd, False).model(0).coef)
    # a config added after the first block starts warm; the ones already running do not restart
    tr = _fit(X, y, CONFIGS[:1], True, iterations=2)
    before = tr.model(0).coef.copy()
    tr.add(1, CONFIGS[2])
    tr.run(1)
    assert tr.iterations(0) == 3 and tr.iterations(1) == 1
    assert not np.array_equal(tr.model(0).coef, before)


def test_warm_start_skips_a_sample_with_too_few_of_a_class(monkeypatch):
    monkeypatch.setattr(_glm, "PRESOLVE_ROWS", 400)
    X, y = _data(4000)
    y = np.zeros_like(y)
    y[:40] = 1.0                 # about 4 positives in a sample of every 10th row
    cold, warm = _fit(X, y, CONFIGS[:2], False), _fit(X, y, CONFIGS[:2], True)
    for i in range(2):
        np.testing.assert_array_equal(warm.model(i).coef, cold.model(i).coef)


def test_warm_start_survives_a_checkpoint(monkeypatch):
    """A checkpoint is taken between blocks, after every config's first evaluation: a trainer
    resumed from it continues exactly (no second presolve)."""
    monkeypatch.setattr(_glm, "PRESOLVE_ROWS", 400)
    X, y = _data(4000, seed=5)
    tr = _fit(X, y, CONFIGS, True, iterations=2)
    state = tr.checkpoint_state()
    other = GLMTrainer("logistic", X, y)
    other.warm_start = True
    other.load_checkpoint(state)
    tr.run(5)
    other.run(5)
    for i in range(len(CONFIGS)):
        np.testing.assert_array_equal(other.model(i).coef, tr.model(i).coef)


def test_a_warm_start_that_meets_tol_at_once_is_not_reported_as_learning_nothing():
    from groupml.fitting import solver_warning
    from groupml.learners import GLMModel

    trial = {"status": "converged", "iterations": 0, "params": {"solver": "lbfgs"}}
    warm = GLMModel("logistic", np.array([0.5, -1.0]), 0.2, {})
    zero = GLMModel("logistic", np.zeros(2), 0.0, {})
    assert solver_warning("logistic", trial, warm) is None
    assert solver_warning("logistic", trial, zero).startswith("warning: the selected configuration met tol at zero")


@pytest.mark.parametrize("family,metric", [("logistic", None), ("logistic", "auc"), ("linear", "r2"), ("svm", None)])
def test_selected_metric_equals_that_entry_of_metrics(family, metric):
    X, y = _data(800, family=family)
    Xv, yv = _data(300, seed=1, family=family)
    tr = GLMTrainer(family, X, y, Xv, yv, metric=metric)
    tr.add(0, {"l2": 0.01})
    tr.run(5)
    assert tr.selected_metric(0) == tr.metrics(0)[tr.metric]


def test_a_family_choice_search_hands_the_warm_start_to_its_glm_trainer():
    from groupml.learners._choice import FamilyChoiceTrainer

    X, y = _data(500)
    tr = FamilyChoiceTrainer("logistic", X, y, X[:50], y[:50], metric="accuracy")
    assert tr._trainer_for("logistic").warm_start is False
    tr = FamilyChoiceTrainer("logistic", X, y, X[:50], y[:50], metric="accuracy")
    tr.warm_start = True
    assert tr._trainer_for("logistic").warm_start is True
