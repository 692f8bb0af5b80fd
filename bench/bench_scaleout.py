"""Scale-out: the same grouped workload on one server, on Citus (coordinator + 2 workers),
on two postgres_fdw shards, and the client baseline (COPY every row out, joblib over groups).

The workload: ``--rows`` rows (skewed groups: Zipf sizes), ``--features`` features, a
logistic regression per group with a grid over l2. Paths:

* ``one server``: ``CALL groupml.train_groups`` on a plain table (one backend);
* ``citus train_groups``: the same call on the table distributed by the group column over
  two workers: every node trains from its own shard tables;
* ``fdw learn_over_groups``: ``learn_over_groups`` grouped by the partition key of a table
  whose two partitions are foreign tables on two servers (partitionwise aggregate pushed down);
* ``fdw train_groups``: ``CALL groupml.train_groups`` on that table: each server trains its
  partition's groups;
* ``client``: ``COPY ... TO STDOUT`` of every row, pandas groupby, scikit-learn per group
  with joblib over groups (both cores).

Printed per path: wall time, bytes moved between servers (or to the client), and the
validation accuracy weighted by the groups' validation rows. Every node here shares the
same 2 cores, so the wall times of the multi-node paths are no scaling figure: the script
also prints the planner's projected makespan for 2, 8 and 32 nodes (groups placed whole on
the nodes holding them), from the cost model calibrated on the unit costs this run measured.

    python bench/bench_scaleout.py [--rows 1000000] [--groups 50] [--features 10]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time

import numpy as np
import psycopg
from psycopg import sql

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pyudf"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from groupml.datagen import create_table, grouped_classification  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402
from groupml.learners import holdout_mask  # noqa: E402

L2 = [0.001, 0.01, 0.1, 1.0]
SPEC = json.dumps({"l2": L2, "max_iter": 50})
DB = "postgres"


def feats_sql(d):
    return "ARRAY[" + ", ".join(f"'f{j + 1}'" for j in range(d)) + "]"


def train_groups(conn, table, d):
    t0 = time.perf_counter()
    run = conn.execute(f"CALL groupml.train_groups(%s, ARRAY['country'], {feats_sql(d)}, 'clicked', 'logistic', "
                       f"%s::jsonb, '{{}}'::jsonb, NULL)", [table, SPEC]).fetchone()[0]
    wall = time.perf_counter() - t0
    acc = conn.execute("SELECT sum((fit).score * (fit).n_validation) / sum((fit).n_validation) FROM groupml.models "
                       "WHERE run_id = %s AND (fit).score IS NOT NULL", [run]).fetchone()[0]
    plan = conn.execute("SELECT plan::text FROM groupml.grouped_runs WHERE run_id = %s", [run]).fetchone()
    moved = 0
    if plan and plan[0]:
        moved = sum(m["sent"] + m["received"] for m in json.loads(plan[0]).get("moved", {}).values())
    return wall, moved, float(acc)


def fdw_learn(conn, d):
    cols = ", ".join(f"f{j + 1}" for j in range(d))
    conn.execute("SET enable_partitionwise_aggregate = on")
    t0 = time.perf_counter()
    bytes_back, acc_num, acc_den = conn.execute(
        f"SELECT sum(pg_column_size(f)), sum((f).score * (f).n_validation) FILTER (WHERE (f).score IS NOT NULL), "
        f"sum((f).n_validation) FILTER (WHERE (f).score IS NOT NULL) FROM (SELECT country, "
        f"groupml.learn_over_groups(ARRAY[{cols}], clicked, 'logistic', %s::jsonb) AS f FROM events "
        f"GROUP BY country) s", [SPEC]).fetchone()
    return time.perf_counter() - t0, int(bytes_back), float(acc_num) / float(acc_den)


def client(dsn, d, jobs=2):
    """COPY every row to the client, then scikit-learn per group (joblib over groups)."""
    import pandas as pd
    from joblib import Parallel, delayed

    t0 = time.perf_counter()
    feats = [f"f{j + 1}" for j in range(d)]
    buf = io.BytesIO()
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY (SELECT country, {', '.join(feats)}, clicked::int FROM events_local) TO STDOUT "
                      f"(FORMAT csv)") as cp:
            for chunk in cp:
                buf.write(bytes(chunk))
    moved = buf.tell()
    buf.seek(0)
    df = pd.read_csv(buf, header=None, names=["country"] + feats + ["clicked"])
    parts = [(g[feats].to_numpy(), g["clicked"].to_numpy().astype(float)) for _, g in df.groupby("country")]
    res = Parallel(n_jobs=jobs)(delayed(_fit_group)(X, y) for X, y in parts)
    num = sum(a * n for a, n in res if a is not None)
    den = sum(n for a, n in res if a is not None)
    return time.perf_counter() - t0, moved, num / den


def _fit_group(X, y):
    from sklearn.linear_model import LogisticRegression

    val = holdout_mask(X, y, 0.2, 0)
    if val.all() or (~val).sum() < 2 or np.unique(y[~val]).size < 2:
        return None, 0
    best = None
    for l2 in L2:
        m = LogisticRegression(C=1.0 / (l2 * (~val).sum()), max_iter=50).fit(X[~val], y[~val])
        acc = m.score(X[val], y[val])
        best = acc if best is None else max(best, acc)
    return best, int(val.sum())


PROJECT = """
import json
from groupml.db import backend_session
from groupml.executor.costs import load_calibration
from groupml.executor.plan import make_plan, workload_of
from groupml.fitting import validate_request
args = json.loads(%s)
family, spec, _ = validate_request("logistic", args["spec"], {})
wl = workload_of(spec, family)
cal = load_calibration(backend_session(), model="logistic", pattern="algebraic", source=args["source"],
                       features=args["features"], search=args["spec"], d=len(args["features"]),
                       n_configs=wl["n_configs"])
train = {i: n for i, n in enumerate(args["train"])}
out = {n: make_plan(train, wl["n_configs"], wl["epochs"], n, "gtp", calibration=cal).estimates["gtp"].makespan
       for n in (2, 8, 32)}
plpy.notice(json.dumps({"makespan": out, "costs": cal.summary()}))
"""


def projection(conn, data, d):
    """The planner's makespan for 2, 8 and 32 nodes, groups whole on their node, with the unit
    costs calibrated on the runs of this benchmark (groupml.run_schedule), computed in the
    coordinator (where the catalog is)."""
    sizes = {}
    for g in data["grp"]:
        sizes[g] = sizes.get(g, 0) + 1
    args = {"spec": json.loads(SPEC), "source": "public.events", "features": [f"f{j + 1}" for j in range(d)],
            "train": [int(n * 0.8) for n in sorted(sizes.values(), reverse=True)]}
    notices = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary))
    conn.execute("DO $$" + PROJECT % repr(json.dumps(args)) + "$$ LANGUAGE plpython3u")
    got = json.loads(notices[-1])
    return {int(k): v for k, v in got["makespan"].items()}, got["costs"]


def citus_nodes(bindir):
    from multinode import node_settings, run_psql

    nodes = [TempCluster(settings=node_settings(bindir)) for _ in range(3)]
    for node in nodes:
        node.start()
        run_psql(node, "10-citus-node.sql")
    run_psql(nodes[0], "20-citus-coordinator.sql", coordinator_host="127.0.0.1", coordinator_port=nodes[0].port,
             worker_hosts="127.0.0.1,127.0.0.1", worker_ports=f"{nodes[1].port},{nodes[2].port}")
    return nodes


def fdw_nodes(data, keys):
    """A coordinator and two shard servers; ``events`` partitioned by country, half the groups
    on each server."""
    nodes = [TempCluster() for _ in range(3)]
    for node in nodes:
        node.start()
        with psycopg.connect(node.dsn(DB), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION groupml CASCADE")
    halves = [keys[0::2], keys[1::2]]
    for shard, mine in zip(nodes[1:], halves):
        part = {k: v[np.isin(data["grp"], mine)] for k, v in data.items()}
        with psycopg.connect(shard.dsn(DB), autocommit=True) as conn:
            create_table(conn, "events", part)
            conn.execute("ANALYZE events")
    with psycopg.connect(nodes[0].dsn(DB), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION postgres_fdw")
        cols = ", ".join(f"f{j + 1} float8" for j in range(sum(1 for k in data if k.startswith("f"))))
        conn.execute(f"CREATE TABLE events (id bigint, country text, {cols}, clicked boolean) PARTITION BY LIST "
                     f"(country)")
        for i, (shard, mine) in enumerate(zip(nodes[1:], halves), 1):
            conn.execute(sql.SQL("CREATE SERVER {} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host '127.0.0.1', "
                                 "port {}, dbname {}, extensions 'groupml', async_capable 'true')").format(
                sql.Identifier(f"shard{i}"), sql.Literal(str(shard.port)), sql.Literal(DB)))
            conn.execute(sql.SQL("CREATE USER MAPPING FOR postgres SERVER {} OPTIONS (user 'postgres')").format(
                sql.Identifier(f"shard{i}")))
            conn.execute(sql.SQL("CREATE FOREIGN TABLE {} PARTITION OF events FOR VALUES IN ({}) SERVER {} "
                                 "OPTIONS (table_name 'events')").format(
                sql.Identifier(f"events_{i}"), sql.SQL(", ").join(sql.Literal(str(k)) for k in mine),
                sql.Identifier(f"shard{i}")))
        conn.execute("ANALYZE events")
    return nodes


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--features", type=int, default=10)
    args = ap.parse_args(argv)
    d = args.features
    data = grouped_classification(args.rows, args.groups, d, seed=7, exponent=1.1)
    keys = sorted({str(k) for k in data["grp"]})
    sizes = sorted((int((data["grp"] == k).sum()) for k in keys), reverse=True)
    print(f"workload: {args.rows} rows, {len(keys)} groups (largest {sizes[0]}, median {sizes[len(sizes) // 2]}), "
          f"{d} features, logistic, grid of {len(L2)} l2 values; host cores: {os.cpu_count()}")
    results = []
    from multinode import citus_available

    probe = TempCluster()
    have_citus = citus_available(probe.bindir)
    if have_citus:
        nodes = citus_nodes(probe.bindir)
        try:
            with psycopg.connect(nodes[0].dsn(DB), autocommit=True) as conn:
                for table in ("events", "events_local"):
                    create_table(conn, table, data)
                conn.execute("SELECT create_distributed_table('events', 'country')")
                conn.execute("VACUUM ANALYZE events_local")
                results.append(("one server (train_groups, one backend)",) + train_groups(conn, "events_local", d))
                results.append(("citus train_groups (2 workers)",) + train_groups(conn, "events", d))
                results.append(("client (COPY all rows + joblib sklearn, 2 jobs)",) + client(nodes[0].dsn(DB), d))
                proj, cal = projection(conn, data, d)
        finally:
            for node in nodes:
                node.stop()
    else:
        print("citus: not installed (sudo bash ../shared/citus/build-citus.sh); its paths are skipped")
    fdw = fdw_nodes(data, keys)
    try:
        with psycopg.connect(fdw[0].dsn(DB), autocommit=True) as conn:
            results.append(("fdw learn_over_groups (2 shards)",) + fdw_learn(conn, d))
            results.append(("fdw train_groups (2 shards)",) + train_groups(conn, "events", d))
    finally:
        for node in fdw:
            node.stop()
    row_bytes = args.rows * (d + 1) * 8
    print(f"\n{'path':52s} {'wall s':>8s} {'bytes moved':>12s} {'accuracy':>9s}")
    for name, wall, moved, acc in results:
        print(f"{name:52s} {wall:8.2f} {moved:12d} {acc:9.4f}")
    print(f"(the rows as packed float8: {row_bytes} bytes)")
    if have_citus:
        base = next(r for r in results if r[0].startswith("client"))
        ours = next(r for r in results if r[0].startswith("citus"))
        print(f"citus train_groups moved {ours[2] / max(1, base[2]):.4f}x the client's bytes; wall "
              f"{base[1] / ours[1]:.2f}x faster than the client")
        print(f"projected makespan (planner, groups whole on their node; {cal}):")
        for n, secs in proj.items():
            print(f"  {n:3d} nodes: {secs:8.3f} s  ({proj[2] / secs:.2f}x the 2-node estimate)")


if __name__ == "__main__":
    main()
