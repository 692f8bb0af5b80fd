"""Grouped learning: grouped vs GTP vs MTP vs DP (2 worker backends) vs one backend vs the client,
for GLMs (algebraic), the PyTorch MLP (sequential) and LightGBM (sampling).

Two skewed data sets: 'criteo' (one group holds ~25% of the rows, long tail) and 'device'
(two dominant groups, the paper's Criteo-Device case). End-to-end wall time and server CPU
(all backends, workers included) per strategy; the client alternative is psycopg COPY +
pandas groupby + scikit-learn, one model at a time per group, the groups spread over as many
processes as the worker backends (2) by joblib, largest first; the same on one core is printed
too. Also prints train_groups' own estimates (explain_train_groups) beside the measured runs,
and the cost model's makespan estimates for 4, 8 and 16 workers.

The MLP and LightGBM cases (``--patterns``) run on the criteo-like data with at most
``--pattern-rows`` rows, every strategy (MTP: a task per config epoch block / boosting run on
a worker holding a copy of the group; DP: synchronous per-step data-parallel SGD for the MLP,
LightGBM's data-parallel mode for LightGBM); their client alternative is COPY + pandas
groupby + a plain PyTorch loop / ``lightgbm.train`` per config and group (joblib over the
groups, as for the GLM). The tasks each
strategy ran (``groupml.run_schedule`` kinds) and the planner's estimates for 2-16 workers are
printed too.

    python bench/bench_grouped.py [--rows 400000] [--quick] [--patterns glm,mlp,lightgbm] [--repeat 2]

Every strategy runs --repeat rounds (round-robin, so drift and the first run's warm-up
spread over all of them); the fastest run of each is reported with its server CPU.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import time

import numpy as np
import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyudf"))

from groupml.datagen import create_table, grouped_classification  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402
from groupml.learners import holdout_mask  # noqa: E402
from groupml.planner import choose_strategy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _client import over_groups  # noqa: E402

GRID = {"l2": [0.001, 0.01, 0.1, 1.0], "max_iter": 50}
MLP_SPEC = {"method": "grid", "epoch_iters": 1,
            "space": {"lr": [0.01, 0.003], "layers": ["16"], "epochs": [3], "batch_size": [64]}}
LGBM_SPEC = {"method": "grid", "epoch_iters": 10,
             "space": {"num_leaves": [15, 31], "num_boost_round": [30], "min_data_in_leaf": [20]}}
PATTERN_RUNS = {"mlp": (MLP_SPEC, ("grouped", "gtp", "mtp", "dp", "auto")),
                "lightgbm": (LGBM_SPEC, ("grouped", "gtp", "mtp", "dp", "auto"))}


def _copy_frame(dsn, d):
    """COPY (csv) of the table into a pandas frame: the client's loading."""
    import pandas as pd

    feats = [f"f{j + 1}" for j in range(d)]
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        buf = io.StringIO()
        with cur.copy(f"COPY (SELECT country, {', '.join(feats)}, clicked::int FROM t) TO STDOUT (FORMAT csv)") as cp:
            for chunk in cp:
                buf.write(bytes(chunk).decode())
    buf.seek(0)
    return pd.read_csv(buf, header=None, names=["country"] + feats + ["clicked"]), feats


def _client_groups(df, feats):
    """``(key, rows, (X, y))`` of every group, for :func:`_client.over_groups`."""
    for key, g in df.groupby("country"):
        yield key, len(g), (g[feats].to_numpy(), g["clicked"].to_numpy().astype(float))


def _pattern_group(X, y, model):
    """One group's configs, one after another: a plain PyTorch loop or ``lightgbm.train``."""
    d = X.shape[1]
    val = holdout_mask(X, y, 0.2, 0)
    if val.all() or (~val).sum() < 2 or np.unique(y[~val]).size < 2:
        return None
    if model == "mlp":
        import torch
        torch.set_num_threads(1)
        Xt = torch.tensor((X - X[~val].mean(0)) / (X[~val].std(0) + 1e-12), dtype=torch.float32)
        yt = torch.tensor(y, dtype=torch.float32)
        tr = torch.from_numpy(np.flatnonzero(~val))
        for lr in MLP_SPEC["space"]["lr"]:
            net = torch.nn.Sequential(torch.nn.Linear(d, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
            opt = torch.optim.Adam(net.parameters(), lr=lr)
            for _ in range(3):
                perm = tr[torch.randperm(len(tr))]
                for s in range(0, len(perm), 64):
                    idx = perm[s:s + 64]
                    loss = torch.nn.functional.binary_cross_entropy_with_logits(net(Xt[idx]).squeeze(1), yt[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    else:
        import lightgbm as lgb
        for leaves in LGBM_SPEC["space"]["num_leaves"]:
            lgb.train({"objective": "binary", "num_leaves": leaves, "min_data_in_leaf": 20, "num_threads": 1,
                       "verbosity": -1}, lgb.Dataset(X[~val], label=y[~val]), num_boost_round=30)
    return True


def client_pattern(dsn, d, model, n_jobs):
    """COPY + pandas groupby + PyTorch / LightGBM, one config at a time per group, the groups
    over ``n_jobs`` processes (joblib, largest first; 1: one after another)."""
    t0, c0 = time.perf_counter(), time.process_time()
    df, feats = _copy_frame(dsn, d)
    over_groups(_pattern_group, ((k, n, a + (model,)) for k, n, a in _client_groups(df, feats)), n_jobs)
    return time.perf_counter() - t0, time.process_time() - c0


def pattern_estimates(model, spec, n_train):
    """The planner's makespan per strategy for p = 2, 4, 8, 16 (what train_groups plans)."""
    from groupml.executor.core import pattern_of, validate_any
    from groupml.executor.plan import make_plan, workload_of

    family, sp, _ = validate_any(model, spec, {})
    wl = workload_of(sp, family)
    out = {}
    for p in (2, 4, 8, 16):
        plan = make_plan(n_train, wl["n_configs"], wl["epochs"], p, "auto", pattern=pattern_of(family),
                         blocks=wl["blocks"])
        out[p] = {k: v.makespan for k, v in plan.estimates.items()} | {"chosen": plan.strategy}
    return out


def planner_estimates(conn, feats, spec, model):
    """{strategy: (estimated seconds, chosen)} of explain_train_groups with 2 workers and strategy
    'auto' ('backend': one backend); a worker strategy's estimate is its tasks' makespan plus the
    snapshot and coordination the one-backend row's explanation prices."""
    rows = conn.execute(f"SELECT strategy, bool_or(chosen), max(estimated_seconds), min(explanation) FROM "
                        f"groupml.explain_train_groups('t', ARRAY['country'], {feats}, 'clicked', %s, %s::jsonb, "
                        f"'{{}}', 2, 'auto') GROUP BY 1 ORDER BY 3", [model, json.dumps(spec)]).fetchall()
    got = {s: (e, c) for s, c, e, _ in rows}
    text = " ".join(x for s, _, _, x in rows if s == "backend")
    m = re.search(r"snapshot and coordination ([0-9.e+-]+) s", text)
    over = float(m.group(1)) if m else 0.0                # the same for every worker strategy
    return {s: (e + (over if s != "backend" else 0.0), c) for s, (e, c) in got.items()}


def dataset(kind, rows, d, seed):
    if kind == "criteo":
        data = grouped_classification(rows, 40, d, seed=seed, exponent=1.0)    # top group ~ 23%
    else:
        data = grouped_classification(rows, 30, d, seed=seed, exponent=0.3)
        rng = np.random.default_rng(seed)
        u = rng.random(rows)
        data["grp"] = np.where(u < 0.4, "D1", np.where(u < 0.8, "D2", data["grp"]))
    return data


def server_cpu(pid):
    """CPU seconds of the postmaster's children, live and exited."""
    tck = os.sysconf("SC_CLK_TCK")

    def stat(p):
        with open(f"/proc/{p}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    total = sum(int(x) for x in stat(pid)[13:15])   # cutime, cstime of reaped children
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                s = stat(name)
            except OSError:
                continue
            if int(s[1]) == pid:                      # ppid
                total += int(s[11]) + int(s[12])
    return total / tck


def postmaster_pid(conn):
    return int(open(conn.execute("SHOW data_directory").fetchone()[0] + "/postmaster.pid").readline())


def _glm_group(X, y):
    """One group's grid with scikit-learn, one config after another; the best validation accuracy."""
    from sklearn.linear_model import LogisticRegression

    val = holdout_mask(X, y, 0.2, 0)
    if val.all() or (~val).sum() < 2 or np.unique(y[~val]).size < 2:
        return None
    best = None
    for l2 in GRID["l2"]:
        m = LogisticRegression(C=1.0 / (l2 * (~val).sum()), max_iter=GRID["max_iter"])
        m.fit(X[~val], y[~val])
        acc = m.score(X[val], y[val])
        best = acc if best is None else max(best, acc)
    return best


def client_side(dsn, d, n_jobs):
    """COPY + pandas groupby + scikit-learn, the groups over ``n_jobs`` processes (joblib,
    largest first; 1: one after another). Wall and client CPU seconds (the CPU of joblib's
    worker processes is not counted)."""
    t0, c0 = time.perf_counter(), time.process_time()
    df, feats = _copy_frame(dsn, d)
    over_groups(_glm_group, _client_groups(df, feats), n_jobs)
    return time.perf_counter() - t0, time.process_time() - c0


def _client_rows(label, run, n_jobs):
    """The client lines: with ``n_jobs`` processes and, when that is more than one, on one core."""
    rows = []
    for n in ((n_jobs, 1) if n_jobs > 1 else (1,)):
        w, c = run(n)
        rows.append((f"client ({label}, {'joblib ' + str(n) + ' processes' if n > 1 else 'one core'})", w, c))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="80k rows, 10 features")
    ap.add_argument("--patterns", default="glm,mlp,lightgbm", help="comma list of glm, mlp, lightgbm")
    ap.add_argument("--pattern-rows", type=int, default=40_000, help="rows of the MLP / LightGBM cases")
    ap.add_argument("--repeat", type=int, default=2,
                    help="run the strategies this many rounds (round-robin) and keep each one's fastest run")
    args = ap.parse_args(argv)
    patterns = [p.strip() for p in args.patterns.split(",") if p.strip()]
    if args.quick:
        args.rows, args.features = 80_000, 10
    d = args.features
    feats = "ARRAY[" + ", ".join(f"'f{j + 1}'" for j in range(d)) + "]"
    results = {}
    with TempCluster() as cluster, psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")
        pm = postmaster_pid(conn)
        for kind in (("criteo", "device") if "glm" in patterns else ()):
            conn.execute("DROP TABLE IF EXISTS t")
            data = dataset(kind, args.rows, d, 5)
            create_table(conn, "t", data)
            conn.execute("VACUUM ANALYZE t")
            sizes = {}
            for g in data["grp"]:
                sizes[g] = sizes.get(g, 0) + 1
            share = max(sizes.values()) / args.rows
            best_of = {}
            for _ in range(args.repeat):
                for label, workers, strategy in (("one backend", 1, "auto"), ("grouped", 2, "grouped"),
                                                 ("gtp", 2, "gtp"), ("mtp", 2, "mtp"), ("dp", 2, "dp"),
                                                 ("auto", 2, "auto")):
                    c0, t0 = server_cpu(pm), time.perf_counter()
                    run = conn.execute(f"CALL groupml.train_groups('t', ARRAY['country'], {feats}, 'clicked', "
                                       f"'logistic', %s::jsonb, '{{}}', NULL, workers => {workers}, strategy => %s)",
                                       [json.dumps(GRID), strategy]).fetchone()[0]
                    wall, cpu = time.perf_counter() - t0, server_cpu(pm) - c0
                    chosen = conn.execute("SELECT strategy FROM groupml.grouped_runs WHERE run_id = %s",
                                          [run]).fetchone()
                    name = label if label != "auto" else f"auto->{chosen[0] if chosen else 'one backend'}"
                    best_of[label] = min(best_of.get(label, (name, wall, cpu)), (name, wall, cpu), key=lambda r: r[1])
            rows = list(best_of.values())
            rows += _client_rows("COPY+pandas+sklearn", lambda n: client_side(cluster.dsn(), d, n), 2)
            planned = planner_estimates(conn, feats, GRID, "logistic")
            n_train = {g: int(n * 0.8) for g, n in sizes.items()}
            preds = {}
            for p in (2, 4, 8, 16):
                plan = choose_strategy(n_train, len(GRID["l2"]), GRID["max_iter"], p)
                preds[p] = {k: v.makespan for k, v in plan.estimates.items()} | {"chosen": plan.strategy}
            results[kind] = (share, len(sizes), rows, preds, planned)
        for model in [p for p in patterns if p in PATTERN_RUNS]:
            spec, strategies = PATTERN_RUNS[model]
            rows_n = min(args.rows, args.pattern_rows)
            conn.execute("DROP TABLE IF EXISTS t")
            data = dataset("criteo", rows_n, d, 5)
            create_table(conn, "t", data)
            conn.execute("VACUUM ANALYZE t")
            sizes = {}
            for g in data["grp"]:
                sizes[g] = sizes.get(g, 0) + 1
            best_of = {}
            for _ in range(args.repeat):
                for strategy in strategies:
                    c0, t0 = server_cpu(pm), time.perf_counter()
                    run = conn.execute(f"CALL groupml.train_groups('t', ARRAY['country'], {feats}, 'clicked', %s, "
                                       f"%s::jsonb, '{{}}', NULL, workers => 2, strategy => %s)",
                                       [model, json.dumps(spec), strategy]).fetchone()[0]
                    wall, cpu = time.perf_counter() - t0, server_cpu(pm) - c0
                    kinds = dict(conn.execute("SELECT kind, count(*) FROM groupml.run_schedule WHERE run_id = %s "
                                              "GROUP BY 1", [run]).fetchall())
                    name = strategy
                    if strategy == "auto":
                        chosen = conn.execute("SELECT strategy FROM groupml.grouped_runs WHERE run_id = %s",
                                              [run]).fetchone()[0]
                        name = f"auto->{chosen}"
                    row = (f"{name} {kinds}", wall, cpu)
                    best_of[strategy] = min(best_of.get(strategy, row), row, key=lambda r: r[1])
            rows = list(best_of.values())
            rows += _client_rows("COPY+pandas+" + ("torch" if model == "mlp" else "lightgbm"),
                                 lambda n: client_pattern(cluster.dsn(), d, model, n), 2)
            results[model] = (max(sizes.values()) / rows_n, len(sizes), rows, None, rows_n,
                              pattern_estimates(model, spec, {g: int(n * 0.8) for g, n in sizes.items()}))
    for kind, (share, ng, rows, preds, *rest) in results.items():  # GLM: rest = [planner estimates]
        if preds is None:
            print(f"\n== {kind} (criteo-like): {rest[0]} rows, {ng} groups, largest group {share:.0%}, {d} features, "
                  f"spec {json.dumps(PATTERN_RUNS[kind][0])}")
            best = min(w for name, w, _ in rows if not name.startswith("client"))
            client = min(w for name, w, _ in rows if name.startswith("client"))
            for name, wall, cpu in rows:
                print(f"  {name:<56} {wall:7.2f} s wall  {cpu:7.2f} s CPU   {wall / best:5.2f}x best strategy  "
                      f"{client / wall:5.2f}x faster than the fastest client")
            print("  planner makespan estimates (s, default unit costs):")
            for p, est in rest[1].items():
                print(f"    p={p:<3} " + "  ".join(f"{k} {v:.3g}" for k, v in est.items() if k != "chosen")
                      + f"  -> {est['chosen']}")
            continue
        print(f"\n== {kind}: {args.rows} rows, {ng} groups, largest group {share:.0%}, {d} features, "
              f"{len(GRID['l2'])} configs, max_iter {GRID['max_iter']}")
        best = min(w for name, w, _ in rows if name in ("grouped", "gtp", "mtp", "dp"))
        client = min(w for name, w, _ in rows if name.startswith("client"))
        for name, wall, cpu in rows:
            print(f"  {name:<50} {wall:7.2f} s wall  {cpu:7.2f} s CPU   {wall / best:5.2f}x best strategy  "
                  f"{client / wall:5.2f}x faster than the fastest client")
        planned = rest[0]
        print("  train_groups' own estimates (explain_train_groups, workers => 2, this host's unit costs; a worker "
              "strategy's with its snapshot and coordination) against the measured runs:")
        measured = {}
        for name, wall, _ in rows:                 # auto counts as a run of what it chose
            label = name.split("->", 1)[1] if name.startswith("auto->") else name
            measured[label] = min(wall, measured.get(label, wall))
        for name, (est, chosen) in planned.items():
            label = "one backend" if name == "backend" else name
            got = measured.get(label)
            print(f"    {label:<12} estimated {est:6.2f} s{'  (chosen)' if chosen else '           '}"
                  + (f"  measured {got:6.2f} s  ratio {got / est:5.2f}" if got and est > 0 else ""))
        print("  cost model makespan estimates (s, default unit costs):")
        for p, est in preds.items():
            print(f"    p={p:<3} " + "  ".join(f"{k} {v:.3g}" for k, v in est.items() if k != "chosen")
                  + f"  -> {est['chosen']}")


if __name__ == "__main__":
    main()
