"""Sharded sequential training: a config hops from shard to shard (GAP / MOP for SGD).

A group whose rows are split into shards held by different workers is trained the
way Cerebro's model hopper (MOP, section 3.1) and Kingpin's GAP for the sequential
pattern (section 4.2) do it: within an epoch the model *visits* the shards one after
another -- never two at once -- running ordinary mini-batch SGD over each shard's rows.
The result is logically sequential SGD over the shuffled group.

The unit of work is :func:`visit`, plain bytes in and bytes out::

    new_state = visit(state, X_shard, y_shard, epoch=e, shard_id=s)

so an executor can ship ``state`` to whichever backend or server holds shard ``s``.
Because the next visit needs the previous visit's output, a config can never run on
two workers at once (config isolation holds by data dependency); the schedulers here
also keep every worker on one config at a time (worker exclusivity).

The visit order is drawn from a seeded scheduler and returned as a log of
``(epoch, shard, worker)`` per config; :func:`replay` runs the log sequentially and
reproduces the weights bit for bit on CPU.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import ArrayLengthError, InvalidParameterError, PrerequisiteStateError
from ..validation import check_number
from . import _mlp
from ._data import as_data
from ._hopper import HopScheduler, hop_order

Visit = Tuple[int, int, int]            # (epoch, shard, worker)
Shard = Tuple[np.ndarray, np.ndarray]   # (X, y) of one shard


def _check_shards(shards: Sequence[Shard], family) -> Tuple[List[Shard], int]:
    if not isinstance(shards, (list, tuple)) or not shards:
        raise InvalidParameterError("The 'shards' value of sharded training must be a non-empty "
                                    f"list of (X, y) pairs; got {type(shards).__name__}",
                                    hint="Pass one (X, y) pair per shard.")
    out, d = [], None
    fam = _mlp._family(family)
    for i, pair in enumerate(shards):
        X, y = as_data(pair[0], pair[1], f"shard {i}")
        fam.prepare_labels(y, f"shard {i}")
        if d is None:
            d = X.shape[1]
        elif X.shape[1] != d:
            raise ArrayLengthError(f"Shard {i} has {X.shape[1]} features; shard 0 has {d}",
                                   hint="Every shard of a group holds the same feature columns.")
        out.append((X, y))
    if sum(X.shape[0] for X, _ in out) == 0:
        raise InvalidParameterError("The shards of sharded training hold no rows",
                                    hint="A group needs at least one training row.")
    return out, int(d)


def init_state(family, params: Mapping[str, Any], shards: Sequence[Shard]) -> bytes:
    """The initial training state of one config over a sharded group.

    Standardisation statistics are merged from each shard's partial sums (an
    algebraic aggregate a worker can compute locally), in shard order.
    """
    shards, d = _check_shards(shards, family)
    stats = _mlp.merge_stats([_mlp.partial_stats(X, y) for X, y in shards], d)
    return _mlp.run_to_bytes(_mlp.new_run(family, params, d, stats))


def visit(state: bytes, X, y, *, epoch: int, shard_id: int, interrupt_check=None) -> bytes:
    """Train the config in ``state`` for one pass over one shard; return the new state.

    Pure: the same (state, shard, epoch, shard_id) always gives the same bytes.
    """
    run = _mlp.run_from_bytes(state)
    X, y = as_data(X, y, f"shard {shard_id}")
    if X.shape[1] != run.n_features:
        raise ArrayLengthError(f"Shard {shard_id} has {X.shape[1]} features; the model has "
                               f"{run.n_features}",
                               hint="Every shard of a group holds the same feature columns.")
    y = run.family.prepare_labels(y, f"shard {shard_id}")
    Xt, yt = _mlp.as_tensors(X, y)
    _mlp.train_epoch(run, Xt, yt, epoch=int(epoch), shard_id=int(shard_id), interrupt_check=interrupt_check)
    run.epochs_done = max(run.epochs_done, int(epoch) + 1)
    return _mlp.run_to_bytes(run)


def state_model(state: bytes) -> "_mlp.MLPModel":
    """The fitted model held by a training state."""
    return _mlp.MLPModel.from_run(_mlp.run_from_bytes(state))


def state_weights(state: bytes) -> Dict[str, np.ndarray]:
    """The network's tensors as numpy arrays (for bit-for-bit comparisons)."""
    run = _mlp.run_from_bytes(state)
    return {k: v.detach().numpy().copy() for k, v in run.net.state_dict().items()}


def _workers_of(shard_workers, n: int) -> List[int]:
    if shard_workers is None:
        return list(range(n))
    shard_workers = [check_number(w, "shard_workers", "sharded training", ge=0, integer=True)
                     for w in shard_workers]
    if len(shard_workers) != n:
        raise InvalidParameterError(f"The 'shard_workers' value of sharded training must name "
                                    f"one worker per shard ({n}); got {len(shard_workers)}",
                                    hint="shard_workers[i] is the worker holding shard i.")
    return shard_workers


def train_sharded(family, params: Mapping[str, Any], shards: Sequence[Shard],
                  shard_workers: Optional[Sequence[int]] = None, *, epochs: Optional[int] = None,
                  seed: int = 0, trial_id: int = 0) -> Tuple[bytes, List[Visit]]:
    """Train one config over a sharded group, hop by hop; return (state, visit log)."""
    shards, _ = _check_shards(shards, family)
    workers = _workers_of(shard_workers, len(shards))
    state = init_state(family, params, shards)
    p = _mlp._family(family).validate_params(params)
    n_epochs = p["epochs"] if epochs is None else check_number(
        epochs, "epochs", "sharded training", ge=1, integer=True)
    log: List[Visit] = []
    for e in range(n_epochs):
        for s in hop_order(seed, trial_id, e, len(shards)):
            state = visit(state, *shards[s], epoch=e, shard_id=s)
            log.append((e, s, workers[s]))
    return state, log


def replay(visit_log: Sequence[Visit], shards: Sequence[Shard], config: Mapping[str, Any],
           family="mlp") -> bytes:
    """Re-run a logged visit sequence on one process; the weights equal the original run's."""
    shards, _ = _check_shards(shards, family)
    state = init_state(family, config, shards)
    for entry in visit_log:
        e, s = int(entry[0]), int(entry[1])
        if not 0 <= s < len(shards):
            raise InvalidParameterError(f"The visit log names shard {s}; there are "
                                        f"{len(shards)} shards",
                                        hint="Replay with the shards the log was written for.")
        state = visit(state, *shards[s], epoch=e, shard_id=s)
    return state


# ---------------------------------------------------------------------- multi-worker MOP
@dataclass
class VisitEvent:
    trial_id: int
    epoch: int
    shard: int
    worker: int
    start_ns: int
    end_ns: int


@dataclass
class MOPResult:
    states: Dict[int, bytes]                       # trial_id -> final training state
    logs: Dict[int, List[Visit]]                   # trial_id -> [(epoch, shard, worker), ...]
    events: List[VisitEvent] = field(default_factory=list)   # as executed, with timestamps
    violations: List[str] = field(default_factory=list)      # seen live by the workers


VisitFn = Callable[[int, bytes, int, int], bytes]  # (worker, state, epoch, shard) -> state


def run_mop(family, configs: Mapping[int, Mapping[str, Any]], shards: Sequence[Shard],
            shard_workers: Sequence[int], *, epochs: Optional[int] = None, seed: int = 0,
            flexible: bool = True, visit_fn: Optional[VisitFn] = None,
            timeout: float = 600.0, policy: Optional[str] = None) -> MOPResult:
    """Train several configs of one sharded group on a pool of workers (one thread each).

    Every worker runs one visit at a time (worker exclusivity) and every config is on
    at most one worker at a time (config isolation).  Each config visits every shard
    once per epoch in its seeded :func:`hop_order`; with ``flexible`` a config whose next
    shard sits on a busy worker may take another unvisited shard of the epoch whose
    worker is idle (Cerebro's randomized scheduler) -- the executed order is in the log.
    ``visit_fn(worker, state, epoch, shard)`` runs one visit; by default it calls
    :func:`visit` locally (an executor passes one that ships the bytes to a backend).
    ``policy`` names a :class:`HopScheduler` policy ('randomized': Cerebro's Alg. 1) instead
    of the one ``flexible`` picks.
    """
    shards, _ = _check_shards(shards, family)
    workers = _workers_of(shard_workers, len(shards))
    fam = _mlp._family(family)
    n_epochs: Dict[int, int] = {}
    states: Dict[int, bytes] = {}
    for tid, params in configs.items():
        p = fam.validate_params(params)
        n_epochs[tid] = p["epochs"] if epochs is None else check_number(
            epochs, "epochs", "sharded training", ge=1, integer=True)
        states[tid] = init_state(fam, p, shards)
    if visit_fn is None:
        def visit_fn(worker, state, epoch, shard):
            return visit(state, *shards[shard], epoch=epoch, shard_id=shard)

    sched = HopScheduler(workers, seed=seed, flexible=flexible, policy=policy)
    for tid in configs:
        sched.start(tid, 0, n_epochs[tid])
    logs: Dict[int, List[Visit]] = {tid: [] for tid in configs}
    events: List[VisitEvent] = []
    violations: List[str] = []
    live_lock = threading.Lock()
    live_cfg: Dict[int, int] = {}
    live_worker: Dict[int, int] = {}
    results: "queue.Queue" = queue.Queue()
    inboxes = {w: queue.Queue() for w in sorted(set(workers))}

    def worker_loop(w: int) -> None:
        while True:
            job = inboxes[w].get()
            if job is None:
                return
            tid, e, s, state = job
            with live_lock:
                if tid in live_cfg:
                    violations.append(f"config {tid} started on worker {w} while running on "
                                      f"worker {live_cfg[tid]}")
                if w in live_worker:
                    violations.append(f"worker {w} started config {tid} while running "
                                      f"config {live_worker[w]}")
                live_cfg[tid], live_worker[w] = w, tid
            t0 = time.perf_counter_ns()
            try:
                out, err = visit_fn(w, state, e, s), None
            except Exception as exc:  # reported to the coordinator, which re-raises it
                out, err = None, exc
            t1 = time.perf_counter_ns()
            with live_lock:
                live_cfg.pop(tid, None)
                live_worker.pop(w, None)
            results.put((tid, e, s, w, t0, t1, out, err))

    threads = [threading.Thread(target=worker_loop, args=(w,), daemon=True) for w in inboxes]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    try:
        while sched.pending():
            for tid, e, s in sched.next_visits():
                inboxes[workers[s]].put((tid, e, s, states[tid]))
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise PrerequisiteStateError(
                    f"Sharded training did not finish within {timeout:g} s",
                    hint="Raise the timeout or train fewer epochs or configs.")
            try:
                tid, e, s, w, t0, t1, out, err = results.get(timeout=wait)
            except queue.Empty:
                continue
            sched.finished(tid)
            if err is not None:
                raise err
            states[tid] = out
            logs[tid].append((e, s, w))
            events.append(VisitEvent(tid, e, s, w, t0, t1))
    finally:
        for box in inboxes.values():
            box.put(None)
        for t in threads:
            t.join(timeout=60)
    return MOPResult(states, logs, events, violations)


def check_invariants(events: Sequence[VisitEvent]) -> List[str]:
    """Overlapping visits of one worker or one config in an executed schedule."""
    problems: List[str] = []
    for key, what in ((lambda ev: ev.worker, "worker"), (lambda ev: ev.trial_id, "config")):
        by: Dict[int, List[VisitEvent]] = {}
        for ev in events:
            by.setdefault(key(ev), []).append(ev)
        for k, evs in by.items():
            evs = sorted(evs, key=lambda ev: ev.start_ns)
            for a, b in zip(evs, evs[1:]):
                if b.start_ns < a.end_ns:
                    problems.append(f"{what} {k}: visit of config {b.trial_id} to shard {b.shard} "
                                    f"started before the visit of config {a.trial_id} to shard "
                                    f"{a.shard} ended")
    return problems
