"""Batched GLM solvers: agreement with scikit-learn, batched == alone, join/leave."""

import math

import numpy as np
import pytest
from sklearn.linear_model import Lasso, LinearRegression, LogisticRegression, Ridge
from sklearn.svm import LinearSVC

from groupml.engine import Trainer
from groupml.errors import DataError, InvalidParameterError, UndefinedObjectError
from groupml.learners import GLMTrainer, fit_many

TIGHT = {"tol": 1e-10, "max_iter": 2000}


def _data(n=600, d=4, seed=0, imbalance=0.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    logits = X @ w + 0.4 - imbalance
    y01 = (rng.random(n) < 1.0 / (1.0 + np.exp(-logits))).astype(np.float64)
    yreal = X @ w + 0.7 + 0.5 * rng.normal(size=n)
    return X, y01, yreal


def _standardized(X, center=True):
    """X on the scale the penalties apply to (population standard deviation, as StandardScaler),
    and a function taking weights fitted there back to X's scale."""
    mu = X.mean(axis=0) if center else np.zeros(X.shape[1])
    s = X.std(axis=0)

    def back(coef, intercept=0.0):
        w = np.asarray(coef) / s
        return w, float(intercept) - float(mu @ w)
    return (X - mu) / s, back


#: tol of a config whose passes run in float32 (binary families) and of one in float64
PASS_TOLS = {"float32": 1e-4, "float64": 1e-6}


def _pass_rtol(family, dtype):
    """Relative agreement of two summation orders of one pass: float64 passes agree to about
    1e-12 (the same numbers in another order); float32 ones (binary families, tol >= 1e-5) to
    about 1e-6, while their sums accumulate in float64."""
    return 1e-6 if family != "linear" and dtype == "float32" else 1e-12


def _assert_same_pass(f, G, f_ref, G_ref, rtol):
    """Objectives within ``rtol``; gradients within 100 * rtol, or absolutely within rtol
    (float32: 1e-6, a tenth of the smallest tol a float32 pass serves) or 1e-14 (float64)."""
    np.testing.assert_allclose(f, f_ref, rtol=rtol, atol=0)
    np.testing.assert_allclose(G, G_ref, rtol=100 * rtol, atol=rtol if rtol > 1e-9 else 1e-14)


# ---------------------------------------------------------------- scikit-learn agreement
@pytest.mark.parametrize("class_weight", [None, "balanced"])
def test_logistic_matches_sklearn(class_weight):
    # the penalty applies to the standardized weights: scikit-learn's fit of the scaled columns
    X, y, _ = _data(imbalance=1.5)
    X = X * np.array([1.0, 30.0, 0.02, 5.0]) + np.array([0.0, 100.0, -3.0, 0.5])
    n, l2 = X.shape[0], 0.01
    (model, _), = fit_many("logistic", X, y, [{"l2": l2, "class_weight": class_weight, **TIGHT}])
    Xs, back = _standardized(X)
    sk = LogisticRegression(C=1.0 / (n * l2), class_weight=class_weight, tol=1e-12,
                            max_iter=10000).fit(Xs, y)
    coef, intercept = back(sk.coef_[0], sk.intercept_[0])
    np.testing.assert_allclose(model.coef * X.std(axis=0), coef * X.std(axis=0), atol=1e-4)
    assert abs(model.intercept - intercept) < 1e-3


def test_ridge_and_least_squares_match_sklearn():
    X, _, y = _data()
    n, l2 = X.shape[0], 0.05
    (ridge, _), (ols, _) = fit_many("linear", X, y, [{"l2": l2, **TIGHT}, {"l2": 0.0, **TIGHT}])
    # (1/n) sum (y-z)^2/2 + (l2/2)|v|^2 on the standardized columns, times 2n:
    # sum (y-z)^2 + n*l2 |v|^2 -> alpha = n*l2
    Xs, back = _standardized(X)
    sk = Ridge(alpha=n * l2).fit(Xs, y)
    coef, intercept = back(sk.coef_, sk.intercept_)
    np.testing.assert_allclose(ridge.coef, coef, atol=1e-4)
    assert abs(ridge.intercept - intercept) < 1e-4
    sk = LinearRegression().fit(X, y)
    np.testing.assert_allclose(ols.coef, sk.coef_, atol=1e-4)
    assert abs(ols.intercept - sk.intercept_) < 1e-4


def test_svm_squared_hinge_matches_linearsvc():
    X, y, _ = _data()
    n, l2 = X.shape[0], 0.02
    (model, _), = fit_many("svm", X, y, [{"l2": l2, "fit_intercept": False, **TIGHT}])
    Xs, back = _standardized(X, center=False)      # without an intercept: scaled, not centred
    sk = LinearSVC(C=1.0 / (n * l2), loss="squared_hinge", dual=False, fit_intercept=False,
                   tol=1e-12, max_iter=100000).fit(Xs, y)
    np.testing.assert_allclose(model.coef, back(sk.coef_[0])[0], atol=1e-4)
    assert model.intercept == 0.0


def test_l1_proximal_gd_matches_lasso():
    X, _, y = _data()
    (model, _), = fit_many("linear", X, y, [{"l1": 0.3, "solver": "gd", "lr": 0.5,
                                             "tol": 1e-10, "max_iter": 20000}])
    # (1/n) sum (y-z)^2/2 + l1 |v|_1 on the standardized columns is exactly Lasso's
    # objective there with alpha = l1
    Xs, back = _standardized(X)
    sk = Lasso(alpha=0.3, tol=1e-12, max_iter=100000).fit(Xs, y)
    np.testing.assert_allclose(model.coef, back(sk.coef_)[0], atol=1e-4)
    assert np.count_nonzero(model.coef == 0.0) == np.count_nonzero(sk.coef_ == 0.0)


def test_hinge_subgradient_reduces_objective():
    X, y, _ = _data()
    tr = GLMTrainer("svm", X, y)
    tr.add(0, {"loss": "hinge", "lr": 0.05, "max_iter": 200, "l2": 0.01})
    tr.run(200)
    assert tr.params(0)["solver"] == "gd"
    assert tr.metrics(0)["accuracy"] > 0.75


# ---------------------------------------------------------------- batched == alone
MIXED_LBFGS = [
    {"l2": 0.0, **TIGHT},
    {"l2": 1e-3, **TIGHT},
    {"l2": 0.1, "class_weight": "balanced", **TIGHT},
    {"l2": 0.01, "fit_intercept": False, **TIGHT},
    {"l2": 1.0, "class_weight": "balanced", "fit_intercept": False, **TIGHT},
]
MIXED_GD = [
    {"solver": "gd", "lr": 0.5, "max_iter": 60, "l2": 0.01},
    {"solver": "gd", "lr": 0.1, "max_iter": 40, "class_weight": "balanced"},
    {"solver": "gd", "lr": 1.0, "max_iter": 80, "l1": 0.01, "fit_intercept": False},
]


def _alone(family, X, y, params, iterations=None):
    tr = GLMTrainer(family, X, y)
    tr.add(0, params)
    tr.run(iterations or params.get("max_iter", 100))
    return tr.model(0)


@pytest.mark.parametrize("family", ["logistic", "svm", "linear"])
def test_batched_equals_alone(family):
    X, y01, yreal = _data(imbalance=1.0)
    y = yreal if family == "linear" else y01
    configs = [p for p in MIXED_LBFGS + MIXED_GD
               if family != "linear" or "class_weight" not in p]
    batched = fit_many(family, X, y, configs)
    for params, (model, _) in zip(configs, batched):
        alone = _alone(family, X, y, params)
        np.testing.assert_allclose(model.coef, alone.coef, atol=1e-6, rtol=0)
        assert abs(model.intercept - alone.intercept) < 1e-6


@pytest.mark.parametrize("dtype", sorted(PASS_TOLS))
@pytest.mark.parametrize("family", ["logistic", "svm", "linear"])
def test_wide_blocks_match_the_usual_orientation(family, dtype, monkeypatch):
    """Wide blocks (d * k >= WIDE_WORK) compute Z^T = W^T X^T and G^T = R^T X: the same
    objective and gradient as the usual orientation, for weighted and hinge columns too."""
    from groupml.learners import _glm

    X, y01, yreal = _data(n=900, d=240, seed=4, imbalance=1.0)
    y = yreal if family == "linear" else y01
    tr = GLMTrainer(family, X, y)
    k = 20
    rtol = _pass_rtol(family, dtype)
    for j in range(k):
        params = {"l2": 1e-3 * j, "tol": PASS_TOLS[dtype]}
        if family != "linear" and j % 3 == 1:
            params["class_weight"] = "balanced"
        if family == "svm" and j % 4 == 2:
            params.update(loss="hinge", solver="gd")
        tr.add(j, params)
    cfgs = list(tr._configs.values())
    d = X.shape[1]
    assert d >= _glm.WIDE_FEATURES and d * k >= _glm.WIDE_WORK
    Theta = np.random.default_rng(1).normal(scale=0.1, size=(d + 1, k))
    f_wide, G_wide = tr._evaluate(Theta, cfgs)
    rows = np.arange(0, X.shape[0], 3)
    f_wide_rows, G_wide_rows = tr._evaluate(Theta, cfgs, rows)
    monkeypatch.setattr(_glm, "WIDE_FEATURES", 10 ** 9)
    f, G = tr._evaluate(Theta, cfgs)
    f_rows, G_rows = tr._evaluate(Theta, cfgs, rows)
    _assert_same_pass(f_wide, G_wide, f, G, rtol)
    _assert_same_pass(f_wide_rows, G_wide_rows, f_rows, G_rows, rtol)


def test_wide_batch_equals_alone():
    X, y, _ = _data(n=700, d=220, seed=5, imbalance=0.5)
    configs = [{"l2": 10.0 ** -j, "max_iter": 25, "tol": 1e-12,
                "class_weight": "balanced" if j % 2 else None} for j in range(20)]
    batched = fit_many("logistic", X, y, configs)
    for j in (0, 7, 19):
        alone = _alone("logistic", X, y, configs[j])
        np.testing.assert_allclose(batched[j][0].coef, alone.coef, atol=1e-6, rtol=0)
        assert abs(batched[j][0].intercept - alone.intercept) < 1e-6


def test_sgd_batched_equals_alone_and_is_seeded():
    X, y, _ = _data()
    configs = [{"solver": "sgd", "lr": 0.1, "batch_size": 32, "max_iter": 5, "seed": 3},
               {"solver": "sgd", "lr": 0.3, "batch_size": 32, "max_iter": 4, "seed": 3, "l2": 0.01},
               {"solver": "sgd", "lr": 0.1, "batch_size": 50, "max_iter": 5, "seed": 9}]
    batched = fit_many("logistic", X, y, configs)
    for params, (model, _) in zip(configs, batched):
        np.testing.assert_allclose(model.coef, _alone("logistic", X, y, params).coef,
                                   atol=1e-10, rtol=0)
    other_seed = _alone("logistic", X, y, dict(configs[0], seed=4))
    assert np.abs(other_seed.coef - batched[0][0].coef).max() > 1e-6


def _sgd_reference(X, y, *, lr, l1, l2, batch_size, seed, epochs):
    """Proximal mini-batch SGD on the logistic loss, written out: each epoch visits the rows in
    the order of default_rng([seed, epoch]), each batch in row order; after every step the
    weights (not the intercept) are soft-thresholded by lr * l1. Row order: the trainer keeps
    a classification group's rows sorted by label (stable), so the permutation indexes those.
    The steps are taken on the standardized columns; returns the weights on X's scale."""
    order = np.argsort(y, kind="stable")
    X, back = _standardized(X[order])
    y = y[order]
    n, d = X.shape
    w, b = np.zeros(d), 0.0
    for e in range(epochs):
        perm = np.random.default_rng([seed, e]).permutation(n)
        for start in range(0, n, batch_size):
            rows = np.sort(perm[start:start + batch_size])
            r = 1.0 / (1.0 + np.exp(-(X[rows] @ w + b))) - y[rows]
            gw = X[rows].T @ r / len(rows) + l2 * w
            gb = r.mean()
            w, b = w - lr * gw, b - lr * gb
            w = np.sign(w) * np.maximum(np.abs(w) - lr * l1, 0.0)
    return back(w, b)


def test_sgd_with_l1_equals_the_written_out_proximal_sgd():
    # a new row order every epoch, and a soft-threshold of lr * l1 after every step
    X, y, _ = _data(n=300, d=6, seed=4)
    params = {"solver": "sgd", "lr": 0.2, "l1": 0.02, "l2": 0.01, "batch_size": 32, "seed": 5, "max_iter": 3}
    model = _alone("logistic", X, y, params)
    w, b = _sgd_reference(X, y, lr=0.2, l1=0.02, l2=0.01, batch_size=32, seed=5, epochs=3)
    np.testing.assert_allclose(model.coef, w, atol=1e-10, rtol=0)
    assert abs(model.intercept - b) < 1e-10
    assert 0 < np.count_nonzero(w == 0.0) < 6          # the threshold zeroes some weights, not all


def test_l1_gd_converges_only_when_the_gradient_mapping_is_within_tol():
    # proximal gd stops on |theta - prox(theta - lr g)| / lr <= tol: at a small lr the step
    # itself is tiny long before the mapping is
    X, _, y = _data(n=400, d=5, seed=6)
    lr, l1, tol = 0.005, 0.05, 1e-3
    tr = GLMTrainer("linear", X, y)
    tr.add(0, {"solver": "gd", "lr": lr, "l1": l1, "tol": tol, "max_iter": 20000})
    tr.run(20000)
    assert tr.status(0) == "converged"
    m = tr.model(0)
    r = X @ m.coef + m.intercept - y
    Xs, _ = _standardized(X)          # the mapping of the standardized weights v = w * scale
    v = m.coef * X.std(axis=0)
    gw, gb = Xs.T @ r / len(y), r.mean()
    stepped = v - lr * gw
    prox = np.sign(stepped) * np.maximum(np.abs(stepped) - lr * l1, 0.0)
    mapping = max(np.max(np.abs(v - prox)), abs(lr * gb)) / lr
    assert mapping <= tol * (1 + 1e-9)


def test_lbfgs_keeps_ten_curvature_pairs_per_config():
    X, y, _ = _data(n=500, d=8, seed=7)
    tr = GLMTrainer("logistic", X, y)
    tr.add(0, {"l2": 1e-4, **TIGHT})
    tr.add(1, {"l2": 1e-4, "max_iter": 4, "tol": 1e-12})
    tr.run(40)
    assert tr.iterations(0) > 12
    assert len(tr._configs[0].S) == len(tr._configs[0].Y) == 10       # the newest m = 10 pairs
    assert len(tr._configs[1].S) <= 4                                  # per config, not shared


def test_a_trial_id_added_again_is_scored_as_its_new_config():
    X, y, _ = _data(n=400, d=4, seed=8)
    # five steps each: the two configs' models have the same version number
    a, b = {"solver": "gd", "lr": 0.01, "max_iter": 5}, {"solver": "gd", "lr": 1.0, "max_iter": 5}
    tr = GLMTrainer("logistic", X, y, X, y)
    tr.add(0, a)
    tr.run(5)
    first = tr.score(0)
    tr.remove(0)
    tr.add(0, b)
    tr.run(5)
    fresh = GLMTrainer("logistic", X, y, X, y)
    fresh.add(0, b)
    fresh.run(5)
    assert tr.score(0) == fresh.score(0) != first


def test_join_and_leave_mid_run():
    X, y, _ = _data(n=800, d=5, seed=2)
    a = {"l2": 1e-3, **TIGHT}
    b = {"l2": 0.05, "class_weight": "balanced", **TIGHT}
    c = {"l2": 0.0, "fit_intercept": False, **TIGHT}
    g = {"solver": "gd", "lr": 0.3, "max_iter": 50}
    tr = GLMTrainer("logistic", X, y)
    tr.add(1, a)
    tr.add(2, b)
    tr.add(4, g)
    tr.run(3)
    tr.add(3, c)                        # joins after 3 iterations of the others
    tr.run(2)
    assert tr.iterations(1) == 5 and tr.iterations(3) == 2
    tr.remove(1)                        # leaves after 5 iterations
    assert tr.active() == [2, 4, 3]
    tr.run(10_000)
    np.testing.assert_allclose(tr.model(1).coef, _alone("logistic", X, y, a, 5).coef,
                               atol=1e-6, rtol=0)
    for tid, p in ((2, b), (3, c), (4, g)):
        alone = _alone("logistic", X, y, p)
        np.testing.assert_allclose(tr.model(tid).coef, alone.coef, atol=1e-6, rtol=0)
        assert abs(tr.model(tid).intercept - alone.intercept) < 1e-6
        assert tr.converged(tid)
    assert tr.status(4) == "max_iter" and tr.iterations(4) == 50
    assert tr.status(2) == "converged"


def test_converged_configs_drop_out_and_passes_count():
    X, y, _ = _data()
    tr = GLMTrainer("logistic", X, y)
    assert isinstance(tr, Trainer)
    tr.add(0, {"l2": 0.1, "tol": 1e-2})
    tr.add(1, {"l2": 1e-4, "tol": 1e-10, "max_iter": 500})
    tr.run(1)
    assert tr.passes >= 2                # initial evaluation + at least one trial point
    tr.run(500)
    assert tr.status(0) == "converged" and tr.status(1) == "converged"
    it0 = tr.iterations(0)
    assert it0 < tr.iterations(1)
    passes = tr.passes
    tr.run(5)                            # nothing left to do: no pass
    assert tr.passes == passes
    tr2 = GLMTrainer("logistic", X, y)
    tr2.add(0, {"l2": 0.1, "tol": 1e-2})
    tr2.run(500)
    assert tr2.iterations(0) == it0      # its trajectory did not depend on its neighbour


def test_gd_max_iter_and_trainer_errors():
    X, y, _ = _data()
    tr = GLMTrainer("logistic", X, y)
    tr.add(7, {"solver": "gd", "lr": 0.1, "max_iter": 3})
    tr.run(2)
    assert tr.iterations(7) == 2 and not tr.converged(7) and tr.passes == 2
    tr.run(2)
    assert tr.iterations(7) == 3 and tr.status(7) == "max_iter" and tr.passes == 3
    with pytest.raises(InvalidParameterError):
        tr.add(7, {})
    with pytest.raises(UndefinedObjectError):
        tr.score(99)
    with pytest.raises(InvalidParameterError):
        tr.run(0)


def test_diverging_gd_is_flagged_not_crashing():
    X, _, y = _data()
    tr = GLMTrainer("linear", X * 100, y)
    tr.add(0, {"solver": "gd", "lr": 10.0, "max_iter": 500})
    tr.run(500)
    assert tr.status(0) == "diverged"
    assert np.all(np.isfinite(tr.model(0).coef))


def test_scores_and_metrics_use_validation_data():
    X, y, _ = _data(n=1000)
    Xv, yv = X[800:], y[800:]
    tr = GLMTrainer("logistic", X[:800], y[:800], Xv, yv, metric="auc")
    tr.add(0, {"l2": 1e-3})
    tr.run(100)
    m = tr.metrics(0)
    assert set(m) == {"accuracy", "auc", "logloss"}
    model = tr.model(0)
    acc = float(np.mean(model.predict(Xv) == yv))
    assert m["accuracy"] == pytest.approx(acc)
    assert tr.score(0) == pytest.approx(1.0 - m["auc"])
    lin = GLMTrainer("linear", X, X @ np.ones(4), metric="mse")
    lin.add(0, {})
    lin.run(100)
    assert set(lin.metrics(0)) == {"rmse", "mae", "r2", "mse"}
    assert lin.score(0) == pytest.approx(lin.metrics(0)["mse"])
    assert lin.metrics(0)["r2"] == pytest.approx(1.0)


def test_single_class_validation_gives_nan_auc():
    X, y, _ = _data()
    tr = GLMTrainer("svm", X, y, X[:5], np.ones(5))
    tr.add(0, {})
    tr.run(50)
    assert math.isnan(tr.metrics(0)["auc"])


def test_bad_labels_and_data():
    X, y, _ = _data(n=20)
    y = y.copy()
    y[3] = 2.0
    with pytest.raises(DataError) as e:
        GLMTrainer("logistic", X, y)
    assert e.value.message == ("The labels of the training data for model 'logistic' must be "
                               "0 or 1; got 2")
    with pytest.raises(DataError):
        GLMTrainer("svm", X, np.where(y == 2.0, -1.0, y))
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(DataError):
        GLMTrainer("linear", Xn, y)
    with pytest.raises(InvalidParameterError):
        GLMTrainer("linear", X, y, metric="accuracy")


def test_resume_from_json_state_equals_uninterrupted_run():
    import json

    from groupml.errors import PrerequisiteStateError

    X, y, _ = _data(seed=4)
    configs = {1: {"l2": 1e-3, **TIGHT}, 2: {"solver": "gd", "lr": 0.2, "max_iter": 30},
               3: {"solver": "sgd", "lr": 0.05, "batch_size": 64, "max_iter": 6, "seed": 1,
                   "class_weight": "balanced"}}
    full = GLMTrainer("logistic", X, y)
    for tid, p in configs.items():
        full.add(tid, p)
    full.run(10_000)
    part, twin = GLMTrainer("logistic", X, y), GLMTrainer("logistic", X, y)
    for tr in (part, twin):
        for tid, p in configs.items():
            tr.add(tid, p)
        tr.run(3)
        tr.remove(3)
        tr.add(3, configs[3])
        tr.run(1)
    state = json.loads(json.dumps(part.state_dict(), allow_nan=False))
    perm = np.random.default_rng(0).permutation(X.shape[0])
    with pytest.raises(PrerequisiteStateError):
        GLMTrainer.from_state(state, X[:-1], y[:-1])
    with pytest.raises(PrerequisiteStateError):
        GLMTrainer.from_state({"format": 1}, X, y)
    resumed = GLMTrainer.from_state(state, X, y)
    assert resumed.passes == part.passes and resumed.active() == part.active()
    resumed.run(10_000)
    twin.run(10_000)
    for tid in configs:
        # bit-identical to the same run without the JSON round trip
        np.testing.assert_array_equal(resumed.model(tid).coef, twin.model(tid).coef)
        assert resumed.status(tid) == twin.status(tid) == full.status(tid)
        np.testing.assert_allclose(resumed.model(tid).coef, full.model(tid).coef, atol=1e-6, rtol=0)
    # the fingerprint does not depend on row order
    assert GLMTrainer("logistic", X[perm], y[perm])._fingerprint() == resumed._fingerprint()


def test_interrupt_check_aborts_cleanly_and_run_can_continue():
    X, y, _ = _data(n=3000)
    configs = [{"l2": 1e-3, **TIGHT}, {"solver": "sgd", "batch_size": 20, "max_iter": 3}]

    class Cancelled(Exception):
        pass

    calls = []

    def check():
        calls.append(1)
        if len(calls) == 5:
            raise Cancelled()

    tr = GLMTrainer("logistic", X, y)
    tr.interrupt_check = check
    for i, p in enumerate(configs):
        tr.add(i, p)
    with pytest.raises(Cancelled):
        tr.run(1000)
    tr.interrupt_check = None
    tr.run(1000)
    for i, (model, _) in enumerate(fit_many("logistic", X, y, configs)):
        np.testing.assert_allclose(tr.model(i).coef, model.coef, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", sorted(PASS_TOLS))
@pytest.mark.parametrize("family", ["logistic", "svm", "linear"])
def test_row_blocks_give_the_same_objective_and_gradient(family, dtype, monkeypatch):
    import groupml.learners._glm as glm

    X, y01, yreal = _data(n=1050, d=3)
    y = yreal if family == "linear" else y01
    configs = [{"l2": 0.1}, {"l2": 0.0, "fit_intercept": False}]
    if family != "linear":
        configs += [{"class_weight": "balanced", "l2": 0.01}, {"l2": 0.2}]
    configs = [dict(p, tol=PASS_TOLS[dtype]) for p in configs]
    rtol = _pass_rtol(family, dtype)
    tr = GLMTrainer(family, X, y)
    for i, p in enumerate(configs):
        tr.add(i, p)
    cfgs = [tr._configs[i] for i in range(len(configs))]
    Theta = np.random.default_rng(1).normal(size=(4, len(configs)))
    Theta[3, 1] = 0.0
    f_one, G_one = tr._objective(Theta, cfgs)
    monkeypatch.setattr(glm, "CHUNK_ROWS", 100)
    tr._ws = None
    f_blk, G_blk = tr._objective(Theta, cfgs)
    _assert_same_pass(f_blk, G_blk, f_one, G_one, rtol)
    # and both agree with a direct formula for the plain first config (standardized weights
    # Theta[:, 0]: the data loss at the same model on X's scale, the penalty on Theta)
    user = tr._to_user(Theta, cfgs)
    z = X @ user[:3, 0] + user[3, 0]
    if family == "logistic":
        direct = np.mean(np.logaddexp(0, z) - y * z)
    elif family == "svm":
        direct = np.mean(np.maximum(0, 1 - (2 * y - 1) * z) ** 2)
    else:
        direct = np.mean((y - z) ** 2) / 2
    assert f_one[0] == pytest.approx(direct + 0.05 * Theta[:3, 0] @ Theta[:3, 0], rel=rtol)


@pytest.mark.parametrize("dtype", sorted(PASS_TOLS))
@pytest.mark.parametrize("family", ["logistic", "svm", "linear"])
def test_cache_sized_blocks_of_a_wide_batch_give_the_same_pass(family, dtype, monkeypatch):
    """Above GEMV_MAX_K configs a pass uses small (cache-sized) row blocks: same sums."""
    import groupml.learners._glm as glm

    X, y01, yreal = _data(n=1050, d=3)
    y = yreal if family == "linear" else y01
    configs = [{"l2": 10.0 ** -i} for i in range(glm.GEMV_MAX_K + 2)]
    if family != "linear":
        configs[-1] = {"class_weight": "balanced", "l2": 0.01}
    configs = [dict(p, tol=PASS_TOLS[dtype]) for p in configs]
    rtol = _pass_rtol(family, dtype)
    assert glm._block_rows(3, len(configs)) >= 1050             # one block by default
    tr = GLMTrainer(family, X, y)
    for i, p in enumerate(configs):
        tr.add(i, p)
    cfgs = [tr._configs[i] for i in range(len(configs))]
    Theta = np.random.default_rng(2).normal(size=(4, len(configs)))
    f_one, G_one = tr._evaluate(Theta, cfgs)
    monkeypatch.setattr(glm, "GEMM_BLOCK_VALUES", 3 * 64)
    monkeypatch.setattr(glm, "GEMM_MIN_ROWS", 64)
    assert glm._block_rows(3, len(configs)) == 64               # 17 blocks, the last one short
    tr._ws = None
    f_blk, G_blk = tr._evaluate(Theta, cfgs)
    _assert_same_pass(f_blk, G_blk, f_one, G_one, rtol)
