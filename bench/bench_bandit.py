"""TuPAQ Fig. 7 analogue: bandit early stopping (Alg. 3) on vs off, over several datasets.

The same random search (n_trials configurations over l2, class_weight, solver gd/sgd/lbfgs
and learning rate, TuPAQ's mixed space) runs through groupml.fitting.fit_group -- the code
learn_over_groups runs in the backend -- without and with
{"early_stopping": {"method": "bandit", "epsilon": 0.5, "partial_iters": 10}}.
Reported per dataset: configuration-passes (data passes summed over configurations, the
work TuPAQ counts), shared passes (one pass serves every config of the batch), wall
seconds, validation error of the selected model, and its error on a separate test split.
The alternative a user would pick -- a scikit-learn loop over the same configurations
(LogisticRegression for lbfgs, SGDClassifier for gd/sgd), selected on the same validation
rows -- runs in the same process.

    python bench/bench_bandit.py [--quick] [--trials N] [--seed S]
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.environ.get("GROUPML_PYUDF") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyudf"))
from groupml.fitting import fit_group  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--trials", type=int, default=None)
ap.add_argument("--seed", type=int, default=7)
ap.add_argument("--epsilon", type=float, default=0.5)
ap.add_argument("--partial-iters", type=int, default=10)
ap.add_argument("--skip-sklearn", action="store_true")
ap.add_argument("--space", default="tupaq", choices=("tupaq", "mixed"),
                help="tupaq: the paper's section 4.2/4.3 setting -- gradient descent, 100 iterations per "
                     "model, lr in (1e-3, 10), l2 in (1e-4, 1e2), log scale; mixed: lbfgs/gd/sgd with "
                     "l2 in (1e-6, 1), lr in (1e-3, 3)")
ap.add_argument("--metric", default="accuracy", choices=("accuracy", "logloss", "auc"),
                help="validation metric the search and the bandit use (the error reported is 1 - accuracy)")
a = ap.parse_args()


def datasets(quick):
    from sklearn.datasets import load_breast_cancer, load_digits, load_wine, make_classification
    from sklearn.preprocessing import StandardScaler

    out = []
    X, y = make_classification(n_samples=5000 if quick else 50000, n_features=40, n_informative=12,
                               random_state=0)
    out.append(("generated", X, y))
    X, y = load_breast_cancer(return_X_y=True)
    out.append(("breast_cancer", X, y))
    X, y = load_digits(return_X_y=True)
    out.append(("digits (>=5)", X, (y >= 5).astype(int)))
    X, y = load_wine(return_X_y=True)
    out.append(("wine (class 0)", X, (y == 0).astype(int)))
    if not quick:
        from groupml.datagen import grouped_classification

        g = grouped_classification(40000, 1, 20, seed=3)
        out.append(("datagen group", np.column_stack([g[f"f{i}"] for i in range(1, 21)]), g["label"]))
    res = []
    for name, X, y in out:
        X = StandardScaler().fit_transform(np.asarray(X, dtype=float))
        rng = np.random.default_rng(0)
        test = rng.random(len(y)) < 0.25
        res.append((name, X[~test], np.asarray(y[~test], float), X[test], np.asarray(y[test], float)))
    return res


def space(trials, seed):
    if a.space == "tupaq":
        # TuPAQ 4.3: every model is allocated 100 iterations; after 10, models not within 50% of
        # the best error so far are stopped. Ranges of section 4.2 (no random features here).
        return {"method": "random", "n_trials": trials, "seed": seed, "epoch_iters": 5, "max_epochs": 20,
                "space": {"solver": "gd", "lr": {"loguniform": [1e-3, 10]}, "l2": {"loguniform": [1e-4, 1e2]},
                          "max_iter": 100, "tol": 1e-12}}
    return {"method": "random", "n_trials": trials, "seed": seed, "epoch_iters": 5, "max_epochs": 20,
            "space": {"l2": {"loguniform": [1e-6, 1]}, "class_weight": {"choice": [None, "balanced"]},
                      "solver": {"choice": ["lbfgs", "gd", "sgd"]}, "lr": {"loguniform": [1e-3, 3]},
                      "max_iter": 100}}


def test_error(res, Xte, yte):
    from groupml.learners import load_model

    model = load_model(res.model)
    p = model.predict(Xte)
    return float(np.mean((np.asarray(p) > 0.5) != (yte > 0.5)))


def sklearn_loop(trials, Xtr, ytr, Xte, yte):
    """Fit every configuration of the same random search one at a time with scikit-learn."""
    from groupml.search import make_procedure, parse_search
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression, SGDClassifier

    spec = parse_search(space(trials, a.seed))
    configs = [t.params for t in make_procedure(spec).ask(trials)]
    from groupml.learners import holdout_mask

    val = holdout_mask(Xtr, ytr, 0.2, 0)          # the split fit_group uses
    Xa, ya, Xv, yv = Xtr[~val], ytr[~val], Xtr[val], ytr[val]
    n = len(ya)
    t0 = time.perf_counter()
    best = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for p in configs:
            if p["solver"] == "lbfgs":
                m = LogisticRegression(C=1 / (n * p["l2"]), class_weight=p.get("class_weight"), max_iter=100)
            else:
                m = SGDClassifier(loss="log_loss", alpha=p["l2"], learning_rate="constant", eta0=p["lr"],
                                  max_iter=100, class_weight=p.get("class_weight"), random_state=0)
            m.fit(Xa, ya)
            if a.metric == "logloss":
                from sklearn.metrics import log_loss
                err = log_loss(yv, m.predict_proba(Xv)[:, 1], labels=[0, 1])
            elif a.metric == "auc":
                from sklearn.metrics import roc_auc_score
                err = -roc_auc_score(yv, m.predict_proba(Xv)[:, 1])
            else:
                err = 1 - m.score(Xv, yv)
            if best is None or err < best[0]:
                best = (err, 1 - m.score(Xte, yte))
    return time.perf_counter() - t0, best[1]


def main():
    trials = a.trials or (24 if a.quick else 40)
    es = {"method": "bandit", "epsilon": a.epsilon, "partial_iters": a.partial_iters}
    what = ("gd, lr in (1e-3, 10), l2 in (1e-4, 1e2)" if a.space == "tupaq"
            else "l2, class_weight, solver lbfgs|gd|sgd, lr")
    print(f"random search ({a.space} space), {trials} configs ({what}), epoch = 5 iterations, "
          f"max_iter 100; bandit epsilon {a.epsilon}, partial_iters {a.partial_iters}; metric {a.metric}")
    print(f"{'dataset':<15} {'n':>6} {'d':>3} | {'cfg-passes off':>14} {'on':>6} {'saved':>6} | "
          f"{'passes off':>10} {'on':>5} | {'sec off':>7} {'on':>6} | {'val err off':>11} {'on':>6} | "
          f"{'test err off':>12} {'on':>6} | {'sklearn s':>9} {'test err':>8}")
    tot_off = tot_on = 0
    for name, Xtr, ytr, Xte, yte in datasets(a.quick):
        rows = {}
        for arm, extra in (("off", {}), ("on", {"early_stopping": es})):
            t0 = time.perf_counter()
            res = fit_group(Xtr, ytr, "logistic", dict(space(trials, a.seed), **extra), {"seed": 0, "metric": a.metric})
            secs = time.perf_counter() - t0
            cfg = sum(t["passes"] for t in res.trials)
            rows[arm] = (cfg, res.passes, secs, 1 - res.metrics["accuracy"], test_error(res, Xte, yte))
        tot_off += rows["off"][0]
        tot_on += rows["on"][0]
        sk = "" if a.skip_sklearn else "{:9.2f} {:8.3f}".format(*sklearn_loop(trials, Xtr, ytr, Xte, yte))
        off, on = rows["off"], rows["on"]
        print(f"{name:<15} {len(ytr):>6} {Xtr.shape[1]:>3} | {off[0]:>14} {on[0]:>6} {1 - on[0] / off[0]:>6.0%} | "
              f"{off[1]:>10} {on[1]:>5} | {off[2]:>7.2f} {on[2]:>6.2f} | {off[3]:>11.3f} {on[3]:>6.3f} | "
              f"{off[4]:>12.3f} {on[4]:>6.3f} | {sk}", flush=True)
    print(f"total configuration-passes: off {tot_off}, on {tot_on}, saved {1 - tot_on / tot_off:.0%}")


if __name__ == "__main__":
    main()
