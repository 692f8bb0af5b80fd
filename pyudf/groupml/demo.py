"""The embedded default (README command 1): a throwaway cluster, a skewed grouped dataset,
learn_over_groups with a 12-configuration logistic-regression grid, a per-group table.

    python -m groupml.demo [--rows 1000000] [--groups 50] [--features 20] [--seed 0] [--keep]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

DEMO_GRID = {"l2": [0, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1], "class_weight": [None, "balanced"]}


def _progress(stop: threading.Event, state: dict) -> None:
    """A spinner on a terminal; a plain line every 5 seconds otherwise (logs, CI)."""
    tty = sys.stderr.isatty()
    spin = "|/-\\"
    i = 0
    while not stop.wait(0.5 if tty else 5.0):
        i += 1
        line = f"{state['phase']} ... {time.time() - state['t0']:6.1f}s  groups done: {state['done']}"
        if tty:
            sys.stderr.write(f"\r  {spin[i % 4]} {line}")
        else:
            sys.stderr.write(f"  {line}\n")
        sys.stderr.flush()
    if tty:
        sys.stderr.write("\r" + " " * 79 + "\r")


def run(args) -> int:
    import psycopg

    from .datagen import create_table, grouped_classification
    from .devcluster import TempCluster

    feats = ", ".join(f"f{j + 1}" for j in range(args.features))
    cluster = TempCluster(keep=args.keep)
    print(f"groupml demo: starting a throwaway PostgreSQL cluster on 127.0.0.1:{cluster.port}")
    cluster.start()
    try:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS groupml CASCADE")
            print(f"  {conn.execute('SELECT groupml.version()').fetchone()[0]}")
            t = time.time()
            data = grouped_classification(args.rows, args.groups, args.features, seed=args.seed)
            create_table(conn, "clicks", data)
            print(f"  table clicks: {args.rows:,} rows, {args.groups} countries (Zipf-like sizes), "
                  f"{args.features} features, boolean label  [{time.time() - t:.1f}s]")
            print(f"  search grid ({len(DEMO_GRID['l2']) * len(DEMO_GRID['class_weight'])} configs): "
                  f"{json.dumps(DEMO_GRID)}")
            state = {"phase": "learn_over_groups", "t0": time.time(), "done": 0}
            conn.add_notice_handler(lambda d: state.__setitem__("done", state["done"] + 1))
            stop = threading.Event()
            th = threading.Thread(target=_progress, args=(stop, state), daemon=True)
            th.start()
            try:
                conn.execute(
                    f"CREATE TABLE country_models AS SELECT country, groupml.learn_over_groups(ARRAY[{feats}], "
                    f"clicked, 'logistic', %s::jsonb, '{{\"progress\": true}}') AS fit FROM clicks GROUP BY country",
                    [json.dumps(DEMO_GRID)])
            finally:
                stop.set()
                th.join()
            elapsed = time.time() - state["t0"]
            rows = conn.execute(
                "SELECT country, (fit).n_train + (fit).n_validation AS n, (fit).status, (fit).params, "
                "(fit).metrics->>'accuracy', (fit).metrics->>'auc' FROM country_models ORDER BY 2 DESC").fetchall()
        print(f"\n  trained {len(rows)} groups x 12 configs in {elapsed:.1f}s (learn_over_groups, one backend)\n")
        print(f"  {'group':<6} {'rows':>8}  {'status':<8} {'best config':<40} {'val acc':>7} {'val AUC':>7}")
        print("  " + "-" * 84)
        accs = []
        for country, n, status, params, acc, auc in rows:
            best = "" if params is None else ", ".join(
                f"{k}={v}" for k, v in params.items() if k in DEMO_GRID)
            accs.append(float(acc) if acc is not None else float("nan"))
            print(f"  {country:<6} {n:>8,}  {status:<8} {best:<40} {_f(acc):>7} {_f(auc):>7}")
        ok = [a for a in accs if a == a]
        if ok:
            print(f"\n  mean validation accuracy over {len(ok)} groups: {sum(ok) / len(ok):.4f}")
        if args.keep:
            print(f"\n  cluster left running: psql '{cluster.url()}'   (data in {cluster.dir})")
    finally:
        if not args.keep:
            cluster.stop()
    return 0


def _f(v) -> str:
    return "-" if v is None else f"{float(v):.4f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m groupml.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="leave the cluster running and print how to connect")
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
