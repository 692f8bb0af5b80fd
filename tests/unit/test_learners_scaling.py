"""GLMs on columns of very different scales: the solvers work on standardized columns, the
models keep the user's scale, the penalties do not depend on the units, and ``lr`` never
picks the solver."""

import warnings

import numpy as np
import pytest

from groupml.errors import InvalidParameterError
from groupml.fitting import fit_group
from groupml.learners import GLMTrainer, fit_many, get_family, load_model

# column scales from 1e-3 to 1e4, some far from zero: an unscaled lbfgs stops at max_iter
SCALES = 10.0 ** np.array([-3, 4, 0, 2, -2, 3, 1, -1])
SHIFTS = np.array([0.0, 5e4, 1.0, -300.0, 0.01, 2e3, 0.0, 7.0])
WEIGHTS = np.array([1.5, -1.0, 0.8, 0.6, -0.5, 0.3, 0.0, 0.0])


def _badly_scaled(n, seed):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, WEIGHTS.size))
    p = 1.0 / (1.0 + np.exp(-(Z @ WEIGHTS + 0.3)))
    y = (rng.random(n) < p).astype(np.float64)
    return Z * SCALES + SHIFTS, y


def test_defaults_reach_scaled_logistic_regression_cv_on_badly_scaled_columns():
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = _badly_scaled(40000, seed=11)
    Xt, yt, Xh, yh = X[:20000], y[:20000], X[20000:], y[20000:]
    fit = fit_group(Xt, yt, "logistic", {}, {})
    assert fit.status == "ok"
    assert fit.message is None                      # no "stopped (max_iter)" warning
    (trial,) = fit.trials
    assert trial["status"] == "converged" and trial["iterations"] < 100
    ours = float(np.mean(load_model(fit.model).predict(Xh) == yh))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")             # scikit-learn's FutureWarnings
        sk = make_pipeline(StandardScaler(), LogisticRegressionCV(max_iter=1000)).fit(Xt, yt)
    theirs = float(sk.score(Xh, yh))
    assert theirs > 0.75                            # the data carry signal
    assert ours >= theirs - 0.005


@pytest.mark.parametrize("family", ["logistic", "linear", "svm"])
def test_rescaling_columns_changes_weights_not_predictions(family):
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(1500, 4))
    y = Z @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.3 * rng.normal(size=1500)
    if family != "linear":
        y = (y > 0).astype(np.float64)
    units = np.array([1e-3, 1.0, 1e3, 50.0])
    configs = [{"l2": 0.05, "tol": 1e-10, "max_iter": 1000},
               {"l2": 0.01, "fit_intercept": False, "tol": 1e-10, "max_iter": 1000},
               {"solver": "gd", "lr": 0.5, "l1": 0.02, "max_iter": 300}]
    plain = fit_many(family, Z, y, configs)
    scaled = fit_many(family, Z * units, y, configs)
    for (a, _), (b, _) in zip(plain, scaled):
        np.testing.assert_allclose(b.coef * units, a.coef, atol=1e-6)
        assert b.intercept == pytest.approx(a.intercept, abs=1e-6)
    assert plain[1][0].intercept == 0.0
    # with an intercept, shifting a column moves only the intercept
    shift = np.array([0.0, 1e4, -5.0, 0.0])
    shifted = fit_many(family, Z * units + shift, y, [configs[0], configs[2]])
    for (a, _), (b, _) in zip([plain[0], plain[2]], shifted):
        np.testing.assert_allclose(b.coef * units, a.coef, atol=1e-6)
        assert b.intercept + b.coef @ shift == pytest.approx(a.intercept, abs=1e-6)


def test_models_store_weights_on_the_users_scale():
    X, y = _badly_scaled(3000, seed=5)
    tr = GLMTrainer("logistic", X, y)
    tr.add(0, {"l2": 1e-3})
    tr.run(100)
    m = tr.model(0)
    z = X @ m.coef + m.intercept
    np.testing.assert_allclose(m.decision_function(X), z, rtol=1e-12, atol=1e-12)
    # the standardized weights are the stored ones times the column scales
    np.testing.assert_allclose(tr._configs[0].theta[:-1], m.coef * X.std(axis=0), rtol=1e-9)


def test_a_constant_column_gets_no_weight():
    X, y = _badly_scaled(2000, seed=6)
    X[:, 2] = 1234.5
    (m, _), = fit_many("logistic", X, y, [{"l2": 1e-4}])
    assert abs(m.coef[2]) < 1e-9 and np.all(np.isfinite(m.coef))


def test_lr_with_solver_auto_is_refused_not_a_silent_switch_to_gd():
    fam = get_family("logistic")
    with pytest.raises(InvalidParameterError) as info:
        fam.validate_params({"lr": 0.5})
    e = info.value
    assert e.sqlstate == "22023"
    assert e.message == ("The 'lr' value of model 'logistic' is read only by the 'gd' and 'sgd' solvers, and "
                         "solver 'auto' picks 'lbfgs' here (l1 = 0, a smooth loss); got lr = 0.5")
    assert "Set solver to 'gd'" in e.hint
    assert fam.validate_params({"solver": "gd", "lr": 0.5})["solver"] == "gd"
    assert fam.validate_params({"solver": "sgd", "lr": 0.5})["solver"] == "sgd"
    assert fam.validate_params({"l1": 0.1, "lr": 0.5})["solver"] == "gd"      # l1 needs the proximal step
    with pytest.raises(InvalidParameterError, match="'lr' value of model 'logistic' is read only"):
        fit_group(*_badly_scaled(200, seed=1), "logistic", {"lr": [0.1, 1.0]}, {})


def test_checkpoints_carry_the_standardization_and_refuse_the_unscaled_format():
    from groupml.errors import PrerequisiteStateError

    X, y = _badly_scaled(1500, seed=9)
    a = GLMTrainer("logistic", X, y)
    a.add(0, {"l2": 1e-3})
    a.run(3)
    state = a.checkpoint_state()
    np.testing.assert_array_equal(state["shift"], a.shift)
    np.testing.assert_array_equal(state["scale"], a.scale)
    b = GLMTrainer("logistic", X, y)
    b.load_checkpoint(state)
    a.run(100)
    b.run(100)
    np.testing.assert_array_equal(a.model(0).coef, b.model(0).coef)
    old = dict(state, format=1)                 # weights on the user's scale: not this trainer's state
    with pytest.raises(PrerequisiteStateError):
        GLMTrainer("logistic", X, y).load_checkpoint(old)
    with pytest.raises(PrerequisiteStateError):
        GLMTrainer.from_state(dict(a.state_dict(), format=1), X, y)
