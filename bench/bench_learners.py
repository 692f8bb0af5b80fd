"""Batched fit_many vs a scikit-learn loop (logistic, lbfgs, tol 1e-6).

    python bench/bench_learners.py [--quick] [--rows N] [--skip-sklearn]
"""
import argparse
import sys
import time
import numpy as np

import os
sys.path.insert(0, os.environ.get("GROUPML_PYUDF") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyudf"))
from groupml.learners import GLMTrainer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--rows", type=int, default=1_000_000)
ap.add_argument("--skip-sklearn", action="store_true")
a = ap.parse_args()
n = 200_000 if a.quick else a.rows
d = 20
rng = np.random.default_rng(7)
X = rng.normal(size=(n, d))
w = rng.normal(size=d) / np.sqrt(d) * 2
y = (rng.random(n) < 1 / (1 + np.exp(-(X @ w - 0.5)))).astype(np.float64)
l2s = [0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2]
configs = [{"l2": l2, "class_weight": cw, "tol": 1e-6, "max_iter": 200}
           for l2 in l2s for cw in (None, "balanced")]

t0 = time.perf_counter()
tr = GLMTrainer("logistic", X, y)
for i, p in enumerate(configs):
    tr.add(i, p)
tr.run(200)
t_ours = time.perf_counter() - t0
print(f"rows={n} d={d} k={len(configs)} groupml batched lbfgs: {t_ours:.2f}s, passes={tr.passes}, "
      f"s/pass={t_ours / tr.passes:.3f}, iters={[tr.iterations(i) for i in range(len(configs))]}")
if not a.skip_sklearn:
    t0 = time.perf_counter()
    sk = []
    for p in configs:
        C = 1e12 if p["l2"] == 0 else 1 / (n * p["l2"])
        sk.append(LogisticRegression(C=C, class_weight=p["class_weight"], tol=1e-6,
                                     max_iter=1000).fit(X, y))
    t_sk = time.perf_counter() - t0
    diff = max(np.abs(tr.model(i).coef - m.coef_[0]).max() for i, m in enumerate(sk))
    print(f"scikit-learn loop (lbfgs): {t_sk:.2f}s; speed-up {t_sk / t_ours:.2f}x; "
          f"max |coef diff| {diff:.2e}")
