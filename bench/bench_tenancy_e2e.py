"""End-to-end multi-tenant model selection on real training: HYBRID and GREEDY vs ROUNDROBIN.

Starts a throwaway PostgreSQL 15 cluster (groupml.devcluster.TempCluster) with the
working tree's extension. Per repetition it builds one template database: a few *past
jobs* trained completely first (the paper's "training set" from which the GP prior --
mean and model-to-model kernel -- is estimated), then the measured tenants, each with a
generated dataset of its own size, width and label noise (so the attainable accuracy and
the training cost differ per tenant) and the same candidate list (logistic and svm over
l2 grids, an l1 model, a hinge-loss svm, a cheap undertrained gradient-descent model and
an expensive long one: validation accuracies differ by up to 0.4 within a tenant and
training times by up to 50x). Each policy gets a copy of that database and runs

    CALL groupml.run_scheduler(policy => 'hybrid' | 'greedy' | 'eirate' | 'roundrobin')

which trains every candidate of every tenant through the foundation's learners (cost-aware,
committing per step). From groupml.scheduler_log we rebuild the average accuracy-loss
curve (appendix A of ease.ml: per tenant, the best accuracy of its candidates minus the
best accuracy trained so far; a tenant counts with its full best accuracy before its
first model) against cumulative training cost. All policies train the same candidates on
the same data, so each candidate is charged the mean of its measured seconds over the
policies' runs: the curves differ only by the order the scheduler chose.

Repetitions use fresh datasets (new seeds) and a shuffled tenant arrival order. Reported
on the repetition-averaged curves, with cost as a fraction of the total training cost:
loss at fixed cost points, the mean loss (area under the curve / cost) over the first
25 %, 50 % and 100 % of the cost, and the cost for the average loss to fall to 0.02 and
0.01, each as a ratio ROUNDROBIN / policy (> 1: the policy is better).

The alternative a user would pick -- a client that pulls each tenant's table with
psycopg and trains scikit-learn models for every candidate, tenant by tenant -- is run
once for its wall time.

    python bench/bench_tenancy_e2e.py            # 8 tenants x 14 candidates, 3 repetitions
    python bench/bench_tenancy_e2e.py --quick    # 6 tenants x 10 candidates, 3 repetitions
    python bench/bench_tenancy_e2e.py --families [--quick]

--families: candidates of every access pattern (logistic/svm GLMs, LightGBM, MLPs; 9 per
tenant) and two kinds of tenants: *linear* ones (groupml.datagen, a logistic model of the
features: a GLM is best and cheapest) and *interaction* ones (the label is the sign of
x1 * x2 plus a little of x3, with a share of labels flipped: GLMs stay near chance, trees
and MLPs find it). The past jobs are of both kinds, so the GP's model-to-model kernel can
learn that GLM and tree qualities part ways. The client alternative then trains the same
families with scikit-learn, LightGBM and scikit-learn's MLPClassifier.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "pyudf"))
sys.path.insert(0, os.path.join(ROOT, "installer"))

import psycopg  # noqa: E402

from groupml.datagen import create_table, grouped_classification  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402
from groupml.tenancy import best_interleaving_cost  # noqa: E402

POLICIES = ("hybrid", "greedy", "eirate", "roundrobin")
#: Families whose library is imported in a policy's backend before its timed run (--families).
WARM_UP: list = []
FRACTIONS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0)
AREAS = (0.25, 0.5, 1.0)
THRESHOLDS = (0.02, 0.01)


def install_sql():
    import groupml_installer

    info = groupml_installer.pg_info(groupml_installer.find_pg_config(None))
    marker = os.path.join(groupml_installer.DEFAULT_PREFIX, "installed.txt")
    site = dict(line.strip().split("=", 1) for line in open(marker) if "=" in line)["site"]
    extdir = os.path.join(info["sharedir"], "extension")
    with open(os.path.join(extdir, f"groupml--{groupml_installer.package_version()}.sql"), "w") as fh:
        fh.write(groupml_installer.build_sql(site))


def candidates(quick: bool):
    """10 candidates (14 in the full run). Measured on the quick tenants: the strongly
    regularised and the 10-step gradient-descent models are cheap and poor, the l2 grid of
    logistic/svm is where the best model usually is (which one depends on the tenant's
    rows per feature), the 1500-step gradient-descent model costs 10-50x an lbfgs fit."""
    cands = [{"model": "logistic", "search": {"l2": [0, 0.01, 1.0, 30.0]}},
             {"model": "svm", "search": {"l2": [0.01, 1.0]}},
             {"model": "logistic", "params": {"solver": "gd", "lr": 0.05, "max_iter": 10}},
             {"model": "logistic", "params": {"solver": "gd", "lr": 0.5, "max_iter": 1500, "tol": 1e-9}},
             {"model": "logistic", "params": {"solver": "gd", "l1": 0.01, "lr": 0.2, "max_iter": 300}},
             {"model": "svm", "params": {"solver": "gd", "loss": "hinge", "lr": 0.1, "max_iter": 200}}]
    if not quick:
        cands += [{"model": "svm", "search": {"l2": [0.1, 10.0]}},
                  {"model": "logistic", "params": {"class_weight": "balanced", "l2": 0.01}},
                  {"model": "logistic", "params": {"solver": "gd", "l1": 0.001, "lr": 0.2, "max_iter": 600}}]
    return cands


#: (rows, features, label noise): small/wide datasets need regularisation, noisy ones cap the
#: attainable accuracy, large ones make every candidate expensive.
TENANTS = [(400, 60, 0.5), (8000, 10, 1.0), (1500, 30, 2.0), (800, 100, 0.3), (20000, 20, 0.6),
           (3000, 40, 1.5), (600, 25, 0.8), (5000, 50, 1.2)]
#: Large, clean tenants (``--easy N`` adds the first N): every well-trained candidate is
#: near-perfect on them -- meant as the paper's U1/U2 case (section 5.3), where round-robin's
#: later turns on a solved tenant are spent for nothing. Measured (--quick --easy 2): it adds
#: no room, because cost-aware GP-UCB trains every tenant's cheap, undertrained models first
#: (accuracy 0.57-0.63 on them), so they are not solved early either.
EASY = [(12000, 10, 0.05), (6000, 20, 0.05)]
#: Past jobs (the GP prior's training set): other sizes and noise levels.
PAST = [(1000, 20, 1.0), (2500, 60, 0.7), (600, 40, 1.5), (4000, 15, 0.5), (1200, 80, 1.0), (9000, 30, 2.0),
        (700, 10, 0.4), (3000, 25, 1.2)]


def family_candidates(quick: bool):
    """9 candidates of three access patterns (10 in the full run): cheap GLMs, LightGBM from
    small to large, two MLPs. On interaction tenants the GLMs stay at 0.5-0.65 and trees/MLPs
    reach 0.8-0.9; on linear tenants a GLM is the best or within a point of it."""
    cands = [{"model": "logistic", "search": {"l2": [0, 1.0]}},
             {"model": "svm", "params": {"l2": 0.01}},
             {"model": "logistic", "params": {"solver": "gd", "lr": 0.05, "max_iter": 10}},
             {"model": "lightgbm", "params": {"num_leaves": 7, "num_boost_round": 30}},
             {"model": "lightgbm", "params": {"num_leaves": 15, "num_boost_round": 100}},
             {"model": "lightgbm", "params": {"num_leaves": 31, "num_boost_round": 300, "learning_rate": 0.05}},
             {"model": "mlp", "params": {"layers": [32], "epochs": 10, "batch_size": 64}},
             {"model": "mlp", "params": {"layers": [64, 32], "epochs": 20, "batch_size": 64}}]
    if not quick:
        cands += [{"model": "lightgbm", "params": {"num_leaves": 63, "num_boost_round": 200,
                                                   "min_data_in_leaf": 5}}]
    return cands


#: --families: (rows, features, noise, kind); noise is the logistic temperature for linear
#: tenants and the share of flipped labels for interaction ones.
FAMILY_TENANTS = [(3000, 20, 0.8, "linear"), (4000, 10, 0.1, "interaction"), (1500, 40, 0.5, "linear"),
                  (6000, 20, 0.05, "interaction"), (8000, 10, 1.0, "linear"), (2500, 30, 0.15, "interaction"),
                  (1000, 60, 0.4, "linear"), (5000, 15, 0.08, "interaction")]
FAMILY_PAST = [(2000, 15, 0.7, "linear"), (3000, 20, 0.1, "interaction"), (1200, 30, 1.0, "linear"),
               (2500, 10, 0.12, "interaction"), (4000, 40, 0.5, "linear"), (1500, 25, 0.05, "interaction"),
               (2500, 20, 1.2, "linear"), (3500, 30, 0.1, "interaction")]


def interaction_classification(n_rows, n_features, seed, flip):
    """label = [x1 x2 + 0.3 x3 > 0], a share ``flip`` of labels flipped; columns as datagen's."""
    rng = np.random.default_rng(seed)
    X = rng.normal(0, 1, (n_rows, n_features))
    y = (X[:, 0] * X[:, 1] + 0.3 * X[:, 2] > 0) ^ (rng.random(n_rows) < flip)
    out = {"id": np.arange(1, n_rows + 1, dtype=np.int64), "grp": np.array(["aa"] * n_rows)}
    for j in range(n_features):
        out[f"f{j + 1}"] = X[:, j]
    out["label"] = y.astype(np.float64)
    return out


def tenant_data(rows, d, noise, seed, kind="linear"):
    if kind == "interaction":
        return interaction_classification(rows, d, seed, noise)
    return grouped_classification(n_rows=rows, n_groups=1, n_features=d, seed=seed, noise=noise)


def candidate_list(args):
    return family_candidates(args.quick) if args.families else candidates(args.quick)


def tenant_specs(args, rep):
    """(name, rows, features, noise, data seed, kind) in this repetition's arrival order."""
    if args.families:
        mix = FAMILY_TENANTS[:args.tenants]
    else:
        mix = [(rows, d, noise, "linear") for rows, d, noise in TENANTS[:args.tenants] + EASY[:args.easy]]
    specs = [(f"t{i}", int(rows * args.scale), d, noise, 100 + 37 * rep + i, kind)
             for i, (rows, d, noise, kind) in enumerate(mix)]
    if rep:
        order = np.random.default_rng(rep).permutation(len(specs))
        specs = [specs[i] for i in order]
    return specs


def build_template(cluster, name, args, rep):
    """Past jobs trained to completion, then the measured tenants' jobs submitted (not run)."""
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(cluster.dsn(name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")
        cands = json.dumps(candidate_list(args))
        for i in range(args.history):
            if args.families:
                rows, d, noise, kind = FAMILY_PAST[i % len(FAMILY_PAST)]
            else:
                (rows, d, noise), kind = PAST[i % len(PAST)], "linear"
            data = tenant_data(int(rows * args.scale), d, noise, 500 + 37 * rep + i, kind)
            create_table(conn, f"past_{i}", data, group_col="grp", label_col="y")
            conn.execute("SELECT groupml.create_tenant(%s)", [f"past{i}"])
            conn.execute("SELECT groupml.submit_job(%s, %s, %s, 'y', %s)",
                         [f"past{i}", f"past_{i}", [f"f{j + 1}" for j in range(d)], cands])
        if args.history:
            conn.execute("CALL groupml.run_scheduler(policy => 'roundrobin')")
        first_step = conn.execute("SELECT coalesce(max(step), 0) FROM groupml.observations").fetchone()[0]
        specs = tenant_specs(args, rep)
        for t, rows, d, noise, seed, kind in specs:
            data = tenant_data(rows, d, noise, seed, kind)
            create_table(conn, f"data_{t}", data, group_col="grp", label_col="y")
            conn.execute("SELECT groupml.create_tenant(%s)", [t])
            conn.execute("SELECT groupml.submit_job(%s, %s, %s, 'y', %s)",
                         [t, f"data_{t}", [f"f{j + 1}" for j in range(d)], cands])
    return first_step, specs


def run_policy(cluster, template, name, policy, first_step):
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    with psycopg.connect(cluster.dsn(name), autocommit=True) as conn:
        if WARM_UP:   # import lightgbm/torch in this backend first, so no candidate is charged for it
            for family in WARM_UP:
                conn.execute("SELECT groupml.learn_over_groups(ARRAY[i::float8, (i %% 7)::float8], (i %% 2)::float8, "
                             "%s, '{}') FROM generate_series(1, 200) i", [family])
        t0 = time.perf_counter()
        conn.execute("CALL groupml.run_scheduler(policy => %s)", [policy])
        wall = time.perf_counter() - t0
        log = conn.execute("SELECT step, job_id, candidate, coalesce(quality, 0), cost_seconds "
                           "FROM groupml.scheduler_log WHERE step > %s ORDER BY step", [first_step]).fetchall()
    return wall, log


def loss_curve(log, cost_of, best_of):
    """(cumulative cost, average accuracy loss) after every step; starts at (0, mean best)."""
    jobs = sorted(best_of)
    best = {j: 0.0 for j in jobs}
    cum, xs, ys = 0.0, [0.0], [float(np.mean([best_of[j] for j in jobs]))]
    for _step, job, cand, q, _sec in log:
        cum += cost_of[(job, cand)]
        best[job] = max(best[job], q)
        xs.append(cum)
        ys.append(float(np.mean([best_of[j] - best[j] for j in jobs])))
    return np.array(xs), np.array(ys)


def on_grid(xs, ys, grid):
    pos = np.searchsorted(xs, grid, side="right") - 1
    return ys[np.clip(pos, 0, len(ys) - 1)]


def mean_loss(xs, ys, upto):
    """Exact mean of the step function over [0, upto] (area / upto)."""
    pts = np.unique(np.concatenate([xs[xs < upto], [0.0, upto]]))
    vals = on_grid(xs, ys, pts[:-1])
    return float(np.sum(vals * np.diff(pts)) / upto)


def mean_loss_between(xs, ys, lo, hi):
    """Exact mean of the step function over [lo, hi]."""
    pts = np.unique(np.concatenate([xs[(xs > lo) & (xs < hi)], [lo, hi]]))
    vals = on_grid(xs, ys, pts[:-1])
    return float(np.sum(vals * np.diff(pts)) / (hi - lo))


def first_reach(xs, ys, threshold):
    hit = np.nonzero(ys <= threshold)[0]
    return float(xs[hit[0]]) if hit.size else float("inf")


def interleaving_bound(log, cost_of, best_of, total, threshold):
    """Cheapest interleaving (fraction of the total cost) of this run's per-tenant sequences that
    reaches the threshold. Approximate as a bound for other policies: the coordinator
    re-estimates priors every 10 steps, so a tenant's sequence can shift with the interleaving."""
    jobs = sorted(best_of)
    seqs = {j: [] for j in jobs}
    for _s, job, cand, q, _sec in log:
        seqs[job].append((cost_of[(job, cand)] / total, q))
    return best_interleaving_cost([seqs[j] for j in jobs], [best_of[j] for j in jobs], threshold)


def sweep_cost(log, cost_of):
    """Cost at which every tenant had its first model."""
    seen, cum, jobs = set(), 0.0, {r[1] for r in log}
    for _s, job, cand, _q, _sec in log:
        cum += cost_of[(job, cand)]
        seen.add(job)
        if seen == jobs:
            return cum
    return cum


def client_fit_other(model, params, X, y):
    """The client's LightGBM (scikit-learn API) or scikit-learn MLP for one candidate."""
    if model == "lightgbm":
        import lightgbm

        return lightgbm.LGBMClassifier(num_leaves=params.get("num_leaves", 31),
                                       n_estimators=params.get("num_boost_round", 100),
                                       learning_rate=params.get("learning_rate", 0.1),
                                       min_child_samples=params.get("min_data_in_leaf", 20),
                                       n_jobs=1, verbose=-1).fit(X, y)
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier(hidden_layer_sizes=tuple(params.get("layers", [64, 32])),
                         batch_size=params.get("batch_size", 64), max_iter=params.get("epochs", 20),
                         learning_rate_init=0.001).fit(X, y)


def client_side(cluster, name, specs, args):
    """The user's alternative: pull each table with psycopg, train scikit-learn candidates in turn."""
    import warnings

    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    warnings.filterwarnings("ignore", module="sklearn")
    t0 = time.perf_counter()
    n_models = 0
    with psycopg.connect(cluster.dsn(name)) as conn:
        for t, _rows, d, _noise, _seed, _kind in specs:
            feats = ", ".join(f"f{j + 1}" for j in range(d))
            arr = np.array(conn.execute(f"SELECT {feats}, y::int FROM data_{t}").fetchall(), dtype=float)
            X, y = arr[:, :d], arr[:, d]
            cut = int(0.8 * len(y))
            for c in candidate_list(args):
                params = c.get("params", {})
                if c["model"] in ("lightgbm", "mlp"):
                    client_fit_other(c["model"], params, X[:cut], y[:cut]).score(X[cut:], y[cut:])
                    n_models += 1
                    continue
                for l2 in c.get("search", {}).get("l2", [params.get("l2", 0.0)]):
                    C = 1.0 / max(l2 * cut, 1e-6) if l2 else 1e6
                    if c["model"] == "svm":
                        model = LinearSVC(C=C, loss="hinge" if params.get("loss") == "hinge" else "squared_hinge",
                                          max_iter=max(1000, params.get("max_iter", 0)))
                    elif params.get("l1"):
                        model = LogisticRegression(penalty="l1", C=1.0 / (params["l1"] * cut), solver="saga",
                                                   max_iter=params.get("max_iter", 100))
                    else:
                        model = LogisticRegression(C=C, max_iter=params.get("max_iter", 100),
                                                   class_weight=params.get("class_weight"))
                    model.fit(X[:cut], y[:cut])
                    model.score(X[cut:], y[cut:])
                    n_models += 1
    return time.perf_counter() - t0, n_models


def run_repetition(cluster, args, rep):
    template = f"rep{rep}_base"
    first_step, specs = build_template(cluster, template, args, rep)
    runs = {p: run_policy(cluster, template, f"rep{rep}_{p}", p, first_step) for p in POLICIES}
    samples, best_of = {}, {}
    for _wall, log in runs.values():
        for _s, job, cand, q, sec in log:
            samples.setdefault((job, cand), []).append(sec)
            best_of[job] = max(best_of.get(job, 0.0), q)
    cost_of = {k: float(np.mean(v)) for k, v in samples.items()}
    total = sum(cost_of.values())
    curves = {}
    for p, (_w, log) in runs.items():      # cost as a fraction of the total (the same for all policies)
        xs, ys = loss_curve(log, cost_of, best_of)
        curves[p] = (xs / xs[-1], ys)
    sweep = max(sweep_cost(log, cost_of) for _w, log in runs.values()) / total
    qualities = {}
    for _s, job, cand, q, _sec in runs["roundrobin"][1]:
        qualities.setdefault(job, []).append(q)
    bound = {thr: interleaving_bound(runs["roundrobin"][1], cost_of, best_of, total, thr) for thr in THRESHOLDS}
    return {"specs": specs, "runs": runs, "curves": curves, "total": total, "sweep": sweep,
            "qualities": qualities, "costs": cost_of, "bound": bound}


def report(reps, args, client):
    grid = np.linspace(0.0, 1.0, 2001)
    per_rep = {p: [] for p in POLICIES}
    for r in reps:
        for p in POLICIES:
            xs, ys = r["curves"][p]
            per_rep[p].append(on_grid(xs, ys, grid))
    avg = {p: np.mean(v, axis=0) for p, v in per_rep.items()}

    r0 = reps[0]
    n_cand = len(r0["runs"]["roundrobin"][1]) // args.tenants
    print(f"\nEnd-to-end multi-tenant selection: {args.tenants} tenants x {n_cand} candidates, "
          f"{len(reps)} repetitions, rows x{args.scale:g}, {args.history} past jobs trained first (GP prior); "
          "real training through CALL groupml.run_scheduler (cost-aware)")
    for i, r in enumerate(reps):
        qs = r["qualities"]
        spread = [f"{min(v):.2f}-{max(v):.2f}" for v in qs.values()]
        costs = np.array(list(r["costs"].values()))
        walls = ", ".join(f"{p} {r['runs'][p][0]:.1f} s" for p in POLICIES)
        print(f"  rep {i}: tenants (rows, features, noise{', kind' if args.families else ''}) in arrival order "
              f"{[(s[1], s[2], s[3]) + ((s[5],) if args.families else ()) for s in r['specs']]}")
        print(f"         per-tenant accuracy range {', '.join(spread)}; candidate cost {1e3 * costs.min():.0f}"
              f"-{1e3 * costs.max():.0f} ms, total {r['total']:.2f} s; run_scheduler wall: {walls}")
    if client is not None:
        print(f"  client-side psycopg + scikit-learn, tenant by tenant over the same candidates (rep 0): "
              f"{client[0]:.2f} s for {client[1]} models")
    sweep = float(np.mean([r["sweep"] for r in reps]))
    print(f"\n average accuracy loss (mean over repetitions) at a fraction of the total training cost"
          f" (every tenant has a model by {sweep:.3f} on average)")
    print(f" {'cost':>6} " + " ".join(f"{p:>11}" for p in POLICIES))
    for f in FRACTIONS:
        i = int(round(f * (len(grid) - 1)))
        print(f" {f:6.2f} " + " ".join(f"{avg[p][i]:11.4f}" for p in POLICIES))
    print("\n mean loss over the first part of the cost (area / cost), ratio ROUNDROBIN / policy:")
    for upto in AREAS:
        vals = {p: float(np.mean([mean_loss(r["curves"][p][0], r["curves"][p][1], upto)
                                  for r in reps])) for p in POLICIES}
        per = {p: [mean_loss(r["curves"]["roundrobin"][0], r["curves"]["roundrobin"][1], upto)
                   / mean_loss(r["curves"][p][0], r["curves"][p][1], upto) for r in reps]
               for p in POLICIES if p != "roundrobin"}
        print(f"   first {upto:4.0%}: " + ", ".join(f"{p} {vals[p]:.4f}" for p in POLICIES) + "; "
              + ", ".join(f"{p} x{vals['roundrobin'] / vals[p]:.2f} (per rep "
                          f"{' '.join(f'{x:.2f}' for x in per[p])})" for p in per))
    # after every tenant has its first model (the same cheap sweep for every policy) the curves
    # differ only by whom the policy serves
    for hi in (0.5, 1.0):
        vals = {p: [mean_loss_between(r["curves"][p][0], r["curves"][p][1], r["sweep"], hi)
                    for r in reps] for p in POLICIES}
        m = {p: float(np.mean(v)) for p, v in vals.items()}
        print(f"   after the first sweep, up to {hi:4.0%}: " + ", ".join(f"{p} {m[p]:.4f}" for p in POLICIES)
              + "; " + ", ".join(f"{p} x{m['roundrobin'] / m[p]:.2f}" for p in POLICIES if p != "roundrobin"))
    for thr in THRESHOLDS:
        reach = {p: first_reach(grid, avg[p], thr) for p in POLICIES}
        print(f" cost to reach avg loss <= {thr} (averaged curve): "
              + ", ".join(f"{p} {reach[p]:.3f}" for p in POLICIES)
              + "; " + ", ".join(f"{p} x{reach['roundrobin'] / reach[p]:.2f}" for p in POLICIES if p != "roundrobin"))
        per = {p: float(np.mean([first_reach(r["curves"][p][0], r["curves"][p][1], thr) for r in reps]))
               for p in POLICIES}
        bound = float(np.mean([r["bound"][thr] for r in reps]))
        print("   per-repetition means: " + ", ".join(f"{p} {per[p]:.3f}" for p in POLICIES)
              + f"; best interleaving of round-robin's per-tenant sequences {bound:.3f} "
              f"(x{per['roundrobin'] / bound:.2f}: the most any tenant picker could gain)")
    return avg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tenants", type=int, default=None, help="tenants of the mixed list (6 quick, 8 full)")
    ap.add_argument("--easy", type=int, default=0, help="large, clean tenants added to them (0-2)")
    ap.add_argument("--repeats", type=int, default=3, help="repetitions with fresh data and arrival order")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every dataset's row count")
    ap.add_argument("--history", type=int, default=None, help="past jobs trained completely first (GP prior)")
    ap.add_argument("--no-client", action="store_true", help="skip the scikit-learn client run")
    ap.add_argument("--families", action="store_true",
                    help="GLM, LightGBM and MLP candidates; linear and interaction tenants")
    ap.add_argument("--json", default=None, help="also write every repetition's logs and costs to this file")
    args = ap.parse_args(argv)
    args.tenants = min(args.tenants or (6 if args.quick else 8), len(FAMILY_TENANTS if args.families else TENANTS))
    args.history = args.history if args.history is not None else (4 if args.quick else 8)
    if args.families:
        WARM_UP[:] = ["lightgbm", "mlp"]
    install_sql()
    t_start = time.perf_counter()
    cluster = TempCluster()
    cluster.start()
    try:
        reps = [run_repetition(cluster, args, rep) for rep in range(args.repeats)]
        client = None if args.no_client else client_side(cluster, "rep0_base", reps[0]["specs"], args)
    finally:
        cluster.stop()
    report(reps, args, client)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([{"specs": r["specs"], "total": r["total"],
                        "costs": [[j, c, v] for (j, c), v in r["costs"].items()],
                        "logs": {p: [list(map(lambda v: v if isinstance(v, (int, float, str)) else float(v), row))
                                     for row in r["runs"][p][1]] for p in POLICIES}} for r in reps], fh)
    print(f"\ntotal wall time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
