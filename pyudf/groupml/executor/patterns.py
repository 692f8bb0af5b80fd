"""The sequential (MLP) and sampling (LightGBM) access patterns under the grouped executor (and GLMs under MOP).

Coordinator side (driver threads, no plpy) and the pure search of an unsplit group that
a worker backend runs:

* **unsplit group** (one shard): one ``fit`` task on the worker holding it -- the whole
  search (:func:`groupml.search.run_search` over the family's own trainer) runs in that
  backend; its per-epoch reports come back with the result.
* **sequential, split group**: :class:`ShardedMLPTrainer`. Every config's training state
  (bytes of :func:`groupml.learners.train_sharded`'s initial state) hops from shard to shard within
  an epoch (``mlp_visit`` tasks on the backend holding the shard); a config has at most one
  task in flight (config isolation by data dependency), each worker runs one task at a
  time (the pool), and the executed hops are the visit log in ``groupml.run_schedule``
  (``kind = 'visit'``) that :func:`groupml.learners.replay` reproduces bit for bit.
* **algebraic (GLMs) under ``strategy => 'mop'``**: :class:`ShardedGLMHopTrainer`, the same
  hopper with mini-batch SGD states of a GLM (``glm_visit`` tasks).
* **sampling, split group**: :class:`ShardedLGBMTrainer`. A config is trained once, for
  its ``num_boost_round``, by LightGBM's own data-parallel mode: one ``lgbm_rank`` task
  per shard, started together on the workers holding the shards (``machines``: each
  worker's server address with a port that worker found free, bounded socket
  ``time_out``); the search reads the
  model's prefixes (a GBDT's first r trees are the model of r rounds). On the nodes of a
  distributed table there is one rank per node (:func:`groupml.executor.nodes.node_ranks`),
  listening on the node's address from the shard map; it reads every holder snapshot of the
  group on its node, in the snapshot's seeded row order.
"""

from __future__ import annotations

import json
import math
import time
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, wait
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import PrerequisiteStateError
from ..fitting import plan_group
from ..learners import (HopScheduler, LightGBMModel, check_fork, glmsgd, joining_partitions, replica_holders,
                        extend_margins, lgb_module, make_trainer)
from .core import (Aborted, GroupCtx, ScoredTrainer, await_result, fit_with_trainer, load_configs, pack_fit,
                   pattern_of, precheck, register_checkpoint_format, register_trainer, save_configs, shard_stats,
                   trainer_for, unpack_fit, validate_any)
from .pool import NodeLostError, PartitionUnavailableError, WorkerLostError, rank_hosts


# ------------------------------------------------------------------ unsplit group: one worker
def local_fit(req: Mapping[str, Any], X: np.ndarray, y: np.ndarray, Mv: np.ndarray, *,
              interrupt_check=None) -> bytes:
    """Worker side of an unsplit group: the whole search here; packed FitResult + epoch reports."""
    family, spec, opts = validate_any(req["model"], req["search"], req["fit_options"])
    d = int(req["d"])
    events: List[list] = []

    def on_epoch(e):
        events.append([int(e.block), int(e.passes),
                       [[int(tid), int(ep), None if sc is None or not math.isfinite(sc) else float(sc), str(dec)]
                        for tid, ep, sc, dec in e.reports]])

    trainer = make_trainer(family.name, X, y, Mv[:, :d], Mv[:, d], metric=opts["metric"],
                           interrupt_check=interrupt_check)
    plan = None
    if pattern_of(family) == "algebraic":
        # the batch size k the pass-by-pass path would choose (the planner's priors), so the
        # search sees the same slots whichever way the group runs
        plan = plan_group(spec, family, X.shape[0], d)
    res = fit_with_trainer(trainer, family, spec, n_train=X.shape[0], n_val=Mv.shape[0],
                           n_skipped=int(req.get("n_skipped", 0)), d=d, on_epoch=on_epoch,
                           interrupt_check=interrupt_check, pattern=pattern_of(family), plan=plan)
    return pack_fit(res, events)


# ------------------------------------------------------------------ sequential: model hopper
class ShardedMLPTrainer(ScoredTrainer):
    """engine.Trainer for an MLP group split over workers: configs hop shard to shard.

    ``run(iterations)`` gives every active config up to ``iterations`` epochs; an epoch is
    one visit to every shard. Which config visits which shard when is decided by
    :class:`groupml.learners.HopScheduler` (seeded hop order; with ``flexible`` a config
    whose next shard's worker is busy takes another unvisited shard on the least loaded
    free worker). The executed order is the visit log. Without ``flexible`` the models do
    not depend on timing (same run, same bytes).
    """

    def __init__(self, family, ctx: GroupCtx, X_val, y_val, *, seed: int, metric: Optional[str] = None,
                 flexible: bool = True, stats: Optional[Dict[str, Any]] = None, policy: Optional[str] = None,
                 elastic: bool = False):
        self.family = family
        self.ctx = ctx
        self.seed = int(seed)
        self.flexible = bool(flexible)
        self.policy = policy                  # HopScheduler's policy (None: by ``flexible``)
        self.lost_units: List[tuple] = []     # (trial, partition, worker) of units rerun after a lost worker
        self.elastic = bool(elastic)          # workers added to the pool mid-run join the scheduler
        self.joined: List[int] = []           # such workers, each sent its partitions' loads once
        self.d = ctx.d
        self._init_scoring(family, X_val, y_val, metric)
        self.passes = 0
        self._cfgs: Dict[int, Dict[str, Any]] = {}
        self._retired: Dict[int, Dict[str, Any]] = {}
        self.interrupt_check: Optional[Callable[[], None]] = None
        # given when resumed from a checkpoint
        self.stats = stats if stats is not None else shard_stats(ctx, self.STATS_OP)

    # epoch checkpoints (groupml.executor.checkpoint): between blocks every config has
    # finished whole epochs, so its state bytes + epoch count are its whole hop position
    _CKPT_KEYS = ("state", "done", "status", "version")
    CKPT_FORMAT = "mlp-hops-1"
    # the worker ops of a visit, of a partition's moments and of a joining worker's copy of a partition
    VISIT_OP, STATS_OP, LOAD_OP = "mlp_visit", "mlp_stats", "mlp_load"

    def checkpoint_state(self) -> Dict[str, Any]:
        return save_configs(self, self.CKPT_FORMAT, self._CKPT_KEYS)

    def load_checkpoint(self, state: Mapping[str, Any]) -> None:
        load_configs(self, state, self.CKPT_FORMAT, self._CKPT_KEYS)
        self.stats = state["stats"]

    def add(self, trial_id: int, params: Mapping[str, Any]) -> None:
        p = self._admit(trial_id, params)
        # the state is created by the worker of the first visit (init_state's bytes): torch
        # is loaded by worker backends only
        self._cfgs[trial_id] = {"params": p, "state": b"", "done": 0, "status": "running", "version": 0}

    def fork(self, trial_id: int, params: Mapping[str, Any], parent_id: int, epochs: int) -> None:
        """Add ``trial_id`` continuing active ``parent_id``'s training state (population based
        training): a worker copies the state with ``params`` (``mlp_fork``,
        :func:`groupml.learners.mlp.fork_state`); the child hops on from the parent's epoch."""
        parent = self._get(parent_id, active_only=True)
        check_fork(trial_id, parent_id, parent["done"], epochs)
        p = self._admit(trial_id, params)
        state = self._on_worker(parent, "mlp_fork", kind="fork", params=p)
        self._cfgs[trial_id] = {"params": p, "state": state, "done": parent["done"], "status": "running",
                                "version": 0}

    def _init(self, c) -> Optional[Dict[str, Any]]:
        return None if c["state"] else {"family": self.family.name, "params": c["params"], "stats": self.stats}

    def _epochs(self, c) -> int:
        """The epochs a config trains for."""
        return int(c["params"]["epochs"])

    def _on_worker(self, c, op: str, kind: str = "eval", workers: Optional[Sequence[int]] = None, **extra) -> bytes:
        """Run ``op`` (scoring, serialising or forking a state: no partition rows) on the least
        loaded live worker of ``workers`` (default: the group's shards' workers); a worker lost
        meanwhile hands it to another one."""
        ctx = self.ctx
        workers = list(workers) if workers is not None else [sh[0] for sh in ctx.shards]
        while True:
            live = [w for w in workers if ctx.pool.alive(w)] or workers[:1]
            w = min(live, key=lambda x: (ctx.pool.load(x), workers.index(x)))
            s = next((i for i, sh in enumerate(ctx.shards) if sh[0] == w), 0)
            fut = ctx.pool.submit(w, ctx.request(s, op=op, init=self._init(c), **extra), c["state"],
                                  ctx.meta(s, kind, c["done"], []), fn="task")
            try:
                return await_result(fut, ctx.abort)
            except WorkerLostError as exc:
                if type(exc) is not WorkerLostError or ctx.pool.alive(w):
                    raise
                if len(live) < 2:
                    self._unreachable([], exc, rows=True)
                    raise

    def run(self, iterations: int) -> None:
        ctx = self.ctx
        homes = [sh[0] for sh in ctx.shards]
        sched = HopScheduler(homes, seed=self.seed, flexible=self.flexible, policy=self.policy,
                             holders=ctx.holders or replica_holders(homes, ctx.replicas))
        for w in {w for h in sched.holders for w in h}:
            if not ctx.pool.alive(w):
                sched.lose_worker(w)
        self._unreachable(sched.unreachable(), None)
        for tid, c in self._cfgs.items():
            if c["status"] == "running":
                sched.start(tid, c["done"], min(c["done"] + int(iterations), self._epochs(c)))
        inflight: Dict[Any, tuple] = {}
        while sched.pending():
            self._join_workers(sched, homes)
            for tid, epoch, s, w in sched.next_placements(load=ctx.pool.load):
                c = self._cfgs[tid]
                fut = ctx.pool.submit(w, ctx.request(s, op=self.VISIT_OP, epoch=epoch, shard=s, init=self._init(c)),
                                      c["state"], ctx.meta(s, "visit", epoch, [tid]), fn="task")
                inflight[fut] = (tid, w)
            if self.ctx.abort is not None and self.ctx.abort.is_set():
                raise Aborted()
            finished, _ = wait(list(inflight), timeout=0.25, return_when=FIRST_COMPLETED)
            for fut in finished:
                tid, w = inflight.pop(fut)
                c = self._cfgs[tid]
                try:
                    c["state"] = fut.result()
                except WorkerLostError as exc:
                    self._lost_unit(sched, tid, w, exc)
                    continue
                c["version"] += 1
                if sched.finished(tid):
                    c["done"] += 1
                    self.passes += 1
                    if c["done"] >= self._epochs(c):
                        c["status"] = "max_iter"
                    elif ctx.stops is not None and tid in ctx.stops():
                        sched.stop(tid)         # asked to stop: its block ends with this epoch
                    if self.interrupt_check is not None:
                        self.interrupt_check()
                if ctx.progress is not None:
                    ctx.progress(self._progress(sched))

    def _join_workers(self, sched: HopScheduler, homes: Sequence[int]) -> None:
        """Elasticity (Cerebro 5.6), between sub-epochs: every live pool worker that is no
        partition's home -- one added while the run trains, or by an earlier attempt -- holds
        a copy of every partition (:func:`groupml.learners.joining_partitions`). Its loads are
        queued first on it (once per worker), so its first unit finds the rows in memory; the
        randomized scheduler gives it units from now on."""
        if not self.elastic:
            return
        ctx = self.ctx
        for w in range(ctx.pool.size):
            if w in homes or not ctx.pool.alive(w):
                continue
            if w not in self.joined:
                self.joined.append(w)
                for s in range(len(ctx.shards)):
                    ctx.pool.submit(w, ctx.request(s, op=self.LOAD_OP), b"", ctx.meta(s, "load", 0, []), fn="task")
            if not any(w in h for h in sched.holders):
                sched.add_worker(w, joining_partitions(len(ctx.shards), sched.holders))

    def score(self, trial_id: int) -> float:
        loss = super().score(trial_id)
        self._get(trial_id)["loss"] = loss            # the last validation loss, for the progress line
        return loss

    def _progress(self, sched: HopScheduler, most: int = 16) -> str:
        """One line of where the configurations are: epoch, sub-epoch (partitions visited in
        it) and the last validation loss of each (``groupml.progress.last_event``)."""
        n = len(self.ctx.shards)
        parts = []
        for tid, c in list(self._cfgs.items())[:most]:
            if c["status"] != "running":
                continue
            loss = c.get("loss")
            parts.append(f"trial {tid} epoch {c['done']} sub-epoch {sched.sub_epoch(tid)}/{n}"
                         + (f" loss {loss:.4g}" if loss is not None else ""))
        more = f"; +{len(self._cfgs) - most} more" if len(self._cfgs) > most else ""
        return f"group {self.ctx.group_key} mop: " + "; ".join(parts) + more

    def _lost_unit(self, sched: HopScheduler, tid: int, w: int, exc: "WorkerLostError") -> None:
        """A visit failed because its worker went away (Cerebro 5.6): the unit goes back to the
        queue and reruns on another holder of its partition from the configuration's last
        committed state; with no live holder left the group stops with a resumable error. A
        task's own error (data, privileges, a lock timeout, a cancel) is re-raised."""
        if (type(exc) is not WorkerLostError or (self.ctx.abort is not None and self.ctx.abort.is_set())
                or self.ctx.pool.alive(w)):
            raise exc
        _, s = sched.failed(tid)
        sched.lose_worker(w)
        self.lost_units.append((tid, s, w))
        self._unreachable(sched.unreachable(), exc)

    def _unreachable(self, gone: List[int], exc: Optional["WorkerLostError"], rows: bool = False) -> None:
        """Stop with a resumable error when partitions ``gone`` have no live holder left (on
        the nodes, ``rows``: or the validation rows being scored); ``exc``: the loss that did
        it (else the first lost worker's error)."""
        ctx = self.ctx
        if not gone and not (rows and ctx.holders):
            return
        why = exc.message if exc is not None else next((e for e in ctx.pool.errors if e), "a worker was lost")
        what = f"partition(s) {', '.join(map(str, gone))}" if gone else "validation rows"
        if ctx.holders:
            raise NodeLostError.of(what, ctx.group_key, why)
        if gone:
            raise PartitionUnavailableError(
                f"partition(s) {', '.join(map(str, gone))} of group {ctx.group_key} have no live holder: {why}",
                hint="Every worker holding a copy of the partition is gone; options.replicas >= 2 lets another worker "
                     "take its units over.")

    def _compute_margins(self, c) -> np.ndarray:
        # a group spread over nodes: each part of its validation rows is scored where it lives,
        # in the order the coordinator gathered them
        parts = self.ctx.val_holders or [None]
        return np.concatenate([np.frombuffer(self._on_worker(c, "mlp_eval", workers=ws), dtype="<f8") for ws in parts]
                              ).astype(np.float64)

    def model(self, trial_id: int):
        c = self._get(trial_id)
        return _ModelBytes(c["params"], self._on_worker(c, "mlp_model"))

    def state(self, trial_id: int) -> bytes:
        return self._get(trial_id)["state"]


class ShardedGLMHopTrainer(ShardedMLPTrainer):
    """engine.Trainer for a GLM group under model hopper parallelism (``strategy => 'mop'``).

    The configurations hop as :class:`ShardedMLPTrainer`'s do, under the same scheduler and
    visit log; a visit (``glm_visit``) is one pass of mini-batch SGD over the partition
    (:func:`groupml.learners.glmsgd.visit`) and an epoch is one ``max_iter`` iteration. The
    state is a few numpy arrays, so the coordinator makes the initial states, scores the
    validation rows and builds the models itself (no worker round trip, no torch anywhere).
    A configuration whose weights overflowed stops as 'diverged' at the end of its block.
    """

    CKPT_FORMAT = "glm-sgd-hops-1"
    VISIT_OP, STATS_OP, LOAD_OP = "glm_visit", "glm_stats", "glm_load"

    def add(self, trial_id: int, params: Mapping[str, Any]) -> None:
        p = self._admit(trial_id, params)
        self._cfgs[trial_id] = {"params": p, "state": glmsgd.init_state(self.family, p, self.d, self.stats),
                                "done": 0, "status": "running", "version": 0}

    def _init(self, c) -> Optional[Dict[str, Any]]:
        return None

    def _epochs(self, c) -> int:
        return int(c["params"]["max_iter"])

    def run(self, iterations: int) -> None:
        super().run(iterations)
        for c in self._cfgs.values():
            if c["status"] == "running" and glmsgd.diverged(c["state"]):
                c["status"] = "diverged"

    def _compute_margins(self, c) -> np.ndarray:
        return glmsgd.state_margins(c["state"], self.X_val)

    def model(self, trial_id: int):
        return glmsgd.state_model(self._get(trial_id)["state"])


class _ModelBytes:
    """A model as the worker serialised it (``params`` + ``to_bytes``, all fit_with_trainer needs)."""

    def __init__(self, params, data: bytes):
        self.params, self._data = dict(params), data

    def to_bytes(self) -> bytes:
        return self._data


# ------------------------------------------------------------------ sampling: LightGBM data-parallel
class _PortClaims:
    """The host:port pairs given to the ranks of the LightGBM jobs in flight, per worker pool.
    Each worker finds its ports free on its own host, independently: two workers on one host
    (loopback nodes, or two groups' ranks on one node) could be handed the same port; a port
    claimed here is not given to another rank until its job is over."""

    def __init__(self):
        import threading
        import weakref

        self._lock = threading.Lock()
        self._by_pool: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def claim(self, pool, host: str, ports) -> int:
        with self._lock:
            held = self._by_pool.setdefault(pool, set())
            for port in ports:
                if (host, port) not in held:
                    held.add((host, port))
                    return int(port)
        raise PrerequisiteStateError(
            f"The workers found too few distinct free ports on {host} for the ranks of distributed LightGBM",
            hint="Retry the call (with run_id to resume); fewer configurations or groups at once need fewer ports.")

    def release(self, pool, pairs) -> None:
        with self._lock:
            self._by_pool.get(pool, set()).difference_update(pairs)


_PORTS = _PortClaims()


def rank_digest(text: bytes) -> bytes:
    """What every rank of a distributed LightGBM job agrees on: the SHA-256 of its model text
    up to the trees' end (the parameter section after it names each rank's own port); a
    rank asked for its digest only returns it as is."""
    import hashlib

    if text.startswith(b"sha256:"):
        return text
    return b"sha256:" + hashlib.sha256(text.split(b"end of trees")[0]).hexdigest().encode("ascii")


class ShardedLGBMTrainer(ScoredTrainer):
    """engine.Trainer for a LightGBM group split over workers (LightGBM's own data-parallel mode).

    The first ``run`` of a config trains it for its ``num_boost_round`` in one distributed
    job (every rank on the worker holding its shard, started as one gang so that ranks of
    different jobs never wait on each other in opposite orders); blocks then advance the
    number of trees the search sees. Every rank returns the same model text (checked).
    """

    def __init__(self, family, ctx: GroupCtx, X_val, y_val, *, metric: Optional[str] = None, timeout_s: float = 120.0,
                 seed: int = 0):
        self.family = family
        self.ctx = ctx
        self.d = ctx.d
        self.timeout_s = float(timeout_s)
        self.seed = int(seed)          # the snapshot's row order, for a node rank reading several shards
        self._init_scoring(family, X_val, y_val, metric)
        self.passes = 0
        self.jobs = 0
        self._cfgs: Dict[int, Dict[str, Any]] = {}
        self._retired: Dict[int, Dict[str, Any]] = {}
        self.interrupt_check: Optional[Callable[[], None]] = None

    def add(self, trial_id: int, params: Mapping[str, Any]) -> None:
        p = self._admit(trial_id, params)
        self._cfgs[trial_id] = {"params": p, "booster": None, "trees": 0, "done": 0, "status": "running",
                                "version": 0}

    def _ranks(self):
        """``(on_nodes, [(worker, [shard indices]), ...])``: a rank per shard on one server's
        workers; on the nodes of a distributed table a rank per node."""
        eps = self.ctx.pool.endpoints
        if all(eps[sh[0]].get("remote") for sh in self.ctx.shards):
            from .nodes import node_ranks

            return True, node_ranks(self.ctx.shards, eps)
        return False, [(sh[0], [s]) for s, sh in enumerate(self.ctx.shards)]

    def _rank_task(self, on_nodes: bool, r: int, ids: List[int], start: int, tid: int, **req):
        """(request, schedule entry) of rank ``r`` reading the shards ``ids``. A node rank names
        each holder snapshot it reads (``parts``); its entry covers its rows as the ranks tile
        the group in rank order."""
        ctx = self.ctx
        if not on_nodes:
            return ctx.request(ids[0], rank=r, **req), ctx.meta(ids[0], "rank", self.jobs, [tid])
        parts = [{"snapshot": ctx.pool.endpoints[ctx.shards[s][0]]["snapshot"], "pieces": ctx.shards[s][3]}
                 for s in ids]
        meta = dict(ctx.meta(ids[0], "rank", self.jobs, [tid]), shard=r, row_start=start,
                    n_rows=sum(int(ctx.shards[s][2]) for s in ids))
        # rank 0 sends the model text back; the other nodes only its digest (checked equal)
        return ctx.request(ids[0], rank=r, parts=parts, seed=self.seed, digest=r > 0, **req), meta

    def _train(self, tids: List[int]) -> None:
        ctx = self.ctx
        on_nodes, ranks = self._ranks()
        workers = [w for w, _ in ranks]
        if on_nodes:
            from .nodes import node_rank_hosts

            hosts = node_rank_hosts(ctx.pool.endpoints, workers)
        else:
            hosts = rank_hosts(ctx.pool.addresses, workers, [e["name"] for e in ctx.pool.endpoints])
        # every rank listens on a port its own worker found free on its host (the coordinator
        # cannot see the ports of another server)
        asks = {}
        for w, ids in ranks:
            if w not in asks:
                n = workers.count(w) * len(tids)      # and spares for ports another job of ours holds
                req = json.dumps({"op": "lgbm_ports", "n": max(n, min(1024, 2 * n))})
                asks[w] = ctx.pool.submit(w, req, b"", ctx.meta(ids[0], "ports", self.jobs, tids), fn="task")
        free = {w: iter(json.loads(await_result(f, ctx.abort))) for w, f in asks.items()}
        minutes = max(1, math.ceil(self.timeout_s / 60.0))
        starts = np.cumsum([0] + [sum(int(ctx.shards[s][2]) for s in ids) for _, ids in ranks]).tolist()
        claimed: List[tuple] = []
        try:
            self._run_jobs(tids, ranks, hosts, free, minutes, starts, on_nodes, claimed)
        finally:
            _PORTS.release(ctx.pool, claimed)

    def _run_jobs(self, tids, ranks, hosts, free, minutes, starts, on_nodes, claimed) -> None:
        """Start one gang per config (each rank on a port claimed for it, added to ``claimed``)
        and take the models."""
        ctx = self.ctx
        workers = [w for w, _ in ranks]
        gangs = []
        for j, tid in enumerate(tids):
            p = self._cfgs[tid]["params"]
            machines = []
            for r, w in enumerate(workers):
                port = _PORTS.claim(ctx.pool, hosts[r], free[w])
                claimed.append((hosts[r], port))
                machines.append(f"{hosts[r]}:{port}")
            items = []
            for r, (w, ids) in enumerate(ranks):
                request, meta = self._rank_task(on_nodes, r, ids, int(starts[r]), tid, op="lgbm_rank",
                                                family=self.family.name, params=p, rounds=int(p["num_boost_round"]),
                                                machines=machines, timeout_minutes=minutes)
                items.append((w, request, b"", meta))
            self.jobs += 1
            gangs.append((tid, ctx.pool.submit_gang(items, fn="task")))
        lgb = lgb_module()
        for tid, futs in gangs:
            texts = self._gang_results(futs)
            if any(rank_digest(t) != rank_digest(texts[0]) for t in texts[1:]):
                raise PrerequisiteStateError(
                    f"The ranks of distributed LightGBM returned different models for trial {tid}",
                    hint="This is a bug in the distributed training setup; retry with workers => 1.")
            booster = lgb.Booster(model_str=texts[0].decode("utf-8"))
            c = self._cfgs[tid]
            c["booster"], c["trees"], c["text"] = booster, int(booster.current_iteration()), texts[0]

    #: seconds a failed job waits for its other ranks to report, so that the error names the
    #: worker (node) that went away rather than a peer whose network broke with it
    PEER_REPORT_S = 5.0

    def _gang_results(self, futs) -> List[bytes]:
        """The ranks' model texts. When a rank fails, its peers fail too (their network is
        gone): the error raised is a lost worker's when one of the job reports one within
        :attr:`PEER_REPORT_S`, else the first failure."""
        def failures():
            return [f.exception() for f in futs if f.done() and f.exception() is not None]

        while not failures():
            if all(f.done() for f in futs):
                return [f.result() for f in futs]
            if self.ctx.abort is not None and self.ctx.abort.is_set():
                raise Aborted()
            wait(futs, timeout=0.25, return_when=FIRST_EXCEPTION)
        deadline = time.monotonic() + self.PEER_REPORT_S
        while (not any(type(e) is WorkerLostError for e in failures()) and not all(f.done() for f in futs)
               and time.monotonic() < deadline):
            wait(futs, timeout=0.25, return_when=FIRST_COMPLETED)
        errors = failures()
        raise next((e for e in errors if type(e) is WorkerLostError), errors[0])

    # epoch checkpoints: a trained config is its model text (all num_boost_round trees; the
    # search's position is "done"), so a resumed group never retrains a config
    _CKPT_KEYS = ("text", "trees", "done", "status", "version")
    CKPT_FORMAT = "lgbm-ranks-1"

    def checkpoint_state(self) -> Dict[str, Any]:
        def one(tid, c):
            if c.get("text") is None and c.get("booster") is not None:   # a subclass's _train kept no text
                c["text"] = c["booster"].model_to_string().encode("utf-8")
            return dict({"trial_id": int(tid), "params": dict(c["params"])},
                        **{k: c.get(k) for k in self._CKPT_KEYS})
        return {"format": self.CKPT_FORMAT, "passes": int(self.passes), "jobs": int(self.jobs),
                "configs": [one(t, c) for t, c in self._cfgs.items()],
                "retired": [one(t, c) for t, c in self._retired.items()]}

    def load_checkpoint(self, state: Mapping[str, Any]) -> None:
        load_configs(self, state, self.CKPT_FORMAT, self._CKPT_KEYS)
        self.jobs = int(state["jobs"])
        lgb = lgb_module()
        for c in list(self._cfgs.values()) + list(self._retired.values()):
            c["booster"] = None if c["text"] is None else lgb.Booster(model_str=c["text"].decode("utf-8"))

    def run(self, iterations: int) -> None:
        new = [tid for tid, c in self._cfgs.items() if c["status"] == "running" and c["booster"] is None]
        if new:
            self._train(new)
        for tid, c in self._cfgs.items():
            if c["status"] != "running":
                continue
            target = min(c["done"] + int(iterations), int(c["params"]["num_boost_round"]))
            step = max(0, min(target, c["trees"]) - c["done"])
            c["done"] += step
            self.passes += step
            c["version"] += 1
            if c["done"] >= int(c["params"]["num_boost_round"]):
                c["status"] = "max_iter"
            elif c["done"] >= c["trees"]:
                c["status"] = "converged"          # LightGBM stopped: no tree could split any more
            if self.interrupt_check is not None:
                self.interrupt_check()

    def _compute_margins(self, c) -> np.ndarray:
        """Validation margins of the first ``done`` trees, kept per config and extended by the
        trees each block adds (see LightGBMTrainer._val_margins: tree by tree, bit-exact)."""
        if c["booster"] is None or c["done"] == 0:
            return np.zeros(self.X_val.shape[0])
        z = extend_margins(c["booster"], self.X_val, c.get("margins"), c.get("scored", 0), c["done"], num_threads=1)
        c["scored"], c["margins"] = c["done"], z
        return z

    def model(self, trial_id: int):
        c = self._get(trial_id)
        return LightGBMModel(self.family.name, c["params"], c["booster"].model_to_string(num_iteration=c["done"]))


# ------------------------------------------------------------------ an unsplit group: one task
def fit_on_worker(ctx: GroupCtx, *, model: str, search: dict, fit_options: dict, g: Mapping[str, Any],
                  on_epoch_raw: Callable):
    """The FitResult of a group held whole by one worker: its whole search runs there as one
    ``fit`` task (:func:`local_fit`); the epoch reports come back with the result and are
    replayed through ``on_epoch_raw``. No checkpoint: the group commits when it is done."""
    req = ctx.request(0, op="fit", model=model, search=search, fit_options=fit_options,
                      n_skipped=int(g["n_skipped"]))
    fut = ctx.pool.submit(ctx.shards[0][0], req, b"", ctx.meta(0, "fit", 0, []), fn="task")
    res, events = unpack_fit(await_result(fut, ctx.abort))
    for block, passes, reports in events:
        on_epoch_raw(block, passes, [tuple(r) for r in reports])
    return res


def fit_unsplit_glm(pool, *, family, model: str, search: dict, fit_options: dict, g: Mapping[str, Any],
                    shard: tuple, snapshot_id: int, d: int, y_val, mem_mb: float, abort, on_epoch_raw: Callable):
    """A GLM group placed whole on one worker, trained there in one task instead of one task
    per data pass (no per-pass round trips; same configurations, same batch size)."""
    pre = precheck(family, n_train=int(g["n_train"]), n_val=int(g["n_val"]), n_pos=int(g["n_pos"]),
                   n_skipped=int(g["n_skipped"]), d=d, y_val=y_val)
    if pre is not None:
        return pre
    ctx = GroupCtx(pool, snapshot_id=snapshot_id, group_no=g["group_no"], group_key=g["gkey"], d=d, shards=[shard],
               mem_mb=mem_mb, abort=abort)
    return fit_on_worker(ctx, model=model, search=search, fit_options=fit_options, g=g, on_epoch_raw=on_epoch_raw)


# ------------------------------------------------------------------ one group, any non-GLM pattern
def fit_other_group(pool, *, family, spec, opts, model: str, search: dict, fit_options: dict, g: Mapping[str, Any],
                    shards: Sequence[tuple], snapshot_id: int, d: int, X_val, y_val, mem_mb: float, abort,
                    on_epoch_raw: Callable, interrupt_check: Callable, lgbm_timeout_s: float = 120.0,
                    flexible: bool = True, checkpoint=None, resume=None, mode: str = "shards", replicas: int = 1,
                    progress: Optional[Callable[[str], None]] = None, requests: Optional[Callable] = None,
                    holders=None, val_holders=None):
    """The FitResult of one MLP / LightGBM group (or a GLM group under ``'mop'``) over the worker
    pool (see the module doc).

    ``mode`` (:func:`groupml.executor.plan.group_tasks`): ``'shards'`` with one shard is a
    whole-group search on its worker; otherwise the trainer registered for (access pattern,
    mode) runs it (:func:`groupml.executor.core.trainer_for`): hopper / ranks here, MTP
    (``'configs'``) and the MLP's per-step DP (``'steps'``) in :mod:`groupml.executor.baselines`.

    A split group calls ``checkpoint(event, state)`` after every block instead of
    ``on_epoch_raw`` when it is given, and continues from ``resume`` (see
    :func:`groupml.fitting.search_and_select`); an unsplit group is one worker task and
    has neither. ``requests`` (model hopper runs): the trial requests of other sessions, applied
    between epoch blocks (:func:`groupml.search.run_search`). ``holders`` / ``val_holders`` (a
    group spread over nodes, :func:`groupml.executor.nodes.hop_tasks`): the workers holding each
    shard and each part of the validation rows."""
    pre = precheck(family, n_train=int(g["n_train"]), n_val=int(g["n_val"]), n_pos=int(g["n_pos"]),
                   n_skipped=int(g["n_skipped"]), d=d, y_val=y_val)
    if pre is not None:
        return pre
    ctx = GroupCtx(pool, snapshot_id=snapshot_id, group_no=g["group_no"], group_key=g["gkey"], d=d, shards=shards,
                   mem_mb=mem_mb, abort=abort, replicas=replicas if mode == "mop" else 1, progress=progress,
                   holders=holders, val_holders=val_holders)
    if requests is not None and mode == "mop":
        ctx.stops = lambda: {int(r["trial_id"]) for r in requests() if r["kind"] == "stop_trial"}
    pattern = pattern_of(family)
    if mode == "shards" and len(shards) == 1:
        return fit_on_worker(ctx, model=model, search=search, fit_options=fit_options, g=g,
                             on_epoch_raw=on_epoch_raw)

    def on_epoch(e):
        on_epoch_raw(e.block, e.passes, [(tid, ep, sc, dec) for tid, ep, sc, dec in e.reports])

    trainer = trainer_for(pattern, mode)(family, ctx, X_val, y_val, opts, lgbm_timeout_s=lgbm_timeout_s,
                                         flexible=flexible, resume=resume)
    return fit_with_trainer(trainer, family, spec, n_train=int(g["n_train"]), n_val=int(g["n_val"]),
                            n_skipped=int(g["n_skipped"]), d=d, on_epoch=None if checkpoint else on_epoch,
                            interrupt_check=interrupt_check, pattern=pattern, checkpoint=checkpoint, resume=resume,
                            requests=requests if mode == "mop" else None)


# ------------------------------------------------------------------ this module's strategies
@register_trainer("sequential", "shards")
def _hopper_trainer(family, ctx, X_val, y_val, opts, *, lgbm_timeout_s, flexible, resume):
    return ShardedMLPTrainer(family, ctx, X_val, y_val, seed=opts["seed"], metric=opts["metric"],
                             flexible=flexible, stats=None if resume is None else resume["trainer"]["stats"])


@register_trainer("sequential", "mop")
@register_trainer("algebraic", "mop")
def _mop_trainer(family, ctx, X_val, y_val, opts, *, lgbm_timeout_s, flexible, resume):
    """Model hopper parallelism over the group's partitions: Cerebro's randomized scheduler
    (GLMs: SGD states, :class:`ShardedGLMHopTrainer`)."""
    cls = ShardedGLMHopTrainer if pattern_of(family) == "algebraic" else ShardedMLPTrainer
    # on the nodes (ctx.holders) a worker reads only its own node's shard: no worker joins
    return cls(family, ctx, X_val, y_val, seed=opts["seed"], metric=opts["metric"], policy="randomized",
               stats=None if resume is None else resume["trainer"]["stats"], elastic=not ctx.holders)


@register_trainer("sampling", "shards")
def _ranks_trainer(family, ctx, X_val, y_val, opts, *, lgbm_timeout_s, flexible, resume):
    return ShardedLGBMTrainer(family, ctx, X_val, y_val, metric=opts["metric"], timeout_s=lgbm_timeout_s,
                              seed=opts["seed"])


register_checkpoint_format(ShardedMLPTrainer.CKPT_FORMAT, "state")
register_checkpoint_format(ShardedLGBMTrainer.CKPT_FORMAT, "text")
