"""TuPAQ Fig. 7 analogue: bandit resource allocation (Alg. 3) on vs off, over several datasets.

The paper's experiment (sections 4.2-4.3): random search over 625 configurations of a
logistic model trained by gradient descent, 100 iterations per model, with four
hyperparameters -- learning rate (1e-3..10), L2 (1e-4..1e2), size of a random projection
(1..10 x d, the training rows down-sampled by the same factor) and the noise of the random
feature matrix (1e-4..1e2); bandit epsilon 0.5, checked every 10 iterations against the
best classification error so far; batches of O(10) models. Reported: scans of the training
data summed over models, and the validation error of the selected model, for No Bandit,
Bandit, Budget (every model gets exactly 10 iterations) and Baseline (majority class).

``--space tupaq`` (default) runs that space. Random features differ per configuration, so
each configuration gets its own feature matrix and its own GLMTrainer (k = 1); the search
procedure, the bandit and the planner loop are groupml's (RandomSearch + BanditStopping +
run_search) with ``slots`` configurations in flight. ``--space gd`` (TuPAQ's ranges for
lr and l2 only, no random features) and ``--space mixed`` (lbfgs/gd/sgd, class_weight)
run through groupml.fitting.fit_group -- the code learn_over_groups runs -- with W d x k
batching, next to a scikit-learn loop over the same configurations.

Counts, not wall time, are the result: "cfg-passes" = data passes summed over
configurations, eliminated configurations' passes included.

    python bench/bench_bandit.py [--quick] [--space tupaq|gd|mixed] [--metric accuracy|logloss]
                                 [--trials 625] [--slots 10] [--check every|once]
                                 [--epsilon 0.5[,1,...]] [--seed 7 | --seeds 1-10 [--jobs 2]]
"""
import argparse
import math
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.environ.get("GROUPML_PYUDF") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyudf"))
from groupml.fitting import fit_group  # noqa: E402
from groupml.learners import GLMTrainer, holdout_mask, load_model  # noqa: E402
from groupml.search import BanditStopping, make_procedure, parse_search, run_search  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true", help="smaller generated data, no datagen set")
ap.add_argument("--trials", type=int, default=625, help="configurations (TuPAQ 4.3: 625)")
ap.add_argument("--slots", type=int, default=10, help="configurations in flight (TuPAQ 4.4: O(10))")
ap.add_argument("--seed", type=int, default=7)
ap.add_argument("--seeds", default=None,
                help="several random searches, e.g. 1-10 or 1,3,7: a table per seed, then a summary over them")
ap.add_argument("--jobs", type=int, default=1, help="with --seeds: searches run in this many processes")
ap.add_argument("--epsilon", default="0.5",
                help="bandit slack; a comma-separated list runs one bandit arm per value (the first in the "
                     "main table, all in the trade-off summary)")
ap.add_argument("--partial-iters", type=int, default=10)
ap.add_argument("--space", default="tupaq", choices=("tupaq", "gd", "mixed"),
                help="tupaq: lr, l2, random-feature size and noise (TuPAQ 4.2); gd: lr and l2 only; "
                     "mixed: l2, class_weight, solver lbfgs|gd|sgd, lr")
ap.add_argument("--metric", default="accuracy", choices=("accuracy", "logloss"),
                help="validation loss the search and the bandit use (TuPAQ: classification error)")
ap.add_argument("--check", default="every", choices=("every", "once"),
                help="tupaq space only: bandit test at every partial_iters checkpoint (Alg. 2/3) or "
                     "only at the first (for comparison)")
ap.add_argument("--skip-sklearn", action="store_true")
a = ap.parse_args()

ITERS = 100          # iterations allotted to every model (TuPAQ 4.3)
EPOCH = 10           # one block = partial_iters iterations, so the bandit sees every checkpoint


def datasets(quick):
    from sklearn.datasets import load_breast_cancer, load_digits, load_wine, make_classification
    from sklearn.preprocessing import StandardScaler

    out = []
    X, y = make_classification(n_samples=3000 if quick else 10000, n_features=40, n_informative=12,
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

        g = grouped_classification(10000, 1, 20, seed=3)
        out.append(("datagen group", np.column_stack([g[f"f{i}"] for i in range(1, 21)]), g["label"]))
    res = []
    for name, X, y in out:
        X = StandardScaler().fit_transform(np.asarray(X, dtype=float))
        rng = np.random.default_rng(0)
        test = rng.random(len(y)) < 0.25
        res.append((name, X[~test], np.asarray(y[~test], float), X[test], np.asarray(y[test], float)))
    return res


EPSILONS = [float(e) for e in a.epsilon.split(",")]


def search_spec(trials, arm, epsilon=None):
    """The random search of one arm: 'off', 'on' (bandit with ``epsilon``) or 'budget'
    (10 iterations each)."""
    spec = {"method": "random", "n_trials": trials, "seed": a.seed, "epoch_iters": EPOCH,
            "max_epochs": 1 if arm == "budget" else ITERS // EPOCH}
    if arm == "on":
        spec["early_stopping"] = {"method": "bandit", "epsilon": epsilon, "partial_iters": a.partial_iters}
    if a.space == "tupaq":
        spec["space"] = {"lr": {"loguniform": [1e-3, 10]}, "l2": {"loguniform": [1e-4, 1e2]},
                         "rf_scale": {"uniform": [1, 10]}, "rf_noise": {"loguniform": [1e-4, 1e2]}}
    elif a.space == "gd":
        spec["space"] = {"solver": "gd", "lr": {"loguniform": [1e-3, 10]}, "l2": {"loguniform": [1e-4, 1e2]},
                         "max_iter": ITERS, "tol": 1e-12}
    else:
        spec["space"] = {"l2": {"loguniform": [1e-6, 1]}, "class_weight": {"choice": [None, "balanced"]},
                         "solver": {"choice": ["lbfgs", "gd", "sgd"]}, "lr": {"loguniform": [1e-3, 3]},
                         "max_iter": ITERS}
    if a.space != "tupaq":
        spec["slots"] = a.slots
    return spec


# ----------------------------------------------------------------- TuPAQ's random-feature space
class RandomFeatures:
    """Rahimi-Recht random Fourier features of one configuration, reproducible from its id.

    D = round(rf_scale * d) features sqrt(2/D) cos(X W + b), W ~ N(0, rf_noise^2),
    b ~ U(0, 2 pi); the training rows are down-sampled by the factor D / d (TuPAQ 4.2).
    """

    def __init__(self, seed, trial_id, d, params):
        rng = np.random.default_rng([seed, trial_id])
        self.D = max(1, int(round(params["rf_scale"] * d)))
        self.W = rng.normal(0.0, params["rf_noise"], size=(d, self.D))
        self.b = rng.uniform(0.0, 2 * np.pi, self.D)
        self.rng = rng

    def __call__(self, X):
        return math.sqrt(2.0 / self.D) * np.cos(X @ self.W + self.b)

    def rows(self, y):
        """Training rows kept: n * d / D of them, both classes present."""
        n = len(y)
        m = min(n, max(2, int(round(n * self.W.shape[0] / self.D))))
        rows = self.rng.choice(n, size=m, replace=False)
        for cls in (0.0, 1.0):
            if not np.any(y[rows] == cls):
                rows = np.append(rows, np.flatnonzero(y == cls)[0])
        return np.sort(rows)


class RandomFeatureTrainer:
    """engine.Trainer over per-configuration random features: one GLMTrainer per configuration.

    ``config_passes`` counts every iteration of every unfinished configuration (an
    iteration is one gradient-descent pass over that configuration's training rows).
    A configuration leaving the search keeps only its validation loss, metrics and model.
    """

    def __init__(self, Xtr, ytr, Xva, yva, metric, seed):
        self.Xtr, self.ytr, self.Xva, self.yva = Xtr, ytr, Xva, yva
        self.metric, self.seed = metric, seed
        self.passes = 0
        self.config_passes = 0
        self._live = {}
        self.done = {}          # trial_id -> (score, metrics, model)

    def add(self, trial_id, params):
        fm = RandomFeatures(self.seed, trial_id, self.Xtr.shape[1], params)
        rows = fm.rows(self.ytr)
        t = GLMTrainer("logistic", fm(self.Xtr[rows]), self.ytr[rows], fm(self.Xva), self.yva,
                       metric=self.metric)
        t.add(trial_id, {"solver": "gd", "lr": params["lr"], "l2": params["l2"], "max_iter": ITERS,
                         "tol": 1e-12})
        self._live[trial_id] = t

    def remove(self, trial_id):
        t = self._live.pop(trial_id)
        self.done[trial_id] = (t.score(trial_id), t.metrics(trial_id), t.model(trial_id))

    def active(self):
        return sorted(self._live)

    def run(self, iterations):
        most = 0
        for tid, t in self._live.items():
            if not t.converged(tid):
                p0 = t.passes
                t.run(iterations)
                self.config_passes += t.passes - p0
                most = max(most, t.passes - p0)
        self.passes += most

    def converged(self, trial_id):
        return self._live[trial_id].converged(trial_id)

    def status(self, trial_id):
        return self._live[trial_id].status(trial_id)

    def score(self, trial_id):
        return self._live[trial_id].score(trial_id)


class _CheckOnce(BanditStopping):
    """For --check once: the test only at the first checkpoint (survivors never re-checked)."""

    def is_checkpoint(self, epoch):
        return epoch == self.check_epoch


def run_tupaq_arm(arm, Xtr, ytr, Xte, yte, trials, epsilon=None):
    val = holdout_mask(Xtr, ytr, 0.2, 0)          # the split fit_group uses
    trainer = RandomFeatureTrainer(Xtr[~val], ytr[~val], Xtr[val], ytr[val], a.metric, a.seed)
    spec = parse_search(search_spec(trials, arm, epsilon))
    proc = make_procedure(spec)
    if arm == "on" and a.check == "once":
        proc = _CheckOnce(proc.inner, epsilon=proc.epsilon, check_epoch=proc.check_epoch)
    t0 = time.perf_counter()
    result = run_search(proc, trainer, slots=a.slots, epoch_iters=EPOCH)
    secs = time.perf_counter() - t0
    best = result.best.trial_id
    _, metrics, model = trainer.done[best]
    fm = RandomFeatures(a.seed, best, Xtr.shape[1], result.best.params)
    test_err = float(np.mean(model.predict(fm(Xte)) != (yte > 0.5)))
    eliminated = sum(1 for t in result.trials if (t.stop_reason or "").startswith("bandit"))
    return dict(cfg=trainer.config_passes, secs=secs, val=1 - metrics["accuracy"], test=test_err,
                eliminated=eliminated, baseline=min(ytr[val].mean(), 1 - ytr[val].mean()))


# ------------------------------------------------------------------- fit_group spaces (gd, mixed)
def run_fit_group_arm(arm, Xtr, ytr, Xte, yte, trials, epsilon=None):
    t0 = time.perf_counter()
    res = fit_group(Xtr, ytr, "logistic", search_spec(trials, arm, epsilon), {"seed": 0, "metric": a.metric})
    secs = time.perf_counter() - t0
    model = load_model(res.model)
    val = holdout_mask(Xtr, ytr, 0.2, 0)
    return dict(cfg=sum(t["passes"] for t in res.trials), secs=secs, val=1 - res.metrics["accuracy"],
                test=float(np.mean(model.predict(Xte) != (yte > 0.5))),
                eliminated=sum(1 for t in res.trials if (t["stop_reason"] or "").startswith("bandit")),
                baseline=min(ytr[val].mean(), 1 - ytr[val].mean()))


def sklearn_loop(trials, Xtr, ytr, Xte, yte):
    """Fit every configuration of the same random search one at a time with scikit-learn."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression, SGDClassifier
    from sklearn.metrics import log_loss

    configs = [t.params for t in make_procedure(parse_search(search_spec(trials, "off"))).ask(trials)]
    val = holdout_mask(Xtr, ytr, 0.2, 0)
    Xa, ya, Xv, yv = Xtr[~val], ytr[~val], Xtr[val], ytr[val]
    n = len(ya)
    t0 = time.perf_counter()
    best = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        for p in configs:
            if p["solver"] == "lbfgs":
                m = LogisticRegression(C=1 / (n * p["l2"]), class_weight=p.get("class_weight"), max_iter=ITERS)
            else:
                m = SGDClassifier(loss="log_loss", alpha=p["l2"], learning_rate="constant", eta0=p["lr"],
                                  max_iter=ITERS, class_weight=p.get("class_weight"), random_state=0)
            m.fit(Xa, ya)
            if a.metric == "logloss":
                err = log_loss(yv, np.clip(m.predict_proba(Xv)[:, 1], 1e-15, 1 - 1e-15), labels=[0, 1])
            else:
                err = 1 - m.score(Xv, yv)
            if best is None or err < best[0]:
                best = (err, 1 - m.score(Xte, yte))
    return time.perf_counter() - t0, best[1]


def run_seed(seed):
    """Every dataset's arms for the random search of ``seed``: a list of per-dataset dicts."""
    a.seed = seed                     # read by search_spec and the random-feature trainer
    trials = a.trials
    run_arm = run_tupaq_arm if a.space == "tupaq" else run_fit_group_arm
    out = []
    for name, Xtr, ytr, Xte, yte in datasets(a.quick):
        rows = {arm: run_arm(arm, Xtr, ytr, Xte, yte, trials) for arm in ("off", "budget")}
        for e in EPSILONS:
            rows[e] = run_arm("on", Xtr, ytr, Xte, yte, trials, e)
        sk = ""
        if a.space != "tupaq" and not a.skip_sklearn:
            sk = "{:.2f} s, {:.3f}".format(*sklearn_loop(trials, Xtr, ytr, Xte, yte))
        out.append(dict(name=name, n=len(ytr), d=Xtr.shape[1], rows=rows, sk=sk,
                        n_val=int(holdout_mask(Xtr, ytr, 0.2, 0).sum())))
    return out


def error_diff(rows, e):
    """Validation error with the bandit (slack ``e``) minus the error without it."""
    return rows[e]["val"] - rows["off"]["val"]


def within(dv):
    """Validation error with the bandit at most 1 pt above the error without it."""
    return dv <= 0.01 + 1e-12


def print_seed(seed, results):
    what = {"tupaq": "lr 1e-3..10, l2 1e-4..1e2, random features 1..10 x d with noise 1e-4..1e2",
            "gd": "gd, lr 1e-3..10, l2 1e-4..1e2",
            "mixed": "l2 1e-6..1, class_weight, solver lbfgs|gd|sgd, lr 1e-3..3"}[a.space]
    eps0 = EPSILONS[0]
    print(f"random search, {a.trials} configs ({what}); {ITERS} iterations per model, {a.slots} in flight; "
          f"bandit epsilon {eps0:g}, every {a.partial_iters} iterations"
          f"{' (first checkpoint only)' if a.check == 'once' and a.space == 'tupaq' else ''}; "
          f"metric {a.metric}; seed {seed}; budget arm: {EPOCH} iterations per model")
    print(f"{'dataset':<15} {'n':>5} {'d':>3} | {'cfg-passes off':>14} {'on':>6} {'saved':>6} "
          f"{'elim':>4} | {'budget':>6} {'saved':>6} | {'val err off':>11} {'on':>6} {'budget':>6} "
          f"{'base':>6} {'n val':>5} | {'test err off':>12} {'on':>6} | {'sec off':>7} {'on':>6} | "
          f"sklearn s, test err")
    tot = {"off": 0, "budget": 0}
    tot.update({e: 0 for e in EPSILONS})
    for r in results:
        rows = r["rows"]
        for arm in tot:
            tot[arm] += rows[arm]["cfg"]
        off, on, bud = rows["off"], rows[eps0], rows["budget"]
        print(f"{r['name']:<15} {r['n']:>5} {r['d']:>3} | {off['cfg']:>14} {on['cfg']:>6} "
              f"{1 - on['cfg'] / off['cfg']:>6.1%} {on['eliminated']:>4} | {bud['cfg']:>6} "
              f"{1 - bud['cfg'] / off['cfg']:>6.1%} | {off['val']:>11.4f} {on['val']:>6.4f} "
              f"{bud['val']:>6.4f} {off['baseline']:>6.4f} {r['n_val']:>5} | {off['test']:>12.4f} "
              f"{on['test']:>6.4f} | {off['secs']:>7.1f} {on['secs']:>6.1f} | {r['sk']}", flush=True)
    print(f"total configuration-passes: off {tot['off']}, bandit {tot[eps0]} "
          f"(saved {1 - tot[eps0] / tot['off']:.1%}), budget {tot['budget']} "
          f"(saved {1 - tot['budget'] / tot['off']:.1%})")
    print("trade-off (saved configuration-passes; validation error with the bandit minus without, pt):")
    for e in EPSILONS:
        dvs = [(r["name"], error_diff(r["rows"], e)) for r in results]
        per = ", ".join(f"{name} {100 * dv:+.2f}" for name, dv in dvs)
        ok = sum(1 for _, dv in dvs if within(dv))
        print(f"  epsilon {e:g}: saved {1 - tot[e] / tot['off']:.1%}; {per}; within 1 pt on {ok} of "
              f"{len(dvs)} datasets")


def print_summary(by_seed):
    """Over several random searches: per dataset the mean validation errors and how many
    searches kept the bandit within 1 pt; passes saved over all of them."""
    seeds = sorted(by_seed)
    names = [r["name"] for r in by_seed[seeds[0]]]
    print(f"\nover {len(seeds)} random searches (seeds {', '.join(map(str, seeds))}):")
    for e in EPSILONS:
        print(f"  epsilon {e:g}")
        print(f"  {'dataset':<15} | {'mean val err off':>16} {'on':>7} {'diff pt':>8} | {'searches within 1 pt':>20} "
              f"| {'passes saved':>12}")
        off_all = on_all = means_ok = 0
        for i, name in enumerate(names):
            rs = [by_seed[s][i]["rows"] for s in seeds]
            off = float(np.mean([r["off"]["val"] for r in rs]))
            on = float(np.mean([r[e]["val"] for r in rs]))
            ok = sum(1 for r in rs if within(error_diff(r, e)))
            means_ok += within(on - off)
            c_off, c_on = sum(r["off"]["cfg"] for r in rs), sum(r[e]["cfg"] for r in rs)
            off_all, on_all = off_all + c_off, on_all + c_on
            print(f"  {name:<15} | {off:>16.4f} {on:>7.4f} {100 * (on - off):>+8.2f} | {ok:>14} of {len(rs):<3} "
                  f"| {1 - c_on / c_off:>12.1%}")
        all_ok = sum(all(within(error_diff(r["rows"], e)) for r in by_seed[s]) for s in seeds)
        print(f"  all: {1 - on_all / off_all:.1%} fewer configuration-passes; mean validation error within 1 pt "
              f"on {means_ok} of {len(names)} datasets; searches within 1 pt on every dataset: {all_ok} of "
              f"{len(seeds)}")


def parse_seeds(text):
    """'7' or '1,2,5' or '1-10' (or a mix) -> sorted list of seeds."""
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return sorted(out)


def main():
    seeds = parse_seeds(a.seeds) if a.seeds else [a.seed]
    if a.jobs > 1 and len(seeds) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(a.jobs, len(seeds)), mp_context=multiprocessing.get_context("fork")) as ex:
            results = dict(zip(seeds, ex.map(run_seed, seeds)))
    else:
        results = {s: run_seed(s) for s in seeds}
    for s in seeds:
        print_seed(s, results[s])
    if len(seeds) > 1:
        print_summary(results)


if __name__ == "__main__":
    main()
