"""Ingest into numpy: training snapshot (packed float8 blocks) vs client COPY BINARY vs the aggregate path.

Target: >= 2M rows/s (20 float8 features + label) from the snapshot into numpy in one backend.

    python bench/bench_ingest.py [--rows 1000000] [--groups 50] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyudf"))

from groupml.datagen import create_table, grouped_classification  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402

D = 20
FEATS = [f"f{j + 1}" for j in range(D)]

IN_BACKEND = """
import time
from groupml.db import backend_session
from groupml.catalog import snapshot_groups
from groupml.executor.snapshot import build_snapshot
from groupml.executor.worker import load_shard
s = backend_session()
cols = {c: 'double precision' for c in %(feats)r}
cols['clicked'] = 'boolean'
t0 = time.perf_counter()
sid = build_snapshot(s, 'clicks', ['country'], %(feats)r, 'clicked', cols, seed=0, fraction=0.2)
t1 = time.perf_counter()
n = 0
t2 = time.perf_counter()
for g in snapshot_groups(s, sid):
    M = load_shard(s, sid, g['group_no'], [[b, 0, r] for b, r in enumerate(g['train_rows'])], %(d)d)
    n += M.shape[0]
t3 = time.perf_counter()
plpy.notice('RESULT %%d %%d %%.6f %%.6f' %% (sid, n, t1 - t0, t3 - t2))
"""


def copy_binary_numpy(dsn: str, n_cols: int):
    t0 = time.perf_counter()
    cols = ", ".join(FEATS) + ", clicked::int::float8"
    buf = bytearray()
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY (SELECT {cols} FROM clicks) TO STDOUT (FORMAT binary)") as cp:
            for chunk in cp:
                buf += chunk
    body = memoryview(buf)[19:-2]
    dt = np.dtype([("n", ">i2")] + [(f"c{j}", [("len", ">i4"), ("v", ">f8")]) for j in range(n_cols)])
    rec = np.frombuffer(body, dtype=dt)
    X = np.empty((rec.shape[0], n_cols))
    for j in range(n_cols):
        X[:, j] = rec[f"c{j}"]["v"]
    return X, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="300k rows, 20 groups")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.groups = 300_000, 20
    with TempCluster() as cluster, psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")
        data = grouped_classification(args.rows, args.groups, D, seed=1, exponent=1.1)
        create_table(conn, "clicks", data)
        conn.execute("VACUUM ANALYZE clicks")
        conn.execute("SELECT groupml.version()")       # puts the venv on this backend's sys.path
        notices = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute("DO $b$" + IN_BACKEND % {"feats": FEATS, "d": D} + "$b$ LANGUAGE plpython3u")
        _, sid, n_train, t_build, t_load = [x for x in notices if x.startswith("RESULT")][0].split()
        n_train, t_build, t_load = int(n_train), float(t_build), float(t_load)
        # again in a fresh backend (cold plan cache, warm OS cache)
        X, t_copy = copy_binary_numpy(cluster.dsn(), D + 1)
        t0 = time.perf_counter()
        conn.execute("SELECT country, groupml.learn_over_groups(ARRAY[" + ", ".join(FEATS) + "], clicked, "
                     "'logistic', '{\"max_iter\": 1}') FROM clicks GROUP BY country").fetchall()
        t_agg = time.perf_counter() - t0
    print(f"rows {args.rows}, groups {args.groups}, {D} float8 features + label")
    print(f"snapshot build (one scan, string_agg+float8send, split/shuffle/pack): {t_build:.3f} s "
          f"= {args.rows / t_build / 1e6:.2f} M rows/s")
    print(f"snapshot -> numpy in one backend (training rows {n_train}): {t_load:.3f} s "
          f"= {n_train / t_load / 1e6:.2f} M rows/s   (target >= 2 M rows/s)")
    print(f"client psycopg COPY (FORMAT binary) -> numpy: {t_copy:.3f} s = {X.shape[0] / t_copy / 1e6:.2f} M rows/s")
    print(f"learn_over_groups aggregate (C transition, max_iter 1): {t_agg:.3f} s "
          f"= {args.rows / t_agg / 1e6:.2f} M rows/s")
    print(f"ratio snapshot load / COPY BINARY: {(n_train / t_load) / (X.shape[0] / t_copy):.2f}x; "
          f"/ aggregate: {(n_train / t_load) / (args.rows / t_agg):.1f}x")


if __name__ == "__main__":
    main()
