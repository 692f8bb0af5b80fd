"""Cost of epoch checkpoints (train_groups resume) beside the work they protect.

One GLM group (n rows, d features, k L-BFGS configurations with full 10-step histories) in
this process: the time of one batched data pass, of capturing the trainer's checkpoint state
(what a group's driver thread does after every epoch block) and of encoding / decoding it
(JSON + npz, what the coordinator's main thread writes at most every 0.5 s per group). Every
timing is the fastest of --repeat runs (the machine is shared).

    python bench/bench_checkpoint.py [--rows N] [--features D] [--configs K] [--repeat R]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pyudf"))

from groupml.executor.checkpoint import decode, encode  # noqa: E402
from groupml.learners import make_trainer  # noqa: E402


def best(fn, repeat):
    out = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--configs", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(a.rows, a.features))
    y = (X @ rng.normal(size=a.features) + rng.normal(size=a.rows) > 0).astype(float)
    tr = make_trainer("logistic", X, y, X[: a.rows // 5], y[: a.rows // 5])
    for k in range(a.configs):
        tr.add(k, {"l2": 10.0 ** -(k % 8), "max_iter": 10 ** 6, "tol": 1e-300})
    tr.run(15)                                    # L-BFGS histories are full (10 pairs)
    t_pass = best(lambda: tr.run(1), a.repeat)    # one iteration ~ one pass (line search may add)
    t_cap = best(tr.checkpoint_state, a.repeat)
    state = tr.checkpoint_state()
    blob = encode(state)
    t_enc = best(lambda: encode(state), a.repeat)
    t_dec = best(lambda: decode(blob), a.repeat)
    print(f"GLM group: n={a.rows} d={a.features} k={a.configs}")
    print(f"  one L-BFGS iteration (batched pass): {t_pass * 1e3:8.2f} ms")
    print(f"  capture checkpoint state:            {t_cap * 1e3:8.3f} ms  ({t_cap / t_pass:.1%} of an iteration)")
    print(f"  encode (JSON + npz):                 {t_enc * 1e3:8.2f} ms  ({len(blob)} bytes)")
    print(f"  decode:                              {t_dec * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
