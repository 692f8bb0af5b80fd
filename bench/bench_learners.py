"""Batched fit_many vs a scikit-learn loop (logistic, lbfgs, tol 1e-6); then, on columns whose
scales span 1e-3..1e4, groupml's defaults vs StandardScaler + LogisticRegressionCV on held-out rows.

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
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

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
    # the same objective: groupml's penalty applies to the standardized weights
    t0 = time.perf_counter()
    scaler = StandardScaler().fit(X)
    Xs = scaler.transform(X)
    sk = []
    for p in configs:
        C = 1e12 if p["l2"] == 0 else 1 / (n * p["l2"])
        sk.append(LogisticRegression(C=C, class_weight=p["class_weight"], tol=1e-6,
                                     max_iter=1000).fit(Xs, y))
    t_sk = time.perf_counter() - t0
    diff = max(np.abs(tr.model(i).coef * scaler.scale_ - m.coef_[0]).max() for i, m in enumerate(sk))
    print(f"scikit-learn loop (lbfgs): {t_sk:.2f}s; speed-up {t_sk / t_ours:.2f}x; "
          f"max |coef diff| {diff:.2e}")

# badly scaled columns: groupml's defaults (one configuration, lbfgs) against scikit-learn's
# scaled, cross-validated fit, on 20,000 training and 20,000 held-out rows
import warnings  # noqa: E402
from groupml.fitting import fit_group  # noqa: E402
from groupml.learners import load_model  # noqa: E402

scales = 10.0 ** np.array([-3, 4, 0, 2, -2, 3, 1, -1])
shifts = np.array([0.0, 5e4, 1.0, -300.0, 0.01, 2e3, 0.0, 7.0])
Z = rng.normal(size=(40_000, 8))
yb = (rng.random(40_000) < 1 / (1 + np.exp(-(Z @ np.array([1.5, -1.0, 0.8, 0.6, -0.5, 0.3, 0, 0]) + 0.3)))).astype(float)
Xb = Z * scales + shifts
t0 = time.perf_counter()
fit = fit_group(Xb[:20_000], yb[:20_000], "logistic", {}, {})
t_ours = time.perf_counter() - t0
acc = float(np.mean(load_model(fit.model).predict(Xb[20_000:]) == yb[20_000:]))
line = (f"badly scaled (1e-3..1e4): groupml defaults held-out accuracy {acc:.4f}, "
        f"{fit.trials[0]['status']} after {fit.trials[0]['iterations']} iterations, {t_ours:.2f}s")
if not a.skip_sklearn:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cv = make_pipeline(StandardScaler(), LogisticRegressionCV(max_iter=1000)).fit(Xb[:20_000], yb[:20_000])
    t_cv = time.perf_counter() - t0
    ref = cv.score(Xb[20_000:], yb[20_000:])
    line += f"; StandardScaler + LogisticRegressionCV {ref:.4f} ({t_cv:.2f}s), difference {100 * (acc - ref):+.2f} pt"
print(line)
