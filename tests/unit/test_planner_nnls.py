"""The planner's numpy NNLS against scipy.optimize.nnls."""

import numpy as np
import pytest
from scipy.optimize import nnls as scipy_nnls

from groupml.planner._common import nnls


@pytest.mark.parametrize("seed", range(40))
def test_matches_scipy_on_random_problems(seed):
    rng = np.random.default_rng(seed)
    m, n = [(200, 5), (5000, 8), (12, 6), (4, 7), (30, 1)][seed % 5]
    A = rng.standard_normal((m, n)) * np.exp(rng.normal(0, 2, n))     # badly scaled columns
    if seed % 3 == 0:
        A[:, 0] = 0.0                                                  # a column without information
    x_true = np.abs(rng.standard_normal(n)) * (rng.random(n) < 0.6)   # some coefficients exactly 0
    b = A @ x_true + rng.normal(0, 0.1, m) - (seed % 2) * 3.0 * rng.random(m)
    x, r = nnls(A, b)
    xs, rs = scipy_nnls(A, b)
    assert (x >= 0).all()
    assert r == pytest.approx(np.linalg.norm(A @ x - b))
    # same optimum: the residual norms agree; the solution too where it is unique (full column rank)
    assert r == pytest.approx(rs, rel=1e-9, abs=1e-9)
    if m >= n and np.linalg.matrix_rank(A) == n:
        np.testing.assert_allclose(x, xs, rtol=1e-7, atol=1e-9)


def test_all_negative_correlations_give_zero():
    A = np.eye(3)
    x, r = nnls(A, np.array([-1.0, -2.0, -3.0]))
    assert x.tolist() == [0.0, 0.0, 0.0] and r == pytest.approx(np.sqrt(14))
