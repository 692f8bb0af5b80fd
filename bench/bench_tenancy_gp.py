"""Which GP prior for the tenants' GP-UCB? The scheduler's against the paper's recipe.

ease.ml (appendix A of the long version) represents a model by its *quality vector* (its
qualities on the training users), uses "a standard kernel function" on these vectors, a
zero prior mean "without loss of generality" and hyper-parameters fitted by maximum
marginal likelihood "as in scikit-learn". This script runs the simulation suite of
bench_tenancy_sim.py with the prior swapped:

  ours     the scheduler's prior: linear kernel on the centred quality vectors
           (their empirical covariance, shrunk) plus each vector's average as mean
  zero     zero mean and the linear kernel on the raw vectors (second-moment matrix)
  se       squared-exponential + constant kernel on the quality vectors (distance = mean
           squared difference per training user) and a constant mean; amplitude, length
           scale, constant and jitter by maximum marginal likelihood over the training
           users' rows, fitted once per dataset
  sklearn  scikit-learn's GaussianProcessRegressor (zero mean, C * RBF + White kernel on
           the quality vectors) re-fitted on the tenant's own observations after every
           one -- our reading of "tuned by maximizing the log-marginal-likelihood as in
           scikit-learn" (much slower per step)

    python bench/bench_tenancy_gp.py                      # ours, zero, se; 6 seeds (~2.5 min)
    python bench/bench_tenancy_gp.py --variants sklearn --seeds 2 --aware-only   # ~3.5 min

Other options (--users, --models, --beta-rule, --cost-low, ...) are passed to
bench_tenancy_sim.py's parser.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pyudf"))
sys.path.insert(0, HERE)

import bench_tenancy_sim as sim  # noqa: E402
import groupml.tenancy._scheduler as core  # noqa: E402
from groupml.tenancy._gp import history_matrix  # noqa: E402

ORIGINAL_PRIOR = core.estimate_prior
ORIGINAL_BUILD = core.Scheduler._build_gp


def zero_mean_prior(data, **kw):
    mean, cov = ORIGINAL_PRIOR(data, **kw)
    return np.zeros_like(mean), cov + np.outer(mean, mean)


def _filled(data):
    data = np.asarray(data, dtype=float)
    col = np.nanmean(data, axis=0)
    return np.where(np.isnan(data), col, data)


_SE_CACHE = {}


def se_prior(data, **_kw):
    from scipy.optimize import minimize

    X = _filled(data)                               # rows (training users) x K
    key = hashlib.sha1(X.tobytes()).hexdigest()
    if key in _SE_CACHE:
        return _SE_CACHE[key]
    m = float(X.mean())
    R = X - m
    V = X.T                                          # quality vectors, K x rows
    sq = (V * V).sum(axis=1)
    D2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * V @ V.T, 0.0) / V.shape[1]
    n, k = R.shape

    def kernel(p):
        amp, ell, const, jitter = np.exp(p)
        return amp * np.exp(-D2 / (2.0 * ell * ell)) + const + (jitter + 1e-8) * np.eye(k)

    def nll(p):
        try:
            L = np.linalg.cholesky(kernel(p))
        except np.linalg.LinAlgError:
            return 1e10
        A = np.linalg.solve(L, R.T)
        return 0.5 * float((A * A).sum()) + n * float(np.log(np.diag(L)).sum())

    best = None
    for ell0 in (0.05, 0.2, 1.0):
        p0 = [np.log(R.var() * 0.5), np.log(ell0), np.log(R.var() * 0.5), np.log(1e-3)]
        r = minimize(nll, p0, method="L-BFGS-B", bounds=[(-12, 3), (-7, 4), (-12, 3), (-14, 0)],
                     options={"maxiter": 60})
        if best is None or r.fun < best.fun:
            best = r
    out = (np.full(k, m), kernel(best.x))
    _SE_CACHE[key] = out
    return out


class SklearnGP:
    """Drop-in for TenantGP: zero-mean sklearn GP, hyper-parameters re-fitted at every observation."""

    def __init__(self, vectors):
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        self.X = vectors
        self.kernel = (ConstantKernel(1.0, (1e-4, 1e2)) * RBF(0.2 * np.sqrt(vectors.shape[1]), (1e-3, 1e4))
                       + WhiteKernel(1e-3, (1e-8, 1e-1)))
        self.observed, self.y = [], []
        self.mean = np.zeros(vectors.shape[0])
        self.var = np.full(vectors.shape[0], 1.0 + 1e-3)

    @property
    def std(self):
        return np.sqrt(np.maximum(self.var, 0.0))

    def add(self, index, value):
        from sklearn.gaussian_process import GaussianProcessRegressor

        self.observed.append(int(index))
        self.y.append(float(value))
        gp = GaussianProcessRegressor(self.kernel, normalize_y=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gp.fit(self.X[self.observed], np.array(self.y))
        self.kernel = gp.kernel_
        mu, sd = gp.predict(self.X, return_std=True)
        self.mean, self.var = mu, sd ** 2


def sklearn_build_gp(self, bandit):
    bandit.gp = SklearnGP(_filled(history_matrix(list(self.history), bandit.keys)).T)
    for tenant, key, quality, _cost in self.log:
        if tenant == bandit.name and quality is not None:
            bandit.gp.add(bandit.index[key], quality)


VARIANTS = {"ours": (ORIGINAL_PRIOR, ORIGINAL_BUILD), "zero": (zero_mean_prior, ORIGINAL_BUILD),
            "se": (se_prior, ORIGINAL_BUILD), "sklearn": (ORIGINAL_PRIOR, sklearn_build_gp)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="ours,zero,se", help="comma-separated: " + ", ".join(VARIANTS))
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--aware-only", action="store_true", help="only the cost-aware mode")
    args, rest = ap.parse_known_args(argv)
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {unknown}; choose from {sorted(VARIANTS)}")
    # the simulation benchmark's own options (users, models, beta rule, ...), without its latency part
    sim_args = sim.parse_args(["--seeds", str(args.seeds)] + rest)
    if args.aware_only:
        sim_args.modes = [True]
    for name in names:
        prior, build = VARIANTS[name]
        core.estimate_prior, core.Scheduler._build_gp = prior, build
        t0 = time.perf_counter()
        try:
            rows = sim.run_suite(sim_args)
        finally:
            core.estimate_prior, core.Scheduler._build_gp = ORIGINAL_PRIOR, ORIGINAL_BUILD
        print(f"\n===== GP prior variant: {name} ({time.perf_counter() - t0:.0f} s)")
        sim.print_suite(rows, sim_args)


if __name__ == "__main__":
    main()
