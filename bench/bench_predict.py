"""Scoring a table with its per-group models: groupml.predict in SQL vs the client-side path.

One model per group is trained first (CALL groupml.train_groups; not timed): logistic
regression, LightGBM and an MLP. Then every row is scored with its group's model, each path in a
NEW session (a BI tool's query; first-use costs included):

  ours-rows    SELECT groupml.predict(m.fit, ARRAY[...]) FROM clicks JOIN groupml.models (one call per row)
  ours-batch   groupml.predict_batch(m.fit, x) per group, x = array_agg(ARRAY[...]) GROUP BY the group
               column (one call per group)
  client-copy  psycopg COPY (FORMAT binary) of the rows into numpy, the models fetched once,
               scored on the client (LightGBM's Booster from the same text; the GLM's weights;
               the MLP's torch network) in N chunks of rows over N processes (joblib; N = every
               CPU, up to 4 -- what train_groups' helper processes use)
  client-copy-1core  the same in one process, one chunk

The "x client" column is against the fastest client path.

Both groupml paths are run a second time in the same session (warm: models decoded and
checked once per session).

With a named model set (the run published as one, groupml.publish), best of --repeat runs each,
interleaved, all writing their predictions into a table:

  set-table    INSERT INTO scores SELECT * FROM groupml.predict_table('bench_<model>', 'clicks', 'id', ...)
  set-rows     INSERT INTO scores SELECT id, groupml.predict('bench_<model>', ARRAY[...], country) FROM clicks
  client-rt    the client path with its predictions COPYed back (FORMAT binary) into a table
  set-proba-table  INSERT INTO scores SELECT * FROM groupml.predict_proba_table(...) (classifiers),
               against client-rt-proba: the client's round trip of the probabilities

Then ours-rows runs under a parallel plan forced with 1 and with 2
workers (parallel_leader_participation off, so the workers do all the scoring; a new session; each query's
workers are new processes, so they decode and check the models anew). Every path's
predictions are compared with the client's.

    python bench/bench_predict.py [--rows 200000] [--groups 100] [--features 10] [--repeat 3] [--quick] [--sets-only]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyudf"))

from groupml.datagen import create_table, grouped_classification  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402
from groupml.learners import load_model  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _client import client_cores, over_chunks  # noqa: E402

SPECS = {"logistic": {"l2": [1e-3]},
         "lightgbm": {"num_boost_round": [50], "num_leaves": [15], "min_data_in_leaf": [10]},
         "mlp": {"layers": ["32,16"], "epochs": [5], "batch_size": [64]}}


def ours_rows(conn, feats, run_id):
    t0 = time.perf_counter()
    rows = conn.execute(f"SELECT c.id, groupml.predict(m.fit, ARRAY[{', '.join('c.' + f for f in feats)}]) "
                        f"FROM clicks c JOIN groupml.models m ON m.run_id = %s AND m.group_key->>'country' = c.country",
                        [run_id]).fetchall()
    return time.perf_counter() - t0, dict(rows)


def ours_rows_parallel(conn, feats, run_id, workers):
    """ours_rows under a parallel plan of ``workers`` workers that score every row (one worker:
    the planner's costs never prefer it to the leader alone, so force_parallel_mode runs the
    whole plan in one)."""
    conn.execute(f"SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; "
                 f"SET parallel_leader_participation = off; SET max_parallel_workers_per_gather = {int(workers)}; "
                 f"SET force_parallel_mode = {'on' if workers == 1 else 'off'}")
    try:
        plan = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN SELECT c.id, groupml.predict(m.fit, ARRAY[{', '.join('c.' + f for f in feats)}]) FROM clicks c "
            f"JOIN groupml.models m ON m.run_id = {int(run_id)} AND m.group_key->>'country' = c.country"))
        if f"Workers Planned: {workers}" not in plan:
            raise SystemExit(f"no parallel plan of {workers} workers:\n{plan}")
        return ours_rows(conn, feats, run_id)
    finally:
        conn.execute("RESET ALL")


def ours_batch(conn, feats, run_id):
    t0 = time.perf_counter()
    got = {}
    for ids, preds in conn.execute(
            f"SELECT b.ids, groupml.predict_batch(m.fit, b.x) FROM (SELECT country, array_agg(id ORDER BY id) AS ids, "
            f"array_agg(ARRAY[{', '.join(feats)}] ORDER BY id) AS x FROM clicks GROUP BY country) b "
            f"JOIN groupml.models m ON m.run_id = %s AND m.group_key->>'country' = b.country "
            f"WHERE (m.fit).status = 'ok'", [run_id]):
        got.update(zip(ids, preds))
    return time.perf_counter() - t0, got


def copy_rows(conn, feats):
    """COPY (FORMAT binary) of id, country, features into numpy (fixed-width fields)."""
    buf = bytearray()
    with conn.cursor() as cur:
        with cur.copy(f"COPY (SELECT id, country, {', '.join(feats)} FROM clicks) TO STDOUT (FORMAT binary)") as cp:
            for chunk in cp:
                buf += chunk
    fields = [("nf", ">i2"), ("il", ">i4"), ("id", ">i8"), ("cl", ">i4"), ("country", "S2")]
    for f in feats:
        fields += [(f + "_l", ">i4"), (f, ">f8")]
    rec = np.frombuffer(memoryview(buf)[19:len(buf) - 2], dtype=np.dtype(fields))
    return rec["id"].astype(np.int64), rec["country"], np.column_stack([rec[f].astype(np.float64) for f in feats])


def _score_chunk(start, stop, ids, country, X, models, model, proba=False):
    """Rows ``start:stop`` scored with their groups' models: {id: prediction} (``proba``: the
    probability of class 1)."""
    import lightgbm as lgb

    ids, country, X = ids[start:stop], country[start:stop], X[start:stop]
    got = {}
    for key, blob in models:
        rows = country == key.encode()
        if not rows.any():
            continue
        m = load_model(bytes(blob))          # the client keeps its own models; here: the same ones
        if model == "lightgbm":              # what a client does with a LightGBM text
            z = lgb.Booster(model_str=m.model_text).predict(X[rows], raw_score=True, num_threads=1)
            pred = 1.0 / (1.0 + np.exp(-z)) if proba else (z > 0).astype(np.float64)
        elif proba:
            pred = m.predict_proba(X[rows]).astype(np.float64)
        else:                                # the GLM's weights / the torch network, on the client
            pred = m.predict(X[rows]).astype(np.float64)
        got.update(zip(ids[rows].tolist(), pred.tolist()))
    return got


def client_copy(dsn, feats, run_id, model, n_jobs, proba=False):
    """The client-side path: rows and models pulled once, scored with numpy / LightGBM in
    ``n_jobs`` chunks of rows over as many processes (joblib; 1: in this process)."""
    import psycopg

    t0 = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        ids, country, X = copy_rows(conn, feats)
        models = [(k, bytes(b)) for k, b in conn.execute(
            "SELECT group_key->>'country', (fit).model FROM groupml.models WHERE run_id = %s "
            "AND (fit).status = 'ok'", [run_id]).fetchall()]
    t_load = time.perf_counter() - t0
    got = {}
    for part in over_chunks(_score_chunk, len(ids), n_jobs, (ids, country, X, models, model, proba)):
        got.update(part)
    return time.perf_counter() - t0, t_load, got


def _scores_table(conn):
    conn.execute("DROP TABLE IF EXISTS scores; CREATE TEMP TABLE scores (id bigint, prediction float8)")


def set_table(conn, feats, name, fn="predict_table"):
    """groupml.predict_table (or predict_proba_table) into a table."""
    _scores_table(conn)
    t0 = time.perf_counter()
    conn.execute(f"INSERT INTO scores SELECT * FROM groupml.{fn}(%s, 'clicks', 'id', %s)", [name, feats])
    t = time.perf_counter() - t0
    return t, dict(conn.execute("SELECT id, prediction FROM scores").fetchall())


def set_rows(conn, feats, name):
    """groupml.predict(model_set, ...) per row into a table."""
    _scores_table(conn)
    t0 = time.perf_counter()
    conn.execute(f"INSERT INTO scores SELECT id, groupml.predict(%s, ARRAY[{', '.join(feats)}], country) FROM clicks",
                 [name])
    t = time.perf_counter() - t0
    return t, dict(conn.execute("SELECT id, prediction FROM scores").fetchall())


def client_roundtrip(conn, dsn, feats, run_id, model, n_jobs, proba=False):
    """client_copy (``n_jobs`` processes), then its predictions COPYed back (FORMAT binary)
    into a table."""
    _scores_table(conn)
    t0 = time.perf_counter()
    _, _, got = client_copy(dsn, feats, run_id, model, n_jobs, proba)
    ids = np.fromiter(got.keys(), dtype=np.int64, count=len(got))
    preds = np.fromiter(got.values(), dtype=np.float64, count=len(got))
    rec = np.empty(len(ids), dtype=[("nf", ">i2"), ("l1", ">i4"), ("id", ">i8"), ("l2", ">i4"), ("p", ">f8")])
    rec["nf"], rec["l1"], rec["id"], rec["l2"], rec["p"] = 2, 8, ids, 8, preds
    buf = b"PGCOPY\n\xff\r\n\0" + b"\0" * 8 + rec.tobytes() + b"\xff\xff"
    with conn.cursor() as cur:
        with cur.copy("COPY scores FROM STDIN (FORMAT binary)") as cp:
            cp.write(buf)
    return time.perf_counter() - t0, got


def named_set_paths(conn, dsn, feats, run_id, model, repeat, n_jobs):
    """(path, best seconds, rows equal to the reference, reference path) of the named-set paths
    and the client's round trips (classes, and probabilities for a classifier), best of
    ``repeat`` interleaved runs. A probability agrees when within 1e-12 of the client's (a block
    of rows and the client's chunk may take different BLAS paths)."""
    name = f"bench_{model}"
    conn.execute("SELECT groupml.publish(%s, %s)", [run_id, name])
    rt, rt_proba = "client-rt (COPY out, score, COPY back)", "client-rt-proba (probabilities)"
    paths = [(rt, None, rt), ("set-table (predict_table)", set_table, rt),
             ("set-rows (predict per row)", set_rows, rt)]
    if model != "linear":
        paths += [(rt_proba, None, rt_proba),
                  ("set-proba-table (predict_proba_table)",
                   lambda c, f, n: set_table(c, f, n, "predict_proba_table"), rt_proba)]
    best, agree, refs = {}, {}, {}
    for _ in range(repeat):
        for label, fn, ref_label in paths:
            if fn is None:
                t, refs[label] = client_roundtrip(conn, dsn, feats, run_id, model, n_jobs, label == rt_proba)
                got = refs[label]
            else:
                t, got = fn(conn, feats, name)
            best[label] = min(t, best.get(label, t))
            ref = refs[ref_label]
            agree[label] = sum(1 for k, v in got.items() if k in ref and abs(ref[k] - v) <= 1e-12 * max(1.0, abs(v)))
    return [(label, best[label], agree[label], ref_label) for label, _, ref_label in paths]


def named_set_rows(out, dsn, feats, run_id, model, repeat, n_jobs, n_models):
    """The named-set paths in a new session, appended to ``out`` against the client's round trip."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as fresh:
        paths = named_set_paths(fresh, dsn, feats, run_id, model, repeat, n_jobs)
    best = {label: t for label, t, _, _ in paths}
    for label, t, same, ref in paths:
        out.append((model, n_models, label, t, same, f"{best[ref] / t:.2f}x {ref.split(' ')[0]}, best of {repeat}"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="50k rows, 40 groups")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each named-set path; the best counts")
    ap.add_argument("--models", default=",".join(SPECS), help="comma-separated subset of " + ",".join(SPECS))
    ap.add_argument("--sets-only", action="store_true", help="only the named-set paths and the client's round trip")
    ap.add_argument("--client-jobs", type=int, default=None, help="processes of the client's scoring "
                    "(default: every CPU, up to 4)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.groups = 50_000, 40
    n_jobs = client_cores(args.client_jobs)
    import psycopg

    feats = [f"f{j + 1}" for j in range(args.features)]
    out = []
    with TempCluster() as cluster, psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")
        create_table(conn, "clicks", grouped_classification(args.rows, args.groups, args.features, seed=3))
        conn.execute("SELECT count(*) FROM clicks")
        print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
        for model in args.models.split(","):
            spec = SPECS[model]
            run_id = conn.execute("CALL groupml.train_groups('clicks', ARRAY['country'], %s, 'clicked', %s, "
                                  "%s::jsonb)", [feats, model, json.dumps(spec)]).fetchone()[0]
            n_models = conn.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s AND (fit).status = 'ok'",
                                    [run_id]).fetchone()[0]
            if args.sets_only:
                named_set_rows(out, cluster.dsn(), feats, run_id, model, args.repeat, n_jobs, n_models)
                continue
            t_client, t_load, ref = client_copy(cluster.dsn(), feats, run_id, model, n_jobs)
            out.append((model, n_models, f"client-copy ({n_jobs} processes)", t_client, len(ref),
                        f"(load {t_load:.2f} s)"))
            if n_jobs > 1:
                t_one, t_load, one = client_copy(cluster.dsn(), feats, run_id, model, 1)
                same = sum(1 for k, v in one.items() if ref.get(k) == v)
                out.append((model, n_models, "client-copy-1core", t_one, same, f"(load {t_load:.2f} s)"))
                t_client = min(t_client, t_one)
            for name, fn in (("ours-rows", ours_rows), ("ours-batch", ours_batch)):
                with psycopg.connect(cluster.dsn(), autocommit=True) as fresh:
                    for when in ("new session", "same session again"):
                        t, got = fn(fresh, feats, run_id)
                        same = sum(1 for k, v in got.items() if ref.get(k) == v)
                        out.append((model, n_models, f"{name} ({when})", t, same, f"{t_client / t:.2f}x client"))
            with psycopg.connect(cluster.dsn(), autocommit=True) as fresh:
                times = {}
                for workers in (1, 2):
                    times[workers], got = ours_rows_parallel(fresh, feats, run_id, workers)
                    same = sum(1 for k, v in got.items() if ref.get(k) == v)
                    note = f"{t_client / times[workers]:.2f}x client" + (
                        f", {times[1] / times[2]:.2f}x 1 worker" if workers == 2 else "")
                    out.append((model, n_models, f"ours-rows (parallel, {workers} worker{'s' * (workers > 1)})",
                                times[workers], same, note))
            named_set_rows(out, cluster.dsn(), feats, run_id, model, args.repeat, n_jobs, n_models)
    print(f"\n{args.rows:,} rows, {args.groups} groups, {args.features} features; every row scored with its "
          f"group's model; load average {os.getloadavg()[0]:.2f} at the end\n")
    print(f"{'model':<9} {'models':>6}  {'path':<40} {'seconds':>8} {'rows/s':>10} {'= client':>9}  note")
    for model, n_models, name, t, same, note in out:
        print(f"{model:<9} {n_models:>6}  {name:<40} {t:8.2f} {args.rows / t:10,.0f} {same:9,d}  {note}")


if __name__ == "__main__":
    main()
