"""Float32 data passes of the binary GLM families: a centred and scaled float32 copy of the
training rows, sums accumulated in float64, everything else float64. No test here depends on
the exact floating-point path: float32 passes are compared with float64 ones within float32's
precision, and fits by their predictions."""

import numpy as np
import pytest

from groupml.learners import GLMTrainer, fit_many
from groupml.learners._families import FLOAT32_MIN_TOL, ColumnWeights, get_family

#: columns far from zero and of very different units: 1e8 + x loses x entirely in float32
SHIFTS = np.array([1e8, 0.0, 5e4, -3.0])
SCALES = np.array([1.0, 1e-6, 1e3, 0.5])


def _far_columns(n=3000, seed=0, imbalance=0.5):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, SHIFTS.size))
    w = np.array([1.2, -0.8, 0.5, 0.0])
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(Z @ w - imbalance)))).astype(np.float64)
    return Z * SCALES + SHIFTS, y


def _trainer(family, X, y, configs):
    tr = GLMTrainer(family, X, y)
    for i, p in enumerate(configs):
        tr.add(i, p)
    return tr, [tr._configs[i] for i in range(len(configs))]


@pytest.mark.parametrize("family", ["logistic", "svm"])
def test_a_float32_pass_agrees_with_a_float64_pass_on_far_from_zero_columns(family):
    X, y = _far_columns()
    base = [{"l2": 0.0}, {"l2": 0.01, "class_weight": "balanced"}, {"l2": 0.1, "solver": "gd"},
            {"l2": 1e-3}, {"l2": 1e-4, "class_weight": "balanced"}, {"l2": 0.3}]
    for k in (1, 3, len(base)):                     # matrix-vector and matrix-matrix passes
        tr32, c32 = _trainer(family, X, y, [dict(p, tol=1e-4) for p in base[:k]])
        tr64, c64 = _trainer(family, X, y, [dict(p, tol=1e-6) for p in base[:k]])
        assert tr32._pass_dtype(c32) == np.float32 and tr64._pass_dtype(c64) == np.float64
        V = np.random.default_rng(k).normal(scale=0.7, size=(X.shape[1] + 1, k))
        f32, G32 = tr32._objective(V, c32)
        f64, G64 = tr64._objective(V, c64)
        np.testing.assert_allclose(f32, f64, rtol=1e-6, atol=0)
        # within 5e-6 (half the smallest tol a float32 pass serves) of each column's largest
        # entry, or of 1 where that is smaller: a float32 block sum of a few thousand rows
        # keeps about 6 digits of the sum of the terms' sizes (far from the optimum, as here,
        # the residuals are large; near it they and the errors shrink)
        big = np.maximum(np.abs(G64).max(axis=0), 1.0)
        np.testing.assert_allclose(G32 / big, G64 / big, rtol=0, atol=5e-6)
        # on the user's scale too (the workers' partial sums): the same models, the same sums
        user = tr64._to_user(V, c64)
        f32u, G32u = tr32._evaluate(user, c32)
        f64u, G64u = tr64._evaluate(user, c64)
        np.testing.assert_allclose(f32u, f64u, rtol=1e-6, atol=0)
        np.testing.assert_allclose(G32u / np.abs(G64u).max(), G64u / np.abs(G64u).max(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["logistic", "svm"])
def test_float32_fits_converge_and_predict_like_float64_fits(family):
    X, y = _far_columns(n=6000, seed=3)
    configs = [{"l2": 0.0}, {"l2": 1e-3, "class_weight": "balanced"}, {"l2": 0.05}, {"l2": 0.01, "class_weight": "balanced"}]
    fast = fit_many(family, X, y, configs)                                        # tol 1e-4: float32 passes
    tight = fit_many(family, X, y, [dict(p, tol=1e-7, max_iter=1000) for p in configs])   # float64 passes
    std = X.std(axis=0)
    for (m32, _), (m64, _) in zip(fast, tight):
        z32, z64 = X @ m32.coef + m32.intercept, X @ m64.coef + m64.intercept
        assert np.mean(np.sign(z32) == np.sign(z64)) >= 0.995
        np.testing.assert_allclose(m32.coef * std, m64.coef * std, atol=2e-2, rtol=0)
    tr, _ = _trainer(family, X, y, configs)
    tr.run(100)
    assert all(tr.status(i) == "converged" for i in range(len(configs)))
    rows = tr._rows[np.float32][0]              # standardized columns, then ones
    assert rows.dtype == np.float32 and rows.shape == (X.shape[0], X.shape[1] + 1)
    assert np.all(np.isfinite(rows)) and np.all(rows[:, -1] == 1.0)
    np.testing.assert_allclose(rows[:, :-1].mean(axis=0, dtype=np.float64), 0.0, atol=1e-5)
    np.testing.assert_allclose(rows[:, :-1].std(axis=0, dtype=np.float64), 1.0, atol=1e-5)


def test_which_passes_run_in_float32():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 4))
    y = (X[:, 0] + rng.normal(size=400) > 0).astype(np.float64)
    logistic, linear = get_family("logistic"), get_family("linear")
    assert logistic.pass_dtype_for(logistic.validate_params({})) == np.float32
    assert logistic.pass_dtype_for(logistic.validate_params({"tol": FLOAT32_MIN_TOL})) == np.float32
    assert logistic.pass_dtype_for(logistic.validate_params({"tol": FLOAT32_MIN_TOL / 2})) == np.float64
    assert logistic.pass_dtype_for(logistic.validate_params({"solver": "sgd"})) == np.float64
    assert logistic.pass_dtype_for(logistic.validate_params({"fit_intercept": False})) == np.float64
    assert logistic.pass_dtype_for(logistic.validate_params({"solver": "gd", "l1": 0.1})) == np.float32
    assert linear.pass_dtype_for(linear.validate_params({})) == np.float64
    # one tight config makes the whole pass float64: a batch shares its pass
    tr, cfgs = _trainer("logistic", X, y, [{}, {"tol": 1e-6}])
    assert tr._pass_dtype(cfgs[:1]) == np.float32 and tr._pass_dtype(cfgs) == np.float64
    tr.run(100)
    assert tr.status(0) == tr.status(1) == "converged"
    assert np.float32 not in tr._rows                # no float32 copy was needed
    trl, cfgl = _trainer("linear", X, X[:, 3], [{}])
    assert trl._pass_dtype(cfgl) == np.float64


def test_float32_log_sums_do_not_overflow():
    # 1 + exp(-|z|) is 2 at z = 0: a float32 product of 128 of them is 2**128, beyond float32
    m, k = 5000, 3
    for split, zeros in ((k, None), (1, 2000)):
        A = np.full((m, k), 2.0, dtype=np.float32)
        sw = np.where(np.arange(m) < 2000, 0.25, 4.0).astype(np.float32)
        cw = ColumnWeights(np.ones(m, np.float32), None if split == k else sw, split,
                           None if split == k else (0.25, 4.0), zeros)
        out = cw.log_sums(A, np.empty_like(A))
        expected = np.full(k, m * np.log(2.0))
        if split < k:
            expected[split:] = (2000 * 0.25 + 3000 * 4.0) * np.log(2.0)
        np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_float32_totals_accumulate_in_float64():
    # 20,000 rows of 1.1: a float32 running sum drifts by about 1e-4 of the total; the totals
    # add 64 rows at a time in float32 and the rest in float64
    m = 20000
    M = np.full((m, 2), 1.1, dtype=np.float32)
    cw = ColumnWeights(np.ones(m, np.float32), None, 2, None, 7000)
    np.testing.assert_allclose(cw.totals(M), m * float(np.float32(1.1)), rtol=1e-9)
