"""The demo workload end to end, groupml vs the client-side alternative.

Same table, same 12-config logistic-regression grid, same validation split (groupml's
content-hash holdout, reproduced on the client), one run:

  ours-aggregate  SELECT country, groupml.learn_over_groups(...) FROM clicks GROUP BY country
  ours-procedure  CALL groupml.train_groups(...)   (packed float8send/string_agg loading)
  ours-2-workers  CALL groupml.train_groups(..., workers => 2)  (snapshot + two worker backends)
  client-copy     psycopg COPY ... (FORMAT binary) into numpy, groupby, scikit-learn per config, the
                  groups spread over N processes by joblib.Parallel(n_jobs=N), largest first
                  (N = the helper processes train_groups uses: every CPU, up to 4)
  client-copy-1core  the same, groups one after another on one core
  client-pandas   pandas.read_sql through SQLAlchemy, pandas groupby, scikit-learn per config (joblib, N)

Every ratio is against the fastest client path. --repeat R runs every path R times,
round-robin (ours and the client interleaved, so machine load hits both alike), and keeps
each path's fastest run.

The scikit-learn objective equals groupml's: C = 1 / (n_train * l2) (l2 = 0 -> C = inf, no penalty),
class_weight as given; lbfgs with scikit-learn's defaults otherwise (what an analyst runs).

    python bench/bench_demo.py [--rows 1000000] [--groups 50] [--features 20] [--quick] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyudf"))

from groupml.datagen import create_table, grouped_classification  # noqa: E402
from groupml.demo import DEMO_GRID  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402
from groupml.learners import holdout_mask  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _client import client_cores, over_groups  # noqa: E402


def configs():
    return [{"l2": l2, "class_weight": cw} for l2 in DEMO_GRID["l2"] for cw in DEMO_GRID["class_weight"]]


def sklearn_select(X, y, seed=0, fraction=0.2):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    val = holdout_mask(X, y, fraction, seed)
    Xtr, ytr, Xva, yva = X[~val], y[~val], X[val], y[val]
    if len(np.unique(ytr)) < 2 or len(yva) == 0:
        return None
    best = None
    for cfg in configs():
        kw = {"C": np.inf} if cfg["l2"] == 0 else {"C": 1.0 / (len(ytr) * cfg["l2"])}   # C = inf: no penalty
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            m = LogisticRegression(class_weight=cfg["class_weight"], **kw).fit(Xtr, ytr)
        acc = float((m.predict(Xva) == yva).mean())
        if best is None or acc > best[0]:
            best = (acc, cfg)
    return best


def _accuracies(fits):
    return {k: r[0] for k, r in fits.items() if r}


def client_pandas(url, feats, n_jobs):
    import pandas as pd
    import sqlalchemy

    eng = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    t0 = time.perf_counter()
    df = pd.read_sql("SELECT * FROM clicks", eng)
    t_load = time.perf_counter() - t0
    fits = over_groups(sklearn_select, ((country, len(g), (g[feats].to_numpy(np.float64),
                                                          g["clicked"].to_numpy(np.float64)))
                                        for country, g in df.groupby("country")), n_jobs)
    eng.dispose()
    return time.perf_counter() - t0, t_load, _accuracies(fits)


def copy_binary_to_numpy(conn, feats):
    """COPY (FORMAT binary) → numpy via a structured dtype (every field here is fixed width)."""
    buf = bytearray()
    cols = ", ".join(["country"] + feats + ["clicked"])
    with conn.cursor() as cur:
        with cur.copy(f"COPY (SELECT {cols} FROM clicks) TO STDOUT (FORMAT binary)") as cp:
            for chunk in cp:
                buf += chunk
    fields = [("nf", ">i2"), ("cl", ">i4"), ("country", "S2")]
    for f in feats:
        fields += [(f + "_l", ">i4"), (f, ">f8")]
    fields += [("yl", ">i4"), ("clicked", "u1")]
    dt = np.dtype(fields)
    body = memoryview(buf)[19:len(buf) - 2]
    rec = np.frombuffer(body, dtype=dt)
    X = np.column_stack([rec[f].astype(np.float64) for f in feats])
    return rec["country"], X, rec["clicked"].astype(np.float64)


def client_copy(dsn, feats, n_jobs):
    """COPY BINARY into numpy, then every group's search through :func:`over_groups`
    (``n_jobs`` processes, largest group first; 1: one after another)."""
    import psycopg

    t0 = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        country, X, y = copy_binary_to_numpy(conn, feats)
    t_load = time.perf_counter() - t0
    order = np.argsort(country, kind="stable")
    keys, starts = np.unique(country[order], return_index=True)
    bounds = list(starts) + [len(order)]
    items = []
    for i, k in enumerate(keys):
        idx = order[bounds[i]:bounds[i + 1]]
        items.append((k.decode(), len(idx), (X[idx], y[idx])))
    fits = over_groups(sklearn_select, items, n_jobs)
    return time.perf_counter() - t0, t_load, _accuracies(fits)


def ours_aggregate(conn, feats):
    t0 = time.perf_counter()
    rows = conn.execute(
        f"SELECT country, (f).status, (f).metrics->>'accuracy' FROM (SELECT country, groupml.learn_over_groups("
        f"ARRAY[{', '.join(feats)}], clicked, 'logistic', %s::jsonb) AS f FROM clicks GROUP BY country) s",
        [json.dumps(DEMO_GRID)]).fetchall()
    return time.perf_counter() - t0, {c: float(a) for c, s, a in rows if s == "ok"}


def ours_procedure(conn, feats, workers=1):
    t0 = time.perf_counter()
    run_id = conn.execute("CALL groupml.train_groups('clicks', ARRAY['country'], %s, 'clicked', 'logistic', "
                          "%s::jsonb, workers => %s)", [feats, json.dumps(DEMO_GRID), workers]).fetchone()[0]
    dt = time.perf_counter() - t0
    rows = conn.execute("SELECT group_key->>'country', metrics->>'accuracy' FROM groupml.best_models "
                        "WHERE run_id = %s AND status = 'ok'", [run_id]).fetchall()
    if workers != 1:        # what strategy 'auto' ran: one backend leaves no grouped_runs row
        got = conn.execute("SELECT strategy FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()
        RAN.append(f"{got[0]} on {workers} worker backends" if got else "one backend")
    return dt, {c: float(a) for c, a in rows}


#: what each run of the workers path ran (strategy 'auto' may pick one backend)
RAN = []


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="200k rows, 20 groups")
    ap.add_argument("--skip-pandas", action="store_true")
    ap.add_argument("--skip-single-core", action="store_true", help="leave out the one-core client line")
    ap.add_argument("--skip-aggregate", action="store_true", help="leave out learn_over_groups")
    ap.add_argument("--workers", type=int, default=2,
                    help="also run CALL train_groups(..., workers => N) (planner-driven, worker backends)")
    ap.add_argument("--client-jobs", type=int, default=None,
                    help="processes of the joblib client (default: the helper processes train_groups uses)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every path (round-robin); fastest kept")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.groups = 200_000, 20
    import psycopg

    n_jobs = client_cores(args.client_jobs)
    feats = [f"f{j + 1}" for j in range(args.features)]
    with TempCluster() as cluster, psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")
        create_table(conn, "clicks", grouped_classification(args.rows, args.groups, args.features, seed=0))
        conn.execute("SELECT count(*) FROM clicks")  # warm the cache for everyone
        paths = {}
        if not args.skip_aggregate:
            paths["ours-aggregate"] = lambda: _none_load(ours_aggregate(conn, feats))
        paths["ours-procedure"] = lambda: _none_load(ours_procedure(conn, feats))
        if args.workers > 1:
            paths[f"ours-{args.workers}-workers"] = lambda: _none_load(ours_procedure(conn, feats, args.workers))
        paths["client-copy"] = lambda: client_copy(cluster.dsn(), feats, n_jobs)
        if not args.skip_single_core:
            paths["client-copy-1core"] = lambda: client_copy(cluster.dsn(), feats, 1)
        if not args.skip_pandas:
            paths["client-pandas"] = lambda: client_pandas(cluster.url(), feats, n_jobs)
        results = {}
        for _ in range(max(1, args.repeat)):
            for name, run in paths.items():
                got = run()
                if name not in results or got[0] < results[name][0]:
                    results[name] = got
    print(f"\nworkload: {args.rows:,} rows, {args.groups} groups, {args.features} features, "
          f"{len(configs())} configs per group (logistic regression); client processes N = {n_jobs}; "
          f"fastest of {max(1, args.repeat)} run(s) per path; load average {os.getloadavg()[0]:.2f}\n")
    print(f"{'path':<18} {'seconds':>9} {'load s':>8} {'groups':>7} {'mean val acc':>13}")
    for name, (t, load, accs) in results.items():
        mean = np.mean(list(accs.values())) if accs else float("nan")
        print(f"{name:<18} {t:9.2f} {'' if load is None else f'{load:8.2f}':>8} {len(accs):7d} {mean:13.4f}")
    if RAN:
        print(f"\nours-{args.workers}-workers (strategy 'auto') ran: {', '.join(RAN)}")
    fastest = min((k for k in results if k.startswith("client")), key=lambda k: results[k][0])
    fastest_client = results[fastest][0]
    print(f"\nfastest client path: {fastest}")
    for ours in [k for k in results if k.startswith("ours")]:
        t, _, accs = results[ours]
        ref = results["client-copy"][2]
        common = sorted(set(accs) & set(ref))
        dacc = np.mean([accs[c] for c in common]) - np.mean([ref[c] for c in common])
        print(f"{ours}: {fastest_client / t:.2f}x faster than the fastest client path; "
              f"mean accuracy difference {dacc * 100:+.2f} pt over {len(common)} groups")


def _none_load(got):
    """(seconds, accuracies) of a groupml path as (seconds, None, accuracies)."""
    return got[0], None, got[1]


if __name__ == "__main__":
    main()
