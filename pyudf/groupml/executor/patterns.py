"""The sequential (MLP) and sampling (LightGBM) access patterns under the grouped executor.

Coordinator side (driver threads, no plpy) and the pure search of an unsplit group that
a worker backend runs:

* **unsplit group** (one shard): one ``fit`` task on the worker holding it -- the whole
  search (:func:`groupml.search.run_search` over the family's own trainer) runs in that
  backend; its per-epoch reports come back with the result.
* **sequential, split group**: :class:`ShardedMLPTrainer`. Every config's training state
  (bytes of :func:`groupml.learners._sharded.init_state`) hops from shard to shard within
  an epoch (``mlp_visit`` tasks on the backend holding the shard); a config has at most one
  task in flight (config isolation by data dependency), each worker runs one task at a
  time (the pool), and the executed hops are the visit log in ``groupml.run_schedule``
  (``kind = 'visit'``) that :func:`groupml.learners.replay` reproduces bit for bit.
* **sampling, split group**: :class:`ShardedLGBMTrainer`. A config is trained once, for
  its ``num_boost_round``, by LightGBM's own data-parallel mode: one ``lgbm_rank`` task
  per shard, started together on the workers holding the shards (``machines``: each
  worker's server address with a port that worker found free, bounded socket
  ``time_out``); the search reads the
  model's prefixes (a GBDT's first r trees are the model of r rounds).
"""

from __future__ import annotations

import json
import math
from concurrent.futures import FIRST_COMPLETED, wait
from concurrent.futures import TimeoutError as _FutureTimeout
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import FeatureNotSupportedError, InvalidParameterError, PrerequisiteStateError, UndefinedObjectError
from ..fitting import budget_cap

# the strategies the executor runs for each access pattern (``auto`` chooses among them); MTP and
# the MLP's per-step DP are in groupml.executor.baselines
PATTERN_STRATEGIES = {"algebraic": ("grouped", "gtp", "mtp", "dp"), "sequential": ("grouped", "gtp", "mtp", "dp"),
                      "sampling": ("grouped", "gtp", "mtp", "dp")}


# ------------------------------------------------------------------ request validation
def validate_any(model, search: dict, options: dict, options_owner: str = "train_groups options"):
    """:func:`groupml.fitting.validate_request` for every learner family (GLM, MLP, LightGBM)."""
    from ..fitting import parse_options, plan_search
    from ..learners import get_learner_family

    family = get_learner_family(model)
    spec = plan_search(family, search)
    opts = parse_options(options, family, options_owner)
    return family, spec, opts


def pattern_of(family) -> str:
    from ..learners import access_pattern
    return access_pattern(family)


def check_strategy(pattern: str, strategy: str, model: str) -> None:
    """Refuse a strategy the executor does not run for the model's access pattern."""
    allowed = PATTERN_STRATEGIES[pattern]
    if strategy != "auto" and strategy not in allowed:
        raise FeatureNotSupportedError(
            f"The 'strategy' value of train_groups must be one of auto, {', '.join(allowed)} for "
            f"model '{model}' ({pattern} pattern); got '{strategy}'",
            hint=f"The executor runs {', '.join(allowed)} for the {pattern} pattern; 'auto' picks the cheapest "
                 f"by the planner's estimates (see explain_train_groups).")


def search_slots(spec, family) -> int:
    from ..search import search_budget
    if spec.slots is not None:
        return int(spec.slots)
    return max(1, int(search_budget(spec, max_iter=budget_cap(spec.to_dict().get("space", {}), family)).in_flight))


# ------------------------------------------------------------------ search over a trainer
def precheck(family, *, n_train: int, n_val: int, n_pos: int, n_skipped: int, d: int, y_val):
    """FitResult for a group that cannot be trained (no rows, too small, one class), else None."""
    from ..fitting import FitResult

    base = dict(family=family.name, n_skipped=n_skipped, n_features=d)
    n = n_train + n_val
    if n == 0:
        return FitResult(status="no_rows", message="every row had a NULL, NaN or infinite label or feature", **base)
    family.prepare_labels(y_val, "the group's rows")
    base.update(n_train=n_train, n_validation=n_val)
    if n_train < 2 or n_val < 1:
        return FitResult(status="too_small", message=(
            f"the group has {n} usable rows: {n_train} for training and {n_val} for validation; "
            f"need at least 2 and 1"), **base)
    if family.kind == "classification" and (n_pos == 0 or n_pos == n_train):
        return FitResult(status="single_class", message=(
            f"every training row of the group has label {1.0 if n_pos else 0.0:g}; a classifier needs both "
            f"classes"), **base)
    return None


def fit_with_trainer(trainer, family, spec, *, n_train: int, n_val: int, n_skipped: int, d: int,
                     on_epoch=None, interrupt_check=None, pattern: str = "", checkpoint=None, resume=None,
                     plan: Optional[Dict[str, Any]] = None):
    """Run the search of ``spec`` on ``trainer`` (any engine.Trainer); the group's FitResult.

    ``plan``: the batch plan (``slots``, ``seconds``; GLMs: :func:`groupml.fitting.plan_group`);
    by default the spec's slots or its budget's configs in flight, with no estimate."""
    from ..fitting import search_and_select

    base = dict(family=family.name, n_skipped=n_skipped, n_features=d, n_train=n_train, n_validation=n_val)
    if plan is None:
        plan = {"slots": search_slots(spec, family), "seconds": None, "pattern": pattern}
    return search_and_select(trainer, spec, plan, base, on_epoch=on_epoch, interrupt_check=interrupt_check,
                             checkpoint=checkpoint, resume=resume)


# ------------------------------------------------------------------ unsplit group: one worker
FIT_FIELDS = ("status", "family", "params", "metric", "score", "metrics", "n_train", "n_validation", "n_skipped",
              "n_features", "trials", "message", "passes", "seconds", "slots", "mean_batch", "plan")


def local_fit(req: Mapping[str, Any], X: np.ndarray, y: np.ndarray, Mv: np.ndarray, *,
              interrupt_check=None) -> bytes:
    """Worker side of an unsplit group: the whole search here; packed FitResult + epoch reports."""
    from ..fitting import _finite, _json_default
    from ..learners import _container, make_trainer

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
        from ..fitting import plan_group
        plan = plan_group(spec, family, X.shape[0], d)
    res = fit_with_trainer(trainer, family, spec, n_train=X.shape[0], n_val=Mv.shape[0],
                           n_skipped=int(req.get("n_skipped", 0)), d=d, on_epoch=on_epoch,
                           interrupt_check=interrupt_check, pattern=pattern_of(family), plan=plan)
    header = _finite({k: getattr(res, k) for k in FIT_FIELDS})
    header["events"] = events
    header = json.loads(json.dumps(header, default=_json_default))
    return _container.pack(header, res.model or b"")


def unpack_fit(blob: bytes):
    from ..fitting import FitResult
    from ..learners import _container

    header, body = _container.unpack(blob, "train_groups worker result")
    events = header.pop("events", [])
    return FitResult(model=body or None, **{k: header.get(k) for k in FIT_FIELDS}), events


def await_result(fut, abort, what: str = "task"):
    """A future's result, polling the run's abort flag (another group failed or a cancel)."""
    from .glm import _Aborted
    while True:
        if abort is not None and abort.is_set():
            raise _Aborted()
        try:
            return fut.result(timeout=0.25)
        except _FutureTimeout:
            continue


# ------------------------------------------------------------------ sequential: model hopper
class _Ctx:
    """What every task of one group carries: pool, snapshot, group, shards."""

    def __init__(self, pool, *, snapshot_id: int, group_no: int, group_key: str, d: int, shards: Sequence[tuple],
                 mem_mb: float, abort=None):
        self.pool, self.snapshot_id, self.group_no, self.group_key = pool, snapshot_id, group_no, group_key
        self.d, self.shards, self.mem_mb, self.abort = d, list(shards), mem_mb, abort

    def request(self, s: int, **extra) -> str:
        return json.dumps(dict({"snapshot": self.snapshot_id, "group_no": self.group_no,
                                "pieces": self.shards[s][3], "d": self.d, "mem_mb": self.mem_mb}, **extra))

    def meta(self, s: int, kind: str, pass_no: int, trials: List[int]) -> Dict[str, Any]:
        w, start, rows, _ = self.shards[s]
        return {"group_key": self.group_key, "kind": kind, "pass": pass_no, "shard": s, "row_start": start,
                "n_rows": rows, "trials": list(trials)}


class _Scored:
    """Validation scoring shared by the sharded trainers (coordinator holds the validation rows)."""

    def _init_scoring(self, family, X_val, y_val, metric):
        from ..validation import check_choice

        fam = family
        self.X_val = np.ascontiguousarray(X_val, dtype=np.float64)
        self.y_val = fam.prepare_labels(y_val, "the validation data")
        self.metric = check_choice(metric if metric is not None else fam.default_metric, "metric", fam.owner,
                                   fam.metric_names)
        self._val_cache: Dict[int, tuple] = {}

    def score(self, trial_id: int) -> float:
        from ..learners._metrics import validation_loss
        return validation_loss(self.metric, self.y_val, self._margins(trial_id))

    def metrics(self, trial_id: int) -> Dict[str, float]:
        from ..learners._metrics import validation_metrics
        return validation_metrics(self.family.report_metrics, self.metric, self.y_val, self._margins(trial_id))

    def _margins(self, trial_id: int) -> np.ndarray:
        c = self._get(trial_id)
        hit = self._val_cache.get(trial_id)
        if hit is not None and hit[0] == c["version"]:
            return hit[1]
        z = self._compute_margins(c)
        self._val_cache[trial_id] = (c["version"], z)
        return z

    def _get(self, trial_id: int, active_only: bool = False) -> Dict[str, Any]:
        c = self._cfgs.get(trial_id)
        if c is None and not active_only:
            c = self._retired.get(trial_id)
        if c is None:
            raise UndefinedObjectError(f"Trial {trial_id} is not in this trainer",
                                       hint="Add the configuration with add() first.")
        return c

    def _admit(self, trial_id: int, params: Mapping[str, Any]) -> Dict[str, Any]:
        """The validated ``params`` of a new trial (refused if it is already active); forgets
        a retired trial of that id and its cached validation scores. ``add`` stores the config."""
        if trial_id in self._cfgs:
            raise InvalidParameterError(f"Trial {trial_id} is already in the batch",
                                        hint="Use a new trial id for every configuration.")
        p = self.family.validate_params(params)
        self._retired.pop(trial_id, None)
        self._val_cache.pop(trial_id, None)
        return p

    def active(self) -> List[int]:
        return list(self._cfgs)

    def remove(self, trial_id: int) -> None:
        c = self._get(trial_id, active_only=True)
        del self._cfgs[trial_id]
        self._retired[trial_id] = c

    def converged(self, trial_id: int) -> bool:
        return self._get(trial_id)["status"] != "running"

    def status(self, trial_id: int) -> str:
        return self._get(trial_id)["status"]

    def iterations(self, trial_id: int) -> int:
        return int(self._get(trial_id)["done"])

    def params(self, trial_id: int) -> Dict[str, Any]:
        return dict(self._get(trial_id)["params"])


class ShardedMLPTrainer(_Scored):
    """engine.Trainer for an MLP group split over workers: configs hop shard to shard.

    ``run(iterations)`` gives every active config up to ``iterations`` epochs; an epoch is
    one visit to every shard. Which config visits which shard when is decided by
    :class:`groupml.learners.HopScheduler` (seeded hop order; with ``flexible`` a config
    whose next shard's worker is busy takes another unvisited shard on the least loaded
    free worker). The executed order is the visit log. Without ``flexible`` the models do
    not depend on timing (same run, same bytes).
    """

    def __init__(self, family, ctx: _Ctx, X_val, y_val, *, seed: int, metric: Optional[str] = None,
                 flexible: bool = True, stats: Optional[Dict[str, Any]] = None):
        self.family = family
        self.ctx = ctx
        self.seed = int(seed)
        self.flexible = bool(flexible)
        self.d = ctx.d
        self._init_scoring(family, X_val, y_val, metric)
        self.passes = 0
        self._cfgs: Dict[int, Dict[str, Any]] = {}
        self._retired: Dict[int, Dict[str, Any]] = {}
        self.interrupt_check: Optional[Callable[[], None]] = None
        self.stats = stats if stats is not None else _shard_stats(ctx)     # given when resumed from a checkpoint

    # epoch checkpoints (groupml.executor.checkpoint): between blocks every config has
    # finished whole epochs, so its state bytes + epoch count are its whole hop position
    _CKPT_KEYS = ("state", "done", "status", "version")
    CKPT_FORMAT = "mlp-hops-1"

    def checkpoint_state(self) -> Dict[str, Any]:
        return _save_configs(self, self.CKPT_FORMAT, self._CKPT_KEYS)

    def load_checkpoint(self, state: Mapping[str, Any]) -> None:
        _load_configs(self, state, self.CKPT_FORMAT, self._CKPT_KEYS)
        self.stats = state["stats"]

    def add(self, trial_id: int, params: Mapping[str, Any]) -> None:
        p = self._admit(trial_id, params)
        # the state is created by the worker of the first visit (init_state's bytes): torch
        # is loaded by worker backends only
        self._cfgs[trial_id] = {"params": p, "state": b"", "done": 0, "status": "running", "version": 0}

    def _init(self, c) -> Optional[Dict[str, Any]]:
        return None if c["state"] else {"family": self.family.name, "params": c["params"], "stats": self.stats}

    def _on_worker(self, c, op: str) -> bytes:
        ctx = self.ctx
        s = min(range(len(ctx.shards)), key=lambda i: (ctx.pool.load(ctx.shards[i][0]), i))
        fut = ctx.pool.submit(ctx.shards[s][0], ctx.request(s, op=op, init=self._init(c)), c["state"],
                              ctx.meta(s, "eval", c["done"], []), fn="task")
        return await_result(fut, ctx.abort)

    def run(self, iterations: int) -> None:
        from ..learners._hopper import HopScheduler

        ctx = self.ctx
        sched = HopScheduler([sh[0] for sh in ctx.shards], seed=self.seed, flexible=self.flexible)
        for tid, c in self._cfgs.items():
            if c["status"] == "running":
                sched.start(tid, c["done"], min(c["done"] + int(iterations), int(c["params"]["epochs"])))
        inflight: Dict[Any, tuple] = {}
        while sched.pending():
            for tid, epoch, s in sched.next_visits(load=ctx.pool.load):
                c = self._cfgs[tid]
                fut = ctx.pool.submit(ctx.shards[s][0], ctx.request(s, op="mlp_visit", epoch=epoch, shard=s,
                                                                    init=self._init(c)),
                                      c["state"], ctx.meta(s, "visit", epoch, [tid]), fn="task")
                inflight[fut] = tid
            if self.ctx.abort is not None and self.ctx.abort.is_set():
                from .glm import _Aborted
                raise _Aborted()
            finished, _ = wait(list(inflight), timeout=0.25, return_when=FIRST_COMPLETED)
            for fut in finished:
                tid = inflight.pop(fut)
                c = self._cfgs[tid]
                c["state"] = fut.result()
                c["version"] += 1
                if sched.finished(tid):
                    c["done"] += 1
                    self.passes += 1
                    if c["done"] >= int(c["params"]["epochs"]):
                        c["status"] = "max_iter"
                    if self.interrupt_check is not None:
                        self.interrupt_check()

    def _compute_margins(self, c) -> np.ndarray:
        return np.frombuffer(self._on_worker(c, "mlp_eval"), dtype="<f8").astype(np.float64)

    def model(self, trial_id: int):
        c = self._get(trial_id)
        return _ModelBytes(c["params"], self._on_worker(c, "mlp_model"))

    def state(self, trial_id: int) -> bytes:
        return self._get(trial_id)["state"]


class _ModelBytes:
    """A model as the worker serialised it (``params`` + ``to_bytes``, all fit_with_trainer needs)."""

    def __init__(self, params, data: bytes):
        self.params, self._data = dict(params), data

    def to_bytes(self) -> bytes:
        return self._data


def _shard_stats(ctx: _Ctx) -> Dict[str, Any]:
    """The MLP's standardisation moments of a split group: one ``mlp_stats`` task per shard,
    merged in shard order (as :func:`groupml.learners._sharded.init_state`)."""
    from ..learners import _mlp    # merge_stats is numpy only; torch stays unloaded here
    from .worker import unpack_stats

    futs = [ctx.pool.submit(w, ctx.request(s, op="mlp_stats"), b"", ctx.meta(s, "stats", 0, []), fn="task")
            for s, (w, *_rest) in enumerate(ctx.shards)]
    parts = [unpack_stats(await_result(f, ctx.abort), ctx.d) for f in futs]
    return _mlp.merge_stats(parts, ctx.d)


def _save_configs(trainer, fmt: str, keys: Sequence[str]) -> Dict[str, Any]:
    """The checkpoint_state of an MLP trainer: format, passes, stats and, per active and
    retired config, its trial id, params and ``keys`` (read back by :func:`_load_configs`)."""
    def one(tid, c):
        return dict({"trial_id": int(tid), "params": dict(c["params"])}, **{k: c[k] for k in keys})
    return {"format": fmt, "passes": int(trainer.passes), "stats": trainer.stats,
            "configs": [one(t, c) for t, c in trainer._cfgs.items()],
            "retired": [one(t, c) for t, c in trainer._retired.items()]}


def _load_configs(trainer, state: Mapping[str, Any], fmt: str, keys: Sequence[str], *, stats: bool = False,
                  hint: str = "Resume with the same model and options, or restart the run.") -> None:
    """Restore the active and retired configs of a sharded trainer from its checkpoint_state
    (and ``trainer.stats`` with ``stats``); ``hint`` goes with a checkpoint of another format."""
    if not isinstance(state, Mapping) or state.get("format") != fmt:
        raise PrerequisiteStateError("The checkpoint is not a state of this trainer", hint=hint)
    try:
        for bucket, key in ((trainer._cfgs, "configs"), (trainer._retired, "retired")):
            bucket.clear()
            for data in state[key]:
                bucket[int(data["trial_id"])] = dict({"params": trainer.family.validate_params(data["params"])},
                                                     **{k: data[k] for k in keys})
        trainer.passes = int(state["passes"])
        if stats:
            trainer.stats = state["stats"]
    except (KeyError, TypeError, ValueError) as exc:
        raise PrerequisiteStateError(f"The trainer checkpoint is damaged: {exc}",
                                     hint="Restart the run from scratch.") from None
    trainer._val_cache = {}


def check_checkpoint_models(state: Any, d: int) -> None:
    """Raise ModelFormatError unless every model a group's checkpoint holds is safe to hand to
    LightGBM or torch (``state`` is ``{"trainer": <a trainer's checkpoint_state()>, ...}``; a
    checkpoint is bytes read from a table, and both libraries can crash the backend on altered
    bytes): LightGBM model texts pass :func:`groupml.learners._lgbm.check_in_child` (texts this
    process made are trusted), MLP training states decode with
    :func:`groupml.learners._mlp.run_from_bytes`, which checks them against the network. GLM
    states are numpy arrays the trainer checks itself."""
    from .baselines import DataParallelMLPTrainer, MTPMLPTrainer

    trainer = state.get("trainer") if isinstance(state, Mapping) else None
    fmt = trainer.get("format") if isinstance(trainer, Mapping) else None
    # the MLP trainers' configs keep a training state (``_mlp.run_to_bytes``; None before a first block)
    mlp = (ShardedMLPTrainer.CKPT_FORMAT, MTPMLPTrainer.CKPT_FORMAT, DataParallelMLPTrainer.CKPT_FORMAT)
    if fmt not in (ShardedLGBMTrainer.CKPT_FORMAT,) + mlp:
        return
    key = "text" if fmt == ShardedLGBMTrainer.CKPT_FORMAT else "state"
    blobs = [c.get(key) for k in ("configs", "retired") for c in trainer.get(k) or () if isinstance(c, Mapping)]
    blobs = [bytes(b) for b in blobs if isinstance(b, (bytes, bytearray))]
    if key == "text":
        from ..learners._lgbm import check_in_child

        for text in blobs:
            check_in_child(text, d)
        return
    from ..learners import _mlp         # torch: only when a resumed checkpoint holds MLP states

    for blob in blobs:
        if _mlp.run_from_bytes(blob).n_features != d:
            raise PrerequisiteStateError("The trainer checkpoint is damaged: an MLP state is for another "
                                         "feature count", hint="Restart the run from scratch.")


# ------------------------------------------------------------------ sampling: LightGBM data-parallel
class ShardedLGBMTrainer(_Scored):
    """engine.Trainer for a LightGBM group split over workers (LightGBM's own data-parallel mode).

    The first ``run`` of a config trains it for its ``num_boost_round`` in one distributed
    job (every rank on the worker holding its shard, started as one gang so that ranks of
    different jobs never wait on each other in opposite orders); blocks then advance the
    number of trees the search sees. Every rank returns the same model text (checked).
    """

    def __init__(self, family, ctx: _Ctx, X_val, y_val, *, metric: Optional[str] = None, timeout_s: float = 120.0):
        self.family = family
        self.ctx = ctx
        self.d = ctx.d
        self.timeout_s = float(timeout_s)
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

    def _train(self, tids: List[int]) -> None:
        from ..learners._lgbm import lgb_module
        from .pool import rank_hosts

        ctx = self.ctx
        n_sh = len(ctx.shards)
        workers = [ctx.shards[s][0] for s in range(n_sh)]
        hosts = rank_hosts(ctx.pool.addresses, workers, [e["name"] for e in ctx.pool.endpoints])
        # every rank listens on a port its own worker found free on its host (the coordinator
        # cannot see the ports of another server)
        asks = {}
        for s, w in enumerate(workers):
            if w not in asks:
                req = json.dumps({"op": "lgbm_ports", "n": workers.count(w) * len(tids)})
                asks[w] = ctx.pool.submit(w, req, b"", ctx.meta(s, "ports", self.jobs, tids), fn="task")
        free = {w: iter(json.loads(await_result(f, ctx.abort))) for w, f in asks.items()}
        minutes = max(1, math.ceil(self.timeout_s / 60.0))
        gangs = []
        for j, tid in enumerate(tids):
            p = self._cfgs[tid]["params"]
            machines = [f"{hosts[s]}:{next(free[w])}" for s, w in enumerate(workers)]
            items = [(ctx.shards[s][0],
                      ctx.request(s, op="lgbm_rank", family=self.family.name, params=p,
                                  rounds=int(p["num_boost_round"]), machines=machines, rank=s,
                                  timeout_minutes=minutes),
                      b"", ctx.meta(s, "rank", self.jobs, [tid])) for s in range(n_sh)]
            self.jobs += 1
            gangs.append((tid, ctx.pool.submit_gang(items, fn="task")))
        lgb = lgb_module()
        for tid, futs in gangs:
            texts = [await_result(f, ctx.abort) for f in futs]
            trees = [t.split(b"end of trees")[0] for t in texts]    # the parameter sections name each rank's port
            if any(t != trees[0] for t in trees[1:]):
                raise PrerequisiteStateError(
                    f"The ranks of distributed LightGBM returned different models for trial {tid}",
                    hint="This is a bug in the distributed training setup; retry with workers => 1.")
            booster = lgb.Booster(model_str=texts[0].decode("utf-8"))
            c = self._cfgs[tid]
            c["booster"], c["trees"], c["text"] = booster, int(booster.current_iteration()), texts[0]

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
        from ..learners._lgbm import lgb_module

        _load_configs(self, state, self.CKPT_FORMAT, self._CKPT_KEYS)
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
        from ..learners._lgbm import extend_margins

        if c["booster"] is None or c["done"] == 0:
            return np.zeros(self.X_val.shape[0])
        z = extend_margins(c["booster"], self.X_val, c.get("margins"), c.get("scored", 0), c["done"], num_threads=1)
        c["scored"], c["margins"] = c["done"], z
        return z

    def model(self, trial_id: int):
        from ..learners import LightGBMModel
        c = self._get(trial_id)
        return LightGBMModel(self.family.name, c["params"], c["booster"].model_to_string(num_iteration=c["done"]))


# ------------------------------------------------------------------ an unsplit group: one task
def fit_on_worker(ctx: "_Ctx", *, model: str, search: dict, fit_options: dict, g: Mapping[str, Any],
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
    ctx = _Ctx(pool, snapshot_id=snapshot_id, group_no=g["group_no"], group_key=g["gkey"], d=d, shards=[shard],
               mem_mb=mem_mb, abort=abort)
    return fit_on_worker(ctx, model=model, search=search, fit_options=fit_options, g=g, on_epoch_raw=on_epoch_raw)


# ------------------------------------------------------------------ one group, any non-GLM pattern
def fit_other_group(pool, *, family, spec, opts, model: str, search: dict, fit_options: dict, g: Mapping[str, Any],
                    shards: Sequence[tuple], snapshot_id: int, d: int, X_val, y_val, mem_mb: float, abort,
                    on_epoch_raw: Callable, interrupt_check: Callable, lgbm_timeout_s: float = 120.0,
                    flexible: bool = True, checkpoint=None, resume=None, mode: str = "shards"):
    """The FitResult of one MLP / LightGBM group over the worker pool (see the module doc).

    ``mode`` (:func:`groupml.executor.plan.group_tasks`): ``'configs'`` (MTP) and ``'steps'``
    (the MLP's per-step DP) run the baselines of :mod:`groupml.executor.baselines`;
    ``'shards'``: one shard = a whole-group search on its worker, several = hopper / ranks.

    A split group calls ``checkpoint(event, state)`` after every block instead of
    ``on_epoch_raw`` when it is given, and continues from ``resume`` (see
    :func:`groupml.fitting.search_and_select`); an unsplit group is one worker task and
    has neither."""
    pre = precheck(family, n_train=int(g["n_train"]), n_val=int(g["n_val"]), n_pos=int(g["n_pos"]),
                   n_skipped=int(g["n_skipped"]), d=d, y_val=y_val)
    if pre is not None:
        return pre
    ctx = _Ctx(pool, snapshot_id=snapshot_id, group_no=g["group_no"], group_key=g["gkey"], d=d, shards=shards,
               mem_mb=mem_mb, abort=abort)
    pattern = pattern_of(family)
    if mode in ("configs", "steps"):
        from .baselines import baseline_trainer
        trainer = baseline_trainer(mode, pattern, family, ctx, X_val, y_val, opts, lgbm_timeout_s, resume)
        return fit_with_trainer(trainer, family, spec, n_train=int(g["n_train"]), n_val=int(g["n_val"]),
                                n_skipped=int(g["n_skipped"]), d=d, on_epoch=None if checkpoint else (
                                    lambda e: on_epoch_raw(e.block, e.passes, [tuple(r) for r in e.reports])),
                                interrupt_check=interrupt_check, pattern=pattern, checkpoint=checkpoint,
                                resume=resume)
    if len(shards) == 1:
        return fit_on_worker(ctx, model=model, search=search, fit_options=fit_options, g=g,
                             on_epoch_raw=on_epoch_raw)

    def on_epoch(e):
        on_epoch_raw(e.block, e.passes, [(tid, ep, sc, dec) for tid, ep, sc, dec in e.reports])

    if pattern == "sequential":
        trainer = ShardedMLPTrainer(family, ctx, X_val, y_val, seed=opts["seed"], metric=opts["metric"],
                                    flexible=flexible, stats=None if resume is None else resume["trainer"]["stats"])
    else:
        trainer = ShardedLGBMTrainer(family, ctx, X_val, y_val, metric=opts["metric"], timeout_s=lgbm_timeout_s)
    return fit_with_trainer(trainer, family, spec, n_train=int(g["n_train"]), n_val=int(g["n_val"]),
                            n_skipped=int(g["n_skipped"]), d=d, on_epoch=None if checkpoint else on_epoch,
                            interrupt_check=interrupt_check, pattern=pattern, checkpoint=checkpoint, resume=resume)
