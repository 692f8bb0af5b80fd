"""TuPAQ Fig. 8 analogue: models trained per hour when k configurations share each data pass.

For d in {100, 1000} and k in {1, 2, 5, 10, 20}, trains the same M = 20 logistic-regression
configurations (different l2) for at most 20 L-BFGS iterations each (tol 1e-12), k at a time
(groupml.learners.GLMTrainer, W is d x k), and reports models/hour and the gain over k = 1.
The alternative a user would pick, scikit-learn's LogisticRegression (lbfgs, same 20
iterations, same data, one configuration at a time), runs in the same process. Every
timing is the fastest of --repeat runs (the machine is shared).

    python bench/bench_batching.py [--quick] [--rows N] [--threads T]
    python bench/bench_batching.py --scan [--quick]

--threads limits BLAS threads for both sides (default 1: the machine is shared; one
PostgreSQL backend is one process).

--scan measures TuPAQ's own regime, where every data pass is a scan of the table: a
throwaway cluster, one table of n rows and d float8 columns, a training snapshot, and
``CALL groupml.train_groups(..., workers => 1, strategy => 'gtp')`` with
``worker_memory_mb = 0`` so the worker re-reads the snapshot blocks on every pass
(Kingpin's spill mode: what happens when a group does not fit the worker's memory).
The same M configurations run with ``slots = k``; the time is the CALL's wall time.
"""
import argparse
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.environ.get("GROUPML_PYUDF") or
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyudf"))
from groupml.learners import GLMTrainer  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--quick", action="store_true", help="fewer rows (< 90 s)")
ap.add_argument("--rows", type=int, default=None, help="rows per dataset (default 100000 / 20000 for d=100 / 1000)")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--models", type=int, default=20)
ap.add_argument("--skip-sklearn", action="store_true")
ap.add_argument("--repeat", type=int, default=3, help="time every measurement this often, keep the fastest")
ap.add_argument("--scan", action="store_true", help="every pass scans the table (train_groups, spill mode)")
a = ap.parse_args()

KS = (1, 2, 5, 10, 20)


def data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.standard_normal(d) / np.sqrt(d) * 2
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ w)))).astype(np.float64)
    return X, y


def ours(X, y, l2s, k, iters):
    """Train every l2 config for `iters` iterations, k per batch; returns (seconds, passes)."""
    t0 = time.perf_counter()
    passes = 0
    for s in range(0, len(l2s), k):
        tr = GLMTrainer("logistic", X, y)
        for j, l2 in enumerate(l2s[s:s + k]):
            tr.add(j, {"l2": l2, "max_iter": iters, "tol": 1e-12})
        tr.run(iters)
        passes += tr.passes
    return time.perf_counter() - t0, passes


def sklearn_rate(X, y, l2s, iters, n_fit):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    n = X.shape[0]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for l2 in l2s[:n_fit]:
            LogisticRegression(C=1 / (n * l2), max_iter=iters, tol=1e-12).fit(X, y)
    return n_fit / (time.perf_counter() - t0) * 3600


def main():
    from threadpoolctl import threadpool_limits

    sizes = {100: 20000 if a.quick else 100000, 1000: 4000 if a.quick else 20000}
    if a.rows:
        sizes = {d: a.rows for d in sizes}
    models = 10 if a.quick else a.models
    l2s = list(np.logspace(-6, 0, models))
    print(f"logistic, {a.iters} L-BFGS iterations per model, {models} models, BLAS threads {a.threads}")
    print(f"{'d':>5} {'n':>7} {'k':>3} {'seconds':>8} {'passes':>6} {'models/h':>10} {'vs k=1':>7}"
          f" {'sklearn models/h':>17} {'vs sklearn':>10}")
    with threadpool_limits(limits=a.threads, user_api="blas"):
        for d, n in sizes.items():
            X, y = data(n, d)
            ours(X[:1000], y[:1000], l2s[:2], 2, 2)   # warm-up
            sk = None if a.skip_sklearn else max(sklearn_rate(X, y, l2s, a.iters, min(models, 3 if a.quick else 5))
                                                 for _ in range(a.repeat))
            base = None
            for k in KS:
                if k > models:
                    continue
                secs, passes = min(ours(X, y, l2s, k, a.iters) for _ in range(a.repeat))
                rate = models / secs * 3600
                base = base or rate
                sk_txt = f"{sk:17.0f} {rate / sk:9.2f}x" if sk else ""
                print(f"{d:>5} {n:>7} {k:>3} {secs:8.2f} {passes:6d} {rate:10.0f} {rate / base:6.2f}x {sk_txt}",
                      flush=True)


def scan_table(conn, n, d, seed=0):
    """Table ``t_<d>``: one group, d float8 features, label y; returns its name."""
    from psycopg import sql

    X, y = data(n, d, seed)
    name = f"t_{d}"
    cols = [sql.SQL("{} float8").format(sql.Identifier(f"f{j + 1}")) for j in range(d)]
    conn.execute(sql.SQL("CREATE TABLE {} (g int, {}, y float8)").format(sql.Identifier(name), sql.SQL(", ").join(cols)))
    with conn.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(name))) as cp:
        for i in range(n):
            cp.write_row([1, *X[i].tolist(), float(y[i])])
    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(name)))
    return name


def scan_run(conn, table, d, l2s, k, iters, snapshot):
    import json

    feats = [f"f{j + 1}" for j in range(d)]
    search = {"method": "grid", "space": {"l2": l2s, "max_iter": [iters], "tol": [1e-12]}, "slots": k}
    # whole_group_tasks false: a task per pass (the default runs an unsplit group's whole search
    # as one task that loads the rows once, which is not the scan-bound regime measured here)
    options = {"worker_memory_mb": 0, "keep_snapshot": True, "validation_fraction": 0.05,
               "whole_group_tasks": False}
    if snapshot is not None:
        options["snapshot"] = snapshot
    t0 = time.perf_counter()
    conn.execute("CALL groupml.train_groups(source => %s, group_by => ARRAY['g'], features => %s, label => 'y', "
                 "model => 'logistic', search => %s::jsonb, options => %s::jsonb, workers => 1, strategy => 'gtp')",
                 [table, feats, json.dumps(search), json.dumps(options)])
    secs = time.perf_counter() - t0
    run = conn.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
    sid = conn.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [run]).fetchone()[0]
    passes = conn.execute("SELECT count(*) FROM groupml.run_schedule WHERE run_id = %s AND kind = 'pass'",
                          [run]).fetchone()[0]
    if passes == 0:
        raise SystemExit(f"run {run} ran no pass task: the scan-bound regime was not measured")
    return secs, passes, sid


def scan_main():
    import psycopg

    from groupml.devcluster import TempCluster

    sizes = {100: 20000 if a.quick else 100000, 1000: 4000 if a.quick else 20000}
    if a.rows:
        sizes = {d: a.rows for d in sizes}
    models = 10 if a.quick else a.models
    l2s = [float(v) for v in np.logspace(-6, 0, models)]
    print(f"scan-bound (every pass re-reads the snapshot table): logistic, {a.iters} L-BFGS iterations per model, "
          f"{models} models, one worker backend, worker_memory_mb 0")
    print(f"{'d':>5} {'n':>7} {'k':>3} {'seconds':>8} {'passes':>6} {'models/h':>10} {'vs k=1':>7}")
    with TempCluster() as cluster, psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")
        for d, n in sizes.items():
            table = scan_table(conn, n, d)
            _, _, sid = scan_run(conn, table, d, l2s[:2], 2, 2, None)       # builds the snapshot; warm-up
            base = None
            for k in KS:
                if k > models:
                    continue
                secs, passes, _ = min(scan_run(conn, table, d, l2s, k, a.iters, sid) for _ in range(a.repeat))
                rate = models / secs * 3600
                base = base or rate
                print(f"{d:>5} {n:>7} {k:>3} {secs:8.2f} {passes:6d} {rate:10.0f} {rate / base:6.2f}x", flush=True)


if __name__ == "__main__":
    scan_main() if a.scan else main()
