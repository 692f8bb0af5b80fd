"""Grid vs random vs TPE vs Hyperband at an equal budget: best validation error reached.

Every method searches the same space (l2, solver lbfgs|gd|sgd, learning rate) for logistic
regression through groupml.fitting.fit_group (the code learn_over_groups runs), with a
budget of N configurations x R epoch blocks (5 iterations each): grid and random train N
configurations, TPE proposes N with 4 slots (so it learns from finished trials), Hyperband
(R, eta = 3) runs iterations with fresh seeds until the budget is spent. Reported: epoch
blocks actually used (converged configurations stop early), validation error of the
selected model (1 - accuracy on fit_group's holdout), test error, seconds, averaged over
seeds. The alternative a user would pick -- Optuna TPE driving scikit-learn one fit at a
time, N trials, selected on the same validation rows -- runs in the same process.

    python bench/bench_search_methods.py [--quick] [--configs N] [--seeds S]
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
from groupml.learners import holdout_mask, load_model  # noqa: E402
from groupml.search import parse_search, search_budget  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true")
ap.add_argument("--configs", type=int, default=24)
ap.add_argument("--max-epochs", type=int, default=20)
ap.add_argument("--seeds", type=int, default=None)
ap.add_argument("--skip-optuna", action="store_true")
a = ap.parse_args()

SPACE = {"l2": {"loguniform": [1e-6, 1]}, "solver": {"choice": ["lbfgs", "gd", "sgd"]},
         "lr": {"loguniform": [1e-3, 3]}, "max_iter": 100}


def datasets(quick):
    from sklearn.datasets import load_breast_cancer, load_digits, make_classification
    from sklearn.preprocessing import StandardScaler

    out = []
    X, y = make_classification(n_samples=4000 if quick else 30000, n_features=30, n_informative=10,
                               random_state=1)
    out.append(("generated", X, y))
    X, y = load_breast_cancer(return_X_y=True)
    out.append(("breast_cancer", X, y))
    X, y = load_digits(return_X_y=True)
    out.append(("digits (>=5)", X, (y >= 5).astype(int)))
    res = []
    for name, X, y in out:
        X = StandardScaler().fit_transform(np.asarray(X, float))
        test = np.random.default_rng(0).random(len(y)) < 0.25
        res.append((name, X[~test], np.asarray(y[~test], float), X[test], np.asarray(y[test], float)))
    return res


def grid_spec(n, R):
    # l2 x (lbfgs, gd x lr, sgd x lr) with (about) n points: lbfgs takes no lr, so it is
    # one point per l2 (a plain solver x lr grid would train each lbfgs model twice)
    per = max(1, round(n / 5))
    return {"method": "grid", "epoch_iters": 5, "max_epochs": R,
            "space": {"l2": list(np.logspace(-6, 0, per)),
                      "solver": ["lbfgs", {"solver": "gd", "lr": [0.03, 1.0]}, {"solver": "sgd", "lr": [0.03, 1.0]}],
                      "max_iter": 100}}


def run(X, y, spec):
    t0 = time.perf_counter()
    res = fit_group(X, y, "logistic", spec, {"seed": 0})
    return res, time.perf_counter() - t0, sum(t["epochs"] for t in res.trials)


def method_runs(name, X, y, seed, N, R):
    budget = N * R
    if name == "grid":
        return [run(X, y, grid_spec(N, R))]
    if name == "random":
        return [run(X, y, {"method": "random", "n_trials": N, "seed": seed, "epoch_iters": 5,
                           "max_epochs": R, "space": SPACE})]
    if name == "tpe":
        return [run(X, y, {"method": "tpe", "n_trials": N, "seed": seed, "epoch_iters": 5, "max_epochs": R,
                           "slots": 4, "space": SPACE})]
    # hyperband: iterations with fresh seeds until the planned budget is spent
    runs, planned, i = [], 0, 0
    while True:
        spec = {"method": "hyperband", "seed": seed * 100 + i, "epoch_iters": 5, "max_epochs": R, "eta": 3,
                "space": SPACE}
        cost = search_budget(parse_search(spec)).epochs
        if runs and planned + cost > budget:
            break
        runs.append(run(X, y, spec))
        planned += cost
        i += 1
    return runs


def optuna_sklearn(Xtr, ytr, N, seed):
    import optuna
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression, SGDClassifier

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    val = holdout_mask(Xtr, ytr, 0.2, 0)
    Xa, ya, Xv, yv = Xtr[~val], ytr[~val], Xtr[val], ytr[val]
    models = {}

    def objective(trial):
        l2 = trial.suggest_float("l2", 1e-6, 1, log=True)
        solver = trial.suggest_categorical("solver", ["lbfgs", "gd", "sgd"])
        lr = trial.suggest_float("lr", 1e-3, 3, log=True)
        if solver == "lbfgs":
            m = LogisticRegression(C=1 / (len(ya) * l2), max_iter=100)
        else:
            m = SGDClassifier(loss="log_loss", alpha=l2, learning_rate="constant", eta0=lr, max_iter=100,
                              random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m.fit(Xa, ya)
        models[trial.number] = m
        return 1 - m.score(Xv, yv)

    t0 = time.perf_counter()
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=N)
    return study.best_value, models[study.best_trial.number], time.perf_counter() - t0


def main():
    N, R = (12 if a.quick else a.configs), (10 if a.quick else a.max_epochs)
    seeds = a.seeds or (1 if a.quick else 3)
    methods = ("grid", "random", "tpe", "hyperband")
    print(f"budget {N} configs x {R} epoch blocks (5 iterations) = {N * R} blocks; {seeds} seed(s); "
          f"errors are 1 - accuracy")
    print(f"{'dataset':<14} {'method':<10} {'blocks used':>11} {'val err':>8} {'test err':>8} {'seconds':>8}")
    for dname, Xtr, ytr, Xte, yte in datasets(a.quick):
        for m in methods:
            used, verr, terr, secs = [], [], [], []
            for seed in range(seeds):
                runs = method_runs(m, Xtr, ytr, seed, N, R)
                best = max((r[0] for r in runs if r[0].status == "ok"), key=lambda res: res.score)
                used.append(sum(r[2] for r in runs))
                secs.append(sum(r[1] for r in runs))
                verr.append(1 - best.score)
                pred = load_model(best.model).predict(Xte)
                terr.append(float(np.mean((np.asarray(pred) > 0.5) != (yte > 0.5))))
            print(f"{dname:<14} {m:<10} {np.mean(used):>11.0f} {np.mean(verr):>8.4f} {np.mean(terr):>8.4f} "
                  f"{np.mean(secs):>8.2f}", flush=True)
        if not a.skip_optuna:
            vals, tes, secs = [], [], []
            for seed in range(seeds):
                v, model, s = optuna_sklearn(Xtr, ytr, N, seed)
                vals.append(v)
                tes.append(1 - model.score(Xte, yte))
                secs.append(s)
            print(f"{dname:<14} {'optuna+sk':<10} {'-':>11} {np.mean(vals):>8.4f} {np.mean(tes):>8.4f} "
                  f"{np.mean(secs):>8.2f}", flush=True)


if __name__ == "__main__":
    main()
