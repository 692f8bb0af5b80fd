"""End-to-end multi-tenant model selection on real training: HYBRID vs ROUNDROBIN.

Starts a throwaway PostgreSQL 15 cluster (groupml.devcluster.TempCluster) with the
working tree's extension, creates one database per policy with the *same* tenants:
each tenant gets a generated dataset of its own difficulty (groupml.datagen, label noise
and size differ) and the same candidate list (logistic and svm over an l2 grid, plus
iteration budgets, so candidates differ in quality and in cost). Then

    CALL groupml.run_scheduler(policy => 'hybrid' | 'roundrobin')

trains every candidate of every tenant through the foundation's learners, committing
per step. From groupml.scheduler_log we rebuild the average accuracy-loss curve
(appendix A of ease.ml: best quality of the tenant's candidates minus best so far, the
tenant's full best before its first model) against cumulative training cost. Both
policies train the same candidates (once each, to completion), so each candidate is
charged the mean of its two measured costs in both curves: the curves differ only in
the order the scheduler chose.

The alternative a user would pick -- a client that pulls each tenant's table with
psycopg, trains scikit-learn models for every candidate tenant by tenant (round-robin)
-- is run too, for its wall time.

    python bench/bench_tenancy_e2e.py            # 8 tenants x 14 candidates, 1.2k..20k rows
    python bench/bench_tenancy_e2e.py --quick    # 5 tenants x 10 candidates, 300..5k rows (< 90 s)
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


def install_sql():
    import groupml_installer

    info = groupml_installer.pg_info(groupml_installer.find_pg_config(None))
    marker = os.path.join(groupml_installer.DEFAULT_PREFIX, "installed.txt")
    site = dict(line.strip().split("=", 1) for line in open(marker) if "=" in line)["site"]
    extdir = os.path.join(info["sharedir"], "extension")
    with open(os.path.join(extdir, f"groupml--{groupml_installer.package_version()}.sql"), "w") as fh:
        fh.write(groupml_installer.build_sql(site))


def candidates(quick: bool):
    """10 candidates (14 in the full run): l2 grids of logistic and svm, an undertrained cheap
    gradient-descent model and an expensive long one -- qualities differ by up to 0.25 and
    costs by up to 50x, which is what makes model selection and cost-awareness matter."""
    cands = [{"model": "logistic", "search": {"l2": [0, 0.01, 0.1, 1.0, 10.0]}},
             {"model": "svm", "search": {"l2": [0.01, 1.0, 100.0]}},
             {"model": "logistic", "params": {"solver": "gd", "lr": 0.01, "max_iter": 20}},
             {"model": "logistic", "params": {"solver": "gd", "lr": 0.5, "max_iter": 1000, "tol": 1e-9}}]
    if not quick:
        cands += [{"model": "svm", "search": {"l2": [0.1, 10.0]}},
                  {"model": "logistic", "params": {"class_weight": "balanced", "l2": 0.01}},
                  {"model": "logistic", "params": {"solver": "gd", "lr": 0.1, "max_iter": 300}}]
    return cands


#: (rows, features, label noise): small/wide datasets need regularisation, noisy ones cap accuracy.
TENANTS = [(300, 40, 0.5), (1000, 20, 1.0), (3000, 10, 2.0), (600, 30, 0.3), (5000, 8, 4.0),
           (2000, 25, 0.8), (800, 15, 1.5), (4000, 30, 0.6)]


def tenants(args):
    """(name, rows, features, noise): different sizes and difficulties."""
    return [(f"t{i}", int(rows * args.scale), d, noise) for i, (rows, d, noise) in enumerate(TENANTS[:args.tenants])]


def setup_db(cluster, name, args):
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    conn = psycopg.connect(cluster.dsn(name), autocommit=True)
    conn.execute("CREATE EXTENSION groupml CASCADE")
    cands = json.dumps(candidates(args.quick))
    # Past jobs, trained completely before the measured tenants arrive: the "training set" of
    # the paper from which the GP prior (mean and model-to-model kernel) is estimated.
    for i in range(args.history):
        rows, d, noise = TENANTS[(i + 3) % len(TENANTS)]
        data = grouped_classification(n_rows=int(rows * args.scale), n_groups=1, n_features=d,
                                      seed=500 + i, noise=noise * (0.7 + 0.2 * (i % 3)))
        create_table(conn, f"past_{i}", data, group_col="grp", label_col="y")
        conn.execute("SELECT groupml.create_tenant(%s)", [f"past{i}"])
        conn.execute("SELECT groupml.submit_job(%s, %s, %s, 'y', %s)",
                     [f"past{i}", f"past_{i}", [f"f{j + 1}" for j in range(d)], cands])
    if args.history:
        conn.execute("CALL groupml.run_scheduler(policy => 'roundrobin')")
    first_step = conn.execute("SELECT coalesce(max(step), 0) FROM groupml.observations").fetchone()[0]
    for i, (t, rows, d, noise) in enumerate(tenants(args)):
        data = grouped_classification(n_rows=rows, n_groups=1, n_features=d, seed=100 + i, noise=noise)
        create_table(conn, f"data_{t}", data, group_col="grp", label_col="y")
        conn.execute("SELECT groupml.create_tenant(%s)", [t])
        feats = [f"f{j + 1}" for j in range(d)]
        conn.execute("SELECT groupml.submit_job(%s, %s, %s, 'y', %s)", [t, f"data_{t}", feats, cands])
    return conn, first_step


def run_policy(conn, policy, first_step):
    t0 = time.perf_counter()
    conn.execute("CALL groupml.run_scheduler(policy => %s)", [policy])
    wall = time.perf_counter() - t0
    log = conn.execute("SELECT step, job_id, candidate, coalesce(quality, 0), cost_seconds "
                       "FROM groupml.scheduler_log WHERE step > %s ORDER BY step", [first_step]).fetchall()
    return wall, log


def loss_curve(log, cost_of, best_of):
    jobs = sorted(best_of)
    best = {j: 0.0 for j in jobs}
    cum, xs, ys = 0.0, [0.0], [float(np.mean([best_of[j] for j in jobs]))]
    for _step, job, cand, q, _sec in log:
        cum += cost_of[(job, cand)]
        best[job] = max(best[job], q)
        xs.append(cum)
        ys.append(float(np.mean([best_of[j] - best[j] for j in jobs])))
    return np.array(xs), np.array(ys)


def _sweep_cost(log, cost_of):
    seen, cum = set(), 0.0
    jobs = {r[1] for r in log}
    for _s, job, cand, _q, _sec in log:
        cum += cost_of[(job, cand)]
        seen.add(job)
        if seen == jobs:
            return cum
    return cum


def on_grid(xs, ys, grid):
    pos = np.searchsorted(xs, grid, side="right") - 1
    return ys[np.clip(pos, 0, len(ys) - 1)]


def client_side(cluster, name, args):
    """The user's alternative: pull each table with psycopg, train scikit-learn candidates in turn."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    t0 = time.perf_counter()
    n_models = 0
    with psycopg.connect(cluster.dsn(name)) as conn:
        for t, _rows, d, _noise in tenants(args):
            feats = ", ".join(f"f{j + 1}" for j in range(d))
            arr = np.array(conn.execute(f"SELECT {feats}, y::int FROM data_{t}").fetchall(), dtype=float)
            X, y = arr[:, :d], arr[:, d]
            cut = int(0.8 * len(y))
            for c in candidates(args.quick):
                grid = c.get("search", {}).get("l2", [c.get("params", {}).get("l2", 0.0)])
                for l2 in grid:
                    C = 1.0 / max(l2 * cut, 1e-6) if l2 else 1e6
                    model = (LinearSVC(C=C, max_iter=2000) if c["model"] == "svm"
                             else LogisticRegression(C=C, max_iter=500))
                    model.fit(X[:cut], y[:cut])
                    model.score(X[cut:], y[cut:])
                    n_models += 1
    return time.perf_counter() - t0, n_models


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tenants", type=int, default=None)
    ap.add_argument("--scale", type=float, default=None, help="multiplies every tenant's row count")
    ap.add_argument("--history", type=int, default=None, help="past jobs trained completely first (GP prior)")
    args = ap.parse_args(argv)
    args.tenants = min(args.tenants or (5 if args.quick else 8), len(TENANTS))
    args.scale = args.scale or (1.0 if args.quick else 4.0)
    args.history = args.history if args.history is not None else (4 if args.quick else 8)
    install_sql()
    t_start = time.perf_counter()
    cluster = TempCluster()
    cluster.start()
    try:
        results = {}
        for policy in ("hybrid", "roundrobin"):
            conn, first_step = setup_db(cluster, f"bench_{policy}", args)
            results[policy] = run_policy(conn, policy, first_step)
            conn.close()
        client_wall, client_models = client_side(cluster, "bench_hybrid", args)
    finally:
        cluster.stop()

    cost_samples, best_of = {}, {}
    for wall, log in results.values():
        for _s, job, cand, q, sec in log:
            cost_samples.setdefault((job, cand), []).append(sec)
            best_of[job] = max(best_of.get(job, 0.0), q)
    cost_of = {k: float(np.mean(v)) for k, v in cost_samples.items()}
    curves = {p: loss_curve(log, cost_of, best_of) for p, (_w, log) in results.items()}
    end = max(c[0][-1] for c in curves.values())
    grid = np.linspace(0.0, end, 201)
    vals = {p: on_grid(xs, ys, grid) for p, (xs, ys) in curves.items()}

    n_cand = len(results["hybrid"][1]) // args.tenants
    print(f"\nEnd-to-end multi-tenant selection: {args.tenants} tenants x {n_cand} candidates, "
          f"rows x{args.scale:g} ({', '.join(str(t[1]) for t in tenants(args))}), real training through "
          f"CALL groupml.run_scheduler; {args.history} past jobs trained first (GP prior)")
    for p, (wall, log) in results.items():
        print(f"  {p:<10} run_scheduler wall {wall:7.2f} s for {len(log)} steps "
              f"(training {sum(r[4] for r in log):6.2f} s)")
    print(f"  client-side psycopg + scikit-learn, round-robin over the same candidates: {client_wall:7.2f} s "
          f"for {client_models} models")
    print("\n average accuracy loss vs cumulative training cost (seconds, same per-candidate cost in both)")
    print(f" {'cost':>8} {'hybrid':>9} {'roundrobin':>11}")
    for frac in (0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0):
        i = int(round(frac * (len(grid) - 1)))
        print(f" {grid[i]:8.3f} {vals['hybrid'][i]:9.4f} {vals['roundrobin'][i]:11.4f}")
    # exact step-function areas: evaluate at every breakpoint of both curves
    fine = np.unique(np.concatenate([c[0] for c in curves.values()] + [[end]]))
    fv = {p: on_grid(xs, ys, fine) for p, (xs, ys) in curves.items()}
    area = {p: float(np.sum(v[:-1] * np.diff(fine)) / end) for p, v in fv.items()}
    # the first sweep (every tenant gets its first model) costs about the same for both policies;
    # after it, the curves differ only by whom the policy serves
    swept = max(_sweep_cost(log, cost_of) for _w, log in results.values())
    after = fine >= swept
    g2 = fine[after]
    area_after = {p: float(np.sum(v[after][:-1] * np.diff(g2)) / (end - swept)) for p, v in fv.items()}
    print(f" every tenant served once by cost {swept:.3f} s; mean loss after that: hybrid "
          f"{area_after['hybrid']:.4f}, roundrobin {area_after['roundrobin']:.4f}, ratio RR/hybrid "
          f"{area_after['roundrobin'] / max(area_after['hybrid'], 1e-12):.2f}")
    print(f"\n mean loss over the whole run (area / cost): hybrid {area['hybrid']:.4f}, "
          f"roundrobin {area['roundrobin']:.4f}, ratio RR/hybrid {area['roundrobin'] / area['hybrid']:.2f}")
    for thr in (0.02, 0.01, 0.005):
        reach = {}
        for p, v in vals.items():
            hit = np.nonzero(v <= thr)[0]
            reach[p] = float(grid[hit[0]]) if hit.size else float("inf")
        ratio = reach["roundrobin"] / reach["hybrid"] if reach["hybrid"] > 0 and np.isfinite(reach["hybrid"]) else float("nan")
        print(f" cost to reach avg loss <= {thr}: hybrid {reach['hybrid']:.3f} s, roundrobin "
              f"{reach['roundrobin']:.3f} s, speed-up {ratio:.2f}x")
    print(f"\ntotal wall time {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
