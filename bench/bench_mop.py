"""Model hopper parallelism against task parallelism, data parallelism and one model at a time.

The same k MLP configurations (mini-batch SGD) are trained four ways on p worker processes,
side by side in one run, with the functions the executor's worker backends run:

* mop: the rows are cut into p partitions, one per worker, loaded once; the configurations'
  training states hop from worker to worker under Cerebro's randomized scheduler
  (groupml.learners.HopScheduler, policy 'randomized'), one pass over a partition per unit;
* task: every worker holds all the rows; each configuration trains on one worker;
* data: every worker holds one partition; each configuration in turn, every mini-batch's
  gradient is computed on the workers holding the batch's rows and averaged (weighted by
  rows) before one optimizer step -- the synchronous exchange of Horovod, here through pipes
  and a coordinator (groupml.learners.dpsgd, the executor's DP steps);
* seq: one worker holds all the rows and trains the configurations one after another.

Printed per way: the time of one epoch of all k configurations, the rows' storage held by the
workers, the bytes moved between coordinator and workers (rows shipped once + states or
weights and gradients), the mean and best validation accuracy, and the ratios to mop.

    python bench/bench_mop.py [--rows N] [--features D] [--configs K] [--workers P] [--epochs E]
"""
import argparse
import multiprocessing as mp
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pyudf"))

from groupml.learners import HopScheduler, dpsgd, merge_stats, mlp, partial_stats, visit  # noqa: E402


# ---------------------------------------------------------------- worker process
def worker_main(conn):
    """A worker: holds rows sent once, runs units (visits) and DP gradient parts on request."""
    import torch
    torch.set_num_threads(1)
    X = y = None
    nets = {}
    while True:
        msg = conn.recv()
        op = msg[0]
        if op == "stop":
            return
        if op == "data":
            X, y = msg[1], msg[2]
            # untimed warm-up: the first pass of a process pays torch's one-time set-up
            d = X.shape[1]
            run = mlp.new_run("mlp", {"layers": [8], "epochs": 1}, d, partial_stats(X[:64], y[:64]) and
                              merge_stats([partial_stats(X[:64], y[:64])], d))
            visit(mlp.run_to_bytes(run), X[:64], y[:64], epoch=0, shard_id=0)
            conn.send(b"ok")
        elif op == "visit":
            _, state, epoch, shard = msg
            conn.send(visit(state, X, y, epoch=epoch, shard_id=shard))
        elif op == "grad":
            _, key, params, d, vec, local = msg
            if key not in nets:
                nets[key] = mlp.new_run("mlp", params, d, {"x_mean": np.zeros(d), "x_scale": np.ones(d)}).net
            net = nets[key]
            dpsgd.load_state_vector(net, vec)
            if local.size == 0:
                conn.send((0, 0.0, None))
                continue
            loss, g = dpsgd.part_gradient(net, False, X[local], y[local], None)
            conn.send((int(local.size), loss, g))


class Workers:
    """p worker processes and the bytes sent to and received from them."""

    def __init__(self, p):
        ctx = mp.get_context("spawn")
        self.conns, self.procs = [], []
        for _ in range(p):
            a, b = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(b,), daemon=True)
            proc.start()
            self.conns.append(a)
            self.procs.append(proc)
        self.moved = 0

    def send(self, w, msg):
        self.moved += _size(msg)
        self.conns[w].send(msg)

    def recv(self, w):
        out = self.conns[w].recv()
        self.moved += _size(out)
        return out

    def close(self):
        for c in self.conns:
            c.send(("stop",))
        for proc in self.procs:
            proc.join(timeout=30)


def _size(obj):
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (tuple, list)):
        return sum(_size(o) for o in obj)
    return 0


# ---------------------------------------------------------------- the four ways
def init_states(configs, parts, d):
    stats = merge_stats([partial_stats(X, y) for X, y in parts], d)
    return {t: mlp.run_to_bytes(mlp.new_run("mlp", c, d, stats)) for t, c in configs.items()}


def run_mop(pool, configs, parts, d, epochs, seed):
    """Configurations hop over the p partitions (one per worker) under the randomized scheduler."""
    p = len(parts)
    states = init_states(configs, parts, d)
    sched = HopScheduler(list(range(p)), seed=seed, policy="randomized")
    for t in configs:
        sched.start(t, 0, epochs)
    busy = {}
    while sched.pending():
        for t, e, s, w in sched.next_placements():
            pool.send(w, ("visit", states[t], e, s))
            busy[w] = t
        w = _first_ready(pool, busy)
        t = busy.pop(w)
        states[t] = pool.recv(w)
        sched.finished(t)
    return states


def run_task(pool, configs, parts, d, epochs):
    """Each configuration on one worker that holds all the rows."""
    states = init_states(configs, parts, d)
    queue = {t: list(range(epochs)) for t in configs}
    free, busy = list(range(len(pool.conns))), {}
    waiting = list(configs)
    while waiting or busy:
        while free and waiting:
            t = waiting.pop(0)
            w = free.pop(0)
            pool.send(w, ("visit", states[t], queue[t].pop(0), 0))
            busy[w] = t
        w = _first_ready(pool, busy)
        t = busy.pop(w)
        states[t] = pool.recv(w)
        if queue[t]:
            waiting.append(t)
        free.append(w)
    return states


def run_seq(pool, configs, parts, d, epochs):
    """One worker, one configuration after another."""
    states = init_states(configs, parts, d)
    for t in configs:
        for e in range(epochs):
            pool.send(0, ("visit", states[t], e, 0))
            states[t] = pool.recv(0)
    return states


def run_data(pool, configs, parts, d, epochs):
    """One configuration at a time; every mini-batch's gradient averaged over the partitions."""
    bounds, start = [], 0
    for X, _ in parts:
        bounds.append((start, X.shape[0]))
        start += X.shape[0]
    n = start
    stats = merge_stats([partial_stats(X, y) for X, y in parts], d)
    out = {}
    for t, c in configs.items():
        run = mlp.new_run("mlp", c, d, stats)
        size = dpsgd.grad_size(run.net)
        for e in range(epochs):
            for idx in dpsgd.epoch_batches(run, e, n):
                vec = dpsgd.state_vector(run.net)
                split = dpsgd.split_batch(idx, bounds)
                for w, (_, local) in enumerate(split):
                    pool.send(w, ("grad", t, c, d, vec, local))
                got = [pool.recv(w) for w in range(len(split))]
                _, g = dpsgd.combine(got, idx.size, size)
                dpsgd.apply_step(run, g)
        out[t] = mlp.run_to_bytes(run)
    return out


def _first_ready(pool, busy):
    from multiprocessing.connection import wait
    ready = wait([pool.conns[w] for w in busy])
    return next(w for w in busy if pool.conns[w] in ready)


# ---------------------------------------------------------------- measurement
def accuracy(state, Xv, yv):
    run = mlp.run_from_bytes(state)
    z = mlp.decision_values(run.net, Xv, run.regression)
    return float(np.mean((z > 0).astype(float) == yv))


def make_data(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d)
    z = X @ w + 0.8 * X[:, 0] * X[:, 1] - 0.5 * np.abs(X[:, 2]) + rng.normal(scale=0.7, size=n)
    return X, (z > np.median(z)).astype(float)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--configs", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ways", default="mop,task,data,seq")
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    mlp.warm_up()           # the coordinator's own one-time torch set-up, outside every timing
    X, y = make_data(a.rows + a.rows // 10, a.features, a.seed)
    Xv, yv = X[a.rows:], y[a.rows:]
    X, y = X[:a.rows], y[:a.rows]
    p, d = a.workers, a.features
    cuts = np.array_split(np.arange(a.rows), p)
    parts = [(np.ascontiguousarray(X[c]), np.ascontiguousarray(y[c])) for c in cuts]
    init_states({0: {"layers": [8], "epochs": 1}}, parts, d)
    rng = np.random.default_rng(a.seed)
    configs = {t: {"layers": [32, 16] if t % 2 else [64], "lr": float(10 ** rng.uniform(-3, -1.5)),
                   "batch_size": a.batch, "epochs": a.epochs, "dropout": 0.0, "seed": t}
               for t in range(a.configs)}
    print(f"{a.configs} MLP configurations, {a.rows} rows x {d} features, mini-batch {a.batch}, {a.epochs} epochs, "
          f"{p} worker processes")
    full = X.nbytes + y.nbytes
    results = {}
    for way in a.ways.split(","):
        pool = Workers(1 if way == "seq" else p)
        try:
            # the rows each worker holds, shipped once (counted as bytes moved)
            if way in ("mop", "data"):
                for w, (Xp, yp) in enumerate(parts):
                    pool.send(w, ("data", Xp, yp))
            else:
                for w in range(len(pool.conns)):
                    pool.send(w, ("data", X, y))
            for w in range(len(pool.conns)):
                pool.recv(w)
            held = full * (1 if way in ("mop", "data", "seq") else p)
            t0 = time.perf_counter()
            if way == "mop":
                states = run_mop(pool, configs, parts, d, a.epochs, a.seed)
            elif way == "task":
                states = run_task(pool, configs, parts, d, a.epochs)
            elif way == "data":
                states = run_data(pool, configs, parts, d, a.epochs)
            else:
                states = run_seq(pool, configs, parts, d, a.epochs)
            secs = time.perf_counter() - t0
        finally:
            pool.close()
        accs = [accuracy(states[t], Xv, yv) for t in configs]
        results[way] = {"epoch_s": secs / a.epochs, "held": held, "moved": pool.moved,
                        "acc": float(np.mean(accs)), "best": float(np.max(accs))}
    base = results.get("mop")
    print(f"{'way':<6} {'epoch s':>9} {'held MB':>9} {'moved MB':>9} {'mean acc':>9} {'best acc':>9} "
          f"{'time/mop':>9} {'held/mop':>9}")
    for way, r in results.items():
        rt = f"{r['epoch_s'] / base['epoch_s']:.2f}x" if base else "-"
        rh = f"{r['held'] / base['held']:.2f}x" if base else "-"
        print(f"{way:<6} {r['epoch_s']:>9.3f} {r['held'] / 1e6:>9.1f} {r['moved'] / 1e6:>9.1f} {r['acc']:>9.4f} "
              f"{r['best']:>9.4f} {rt:>9} {rh:>9}")
    if base and "task" in results and "data" in results:
        print(f"mop: {results['task']['epoch_s'] / base['epoch_s']:.2f}x task-parallel speed at "
              f"{base['held'] / results['task']['held']:.2f} of its storage; "
              f"{results['data']['epoch_s'] / base['epoch_s']:.2f}x faster than data-parallel")


if __name__ == "__main__":
    main()
