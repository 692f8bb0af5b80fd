"""How close is the planner's makespan estimate to the measured run time, with unit costs
calibrated from executed tasks (groupml.planner.calibrate_unit_costs) vs the defaults?

Runs train_groups with 2 workers for every strategy (grouped, gtp, mtp, dp) of each model
family (logistic, mlp, lightgbm) on one generated data set, then, for every run, calibrates
the unit costs from the *other* runs of its family (leave-one-out: the tasks, trials and
workloads they recorded), plans the run's strategy with them and with the default
UnitCosts(), and prints estimate / measured training time: the span of the run's tasks in
groupml.run_schedule, first start to last finish -- what the planner's makespan prices. The
run's whole time (groupml.runs.seconds: also the snapshot build, planning and catalog
writes) is printed beside it.

    python bench/bench_calibration.py [--rows 20000] [--families logistic,mlp,lightgbm]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyudf"))

from groupml.datagen import create_table, grouped_classification  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402
from groupml.executor.plan import make_plan  # noqa: E402
from groupml.planner import calibrate_unit_costs  # noqa: E402

SPECS = {
    "logistic": ("algebraic", {"l2": [0.001, 0.1, 1.0]}),
    "mlp": ("sequential", {"method": "grid", "epoch_iters": 1,
                           "space": {"lr": [0.01, 0.003], "layers": ["8"], "epochs": [3], "batch_size": [64],
                                     "dropout": [0.1]}}),
    "lightgbm": ("sampling", {"method": "grid", "epoch_iters": 5,
                              "space": {"num_leaves": [7, 15], "num_boost_round": [15], "min_data_in_leaf": [10]}}),
}
STRATEGIES = ("grouped", "gtp", "mtp", "dp")
D = 5


def q(conn, sql, args=()):
    cur = conn.execute(sql, args)
    names = [c.name for c in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--families", default="logistic,mlp,lightgbm")
    args = ap.parse_args()
    families = args.families.split(",")
    feats = [f"f{j + 1}" for j in range(D)]
    with TempCluster() as c, psycopg.connect(c.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")
        create_table(conn, "clicks", grouped_classification(args.rows, 6, D, seed=3, exponent=1.1))
        for fam in families:
            for strategy in STRATEGIES:
                opts = '{"placement": "wrap_around"}' if strategy == "grouped" and fam != "logistic" else "{}"
                conn.execute("CALL groupml.train_groups('clicks', ARRAY['country'], %s, 'clicked', %s, %s::jsonb, "
                             "%s::jsonb, NULL, workers => 2, strategy => %s)",
                             [feats, fam, json.dumps(SPECS[fam][1]), opts, strategy])
        runs = q(conn, "SELECT r.run_id, r.family, r.seconds, g.strategy, g.plan FROM groupml.runs r "
                       "JOIN groupml.grouped_runs g USING (run_id) ORDER BY run_id")
        tasks = q(conn, "SELECT run_id, group_key::text AS group_key, kind, pass, worker, row_start, n_rows, trials, "
                        "started, finished FROM groupml.run_schedule")
        trials = q(conn, "SELECT run_id, group_key::text AS group_key, trial_id, params, "
                         "(metrics ->> 'iterations')::int AS iterations, (metrics ->> 'passes')::int AS passes "
                         "FROM groupml.trials")
    print(f"rows={args.rows} groups=6 d={D} workers=2 (estimate / measured training time; calibrated "
          f"leave-one-out)")
    print(f"{'family':9} {'strategy':8} {'run s':>6} {'training s':>10} {'default est':>11} {'ratio':>6} "
          f"{'calibrated est':>14} {'ratio':>6}")
    for r in runs:
        pattern = SPECS[r["family"]][0]
        others = [o for o in runs if o["family"] == r["family"] and o["run_id"] != r["run_id"]]
        ids = {o["run_id"] for o in others}
        meta = [dict({"run_id": o["run_id"], "d": D}, **{k: o["plan"]["workload"][k] for k in ("n_configs", "epochs")})
                for o in others]
        cal = calibrate_unit_costs([t for t in tasks if t["run_id"] in ids],
                                   [t for t in trials if t["run_id"] in ids], meta, pattern=pattern, d=D)
        sizes = {}
        for t in tasks:
            if t["run_id"] == r["run_id"]:
                sizes[t["group_key"]] = max(sizes.get(t["group_key"], 0), t["row_start"] + t["n_rows"])
        sizes = {i: n for i, n in enumerate(sizes.values())}
        wl = r["plan"]["workload"]
        default = make_plan(sizes, wl["n_configs"], wl["epochs"], 2, r["strategy"], pattern=pattern,
                            blocks=wl["blocks"]).makespan
        calibrated = make_plan(sizes, wl["n_configs"], wl["epochs"], 2, r["strategy"], pattern=pattern,
                               blocks=wl["blocks"], calibration=cal).makespan
        mine = [t for t in tasks if t["run_id"] == r["run_id"]]
        m = max(t["finished"] for t in mine) - min(t["started"] for t in mine)
        print(f"{r['family']:9} {r['strategy']:8} {r['seconds']:6.2f} {m:10.2f} {default:11.2f} {default / m:6.2f} "
              f"{calibrated:14.2f} {calibrated / m:6.2f}")


if __name__ == "__main__":
    main()
