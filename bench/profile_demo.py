"""Where the demo workload's time goes: py-spy attached to the backend of CALL train_groups and
of the learn_over_groups aggregate (helper processes and threads included), summarised by kind
of work.

    python bench/profile_demo.py [--rows 1000000] [--paths procedure,aggregate] [--rate 100]

Needs py-spy (``pip install py-spy``) and the right to attach to the server's processes (root,
or the cluster's OS user). Prints, per path, the wall time and the share of all samples
(about CPU time) per kind of work; the raw collapsed stacks stay in --out for flame graphs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyudf"))

from groupml.datagen import create_table, grouped_classification  # noqa: E402
from groupml.demo import DEMO_GRID  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402

#: (kind of work, a frame that marks it); a sample counts for the first kind one of its frames matches
KINDS = [
    ("helper processes' imports", "_find_and_load"),
    ("products (np.dot of a block with the configurations)", "_xt_z"),
    ("loss and its derivative (batch_loss)", "batch_loss"),
    ("L-BFGS directions and line search", "lbfgs_directions"),
    ("L-BFGS directions and line search", "_lbfgs_consume"),
    ("validation scoring", "metrics"),
    ("validation scoring", "selected_metric"),
    ("validation scoring", "_val_margins"),
    ("products (np.dot of a block with the configurations)", "_evaluate"),
    ("set-up and search bookkeeping (unpack, split, trainer, driver)", "fit_packed"),
    ("set-up and search bookkeeping (unpack, split, trainer, driver)", "fit_group"),
    ("packing scan (the load query)", "PlpySession.query"),
    ("aggregate transition function (its Python part)", "step"),
]


def summarise(path):
    """(samples, Counter of kind -> samples) of a py-spy raw (collapsed stacks) file."""
    kinds, total = collections.Counter(), 0
    with open(path) as fh:
        for line in fh:
            line = line.rstrip()
            if not line:
                continue
            stack, n = line.rsplit(" ", 1)
            n = int(n)
            total += n
            names = [re.sub(r" \(.*", "", f) for f in stack.split(";")]
            kind = next((k for k, key in KINDS if any(x == key or x.endswith("." + key) for x in names)), "other")
            kinds[kind] += n
    return total, kinds


def profiled(conn, spy, out, rate, sql, params):
    """Run ``sql`` with py-spy recording this connection's backend; (seconds, raw file)."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    conn.execute("SELECT groupml.version()")          # the package imported before recording
    proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--subprocesses", "--format", "raw", "--rate",
                             str(rate), "--nonblocking", "-o", out], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(1.0)                                    # py-spy attached
    t0 = time.perf_counter()
    conn.execute(sql, params).fetchall()
    secs = time.perf_counter() - t0
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    return secs, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--paths", default="procedure,aggregate")
    ap.add_argument("--rate", type=int, default=100, help="samples per second")
    ap.add_argument("--out", default="profile_demo", help="directory for the raw stacks")
    args = ap.parse_args(argv)
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.access(spy, os.X_OK):
        raise SystemExit("py-spy not found: pip install py-spy")
    import psycopg

    os.makedirs(args.out, exist_ok=True)
    feats = [f"f{j + 1}" for j in range(args.features)]
    sqls = {"procedure": ("CALL groupml.train_groups('clicks', ARRAY['country'], %s, 'clicked', 'logistic', "
                          "%s::jsonb)", [feats, json.dumps(DEMO_GRID)]),
            "aggregate": (f"SELECT country, (f).status FROM (SELECT country, groupml.learn_over_groups("
                          f"ARRAY[{', '.join(feats)}], clicked, 'logistic', %s::jsonb) AS f FROM clicks "
                          f"GROUP BY country) s", [json.dumps(DEMO_GRID)])}
    got = {}
    with TempCluster() as cluster, psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")
        create_table(conn, "clicks", grouped_classification(args.rows, args.groups, args.features, seed=0))
        conn.execute("SELECT count(*) FROM clicks")
        for name in args.paths.split(","):
            sql, params = sqls[name]
            got[name] = profiled(conn, spy, os.path.join(args.out, f"{name}.txt"), args.rate, sql, params)
    print(f"\n{args.rows:,} rows, {args.groups} groups, {args.features} features, the demo grid; "
          f"load average {os.getloadavg()[0]:.2f}")
    for name, (secs, path) in got.items():
        total, kinds = summarise(path)
        print(f"\n{name}: {secs:.2f} s wall, {total} samples at {args.rate}/s ({path})")
        for kind, n in kinds.most_common():
            print(f"  {n / max(total, 1):6.1%}  {kind}")


if __name__ == "__main__":
    main()
