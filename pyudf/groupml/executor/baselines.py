"""The baselines of Kingpin section 3 as executed strategies for the MLP and LightGBM.

Coordinator side (driver threads, no plpy) and the worker ops they call through
``groupml._gap_task``:

* **MTP** (model task parallelism): one task per (group, config) unit of work, on the
  least loaded worker; the worker loads the *whole* group (a copy per worker that runs
  one of its configs, cached in its backend like any shard) and trains the config alone.
  Configs of one group run at the same time on different workers.

  - MLP (:class:`MTPMLPTrainer`): a task is one config's epoch block (op ``mlp_block``:
    ``epoch_iters`` epochs of :func:`groupml.learners.mlp.train_epoch` over the whole
    group, then the validation decision values); the training state travels as bytes,
    so the search procedure drives it exactly as it drives ``MLPTrainer`` -- and the
    result is bit for bit that of GTP (same rows, order, seeds and code).
  - LightGBM (:class:`MTPLGBMTrainer`): a task trains a config's whole boosting run
    (op ``lgbm_fit``, single-node :func:`groupml.learners.train_lightgbm`); the search's
    blocks then advance how many trees it sees (prefixes of the model). The model equals
    single-node LightGBM's for the same params.

* **DP** for the MLP (:class:`DataParallelMLPTrainer`): every group split over all
  workers; each mini-batch step is a synchronous round (see
  :mod:`groupml.learners.dpsgd`): the coordinator holds the models (it loads torch),
  sends every worker the weights and its rows of the batch (op ``mlp_grad``, all
  configs of the round in one task), averages the returned gradients by batch share and
  applies the optimizer step. Equal to single-process training up to float32 rounding
  of the split gradient sum; bit for bit when a group has one shard.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from ..errors import InvalidParameterError
from ..learners import (MLPModel, as_data, check_fork, dpsgd, lgb_module, mlp, mlp_family, pack_container,
                        unpack_container)
from .core import (ScoredTrainer, await_result, load_configs, register_checkpoint_format, register_trainer,
                   save_configs, shard_stats)
from .patterns import ShardedLGBMTrainer, ShardedMLPTrainer


# a baseline's checkpoint must be resumed under the same strategy (its format names it)
_RESUME_HINT = "Resume with the same model, strategy and options, or restart the run."


def pick_copy(ctx, trial_id: int) -> int:
    """The index of the worker copy (``ctx.shards``: one whole-group entry per worker) for
    a config's next MTP task: the least loaded worker, ties from the config's own slot
    ``(group_no + trial_id) mod p`` onwards, so a group's configs spread over the workers."""
    p = len(ctx.shards)
    home = (int(ctx.group_no) + int(trial_id)) % p
    return min(range(p), key=lambda s: (ctx.pool.load(ctx.shards[s][0]), (s - home) % p))


# ------------------------------------------------------------------ MTP, sequential (MLP)
class MTPMLPTrainer(ShardedMLPTrainer):
    """engine.Trainer for MTP over the MLP: a config's epoch block is one task on one
    worker holding a copy of the whole group; configs of a group run concurrently."""

    CKPT_FORMAT = "mlp-mtp-1"

    def __init__(self, family, ctx, X_val, y_val, *, metric: Optional[str] = None):
        self.family = family
        self.ctx = ctx
        self.d = ctx.d
        self._init_scoring(family, X_val, y_val, metric)
        self.passes = 0
        self.stats = None                # a state is created by the worker of the config's first block
        self._cfgs: Dict[int, Dict[str, Any]] = {}
        self._retired: Dict[int, Dict[str, Any]] = {}
        self.interrupt_check = None

    def _init(self, c):
        return None

    # epoch checkpoints: between blocks a config is its state bytes and epoch count (the
    # validation decision values are recomputed by a worker after a resume)
    def checkpoint_state(self) -> Dict[str, Any]:
        return save_configs(self, self.CKPT_FORMAT, ("state", "done", "status", "version"))

    def load_checkpoint(self, state: Mapping[str, Any]) -> None:
        load_configs(self, state, self.CKPT_FORMAT, ("state", "done", "status", "version"), stats=True,
                      hint=_RESUME_HINT)

    def run(self, iterations: int) -> None:
        ctx = self.ctx
        futs = []
        for tid in sorted(self._cfgs):
            c = self._cfgs[tid]
            if c["status"] != "running":
                continue
            n = min(c["done"] + int(iterations), int(c["params"]["epochs"])) - c["done"]
            if n <= 0:
                continue
            s = pick_copy(ctx, tid)
            req = ctx.request(s, op="mlp_block", family=self.family.name, params=c["params"], epochs=n)
            futs.append((tid, ctx.pool.submit(ctx.shards[s][0], req, c["state"],
                                              ctx.meta(s, "block", c["done"], [tid]), fn="task")))
        for tid, fut in futs:
            header, body = unpack_block(await_result(fut, ctx.abort))
            c = self._cfgs[tid]
            cut = int(header["state_bytes"])
            c["state"], c["margins"] = body[:cut], np.frombuffer(body[cut:], dtype="<f8").astype(np.float64)
            self.passes += int(header["epochs_done"]) - c["done"]
            c["done"], c["status"] = int(header["epochs_done"]), str(header["status"])
            c["version"] += 1
            if self.interrupt_check is not None:
                self.interrupt_check()

    def _compute_margins(self, c) -> np.ndarray:
        if c.get("margins") is not None:
            return c["margins"]
        if not c["state"]:
            return np.zeros(self.X_val.shape[0])
        return super()._compute_margins(c)            # op mlp_eval on a worker (after a resume)


def mlp_block(req: Mapping[str, Any], blob: Optional[bytes], X: np.ndarray, y: np.ndarray,
              X_val: np.ndarray, interrupt_check=None) -> bytes:
    """Worker side of an MTP block: ``req['epochs']`` epochs of one config over the whole
    group (a fresh state when ``blob`` is empty, initialised as ``MLPTrainer`` does), then
    its decision values on the validation rows. Packed: header (status, epochs_done,
    state_bytes) + state bytes + float8 decision values."""
    fam = mlp_family(req["family"])
    d = int(req["d"])
    X, y = as_data(X, y, "the group's training rows")
    y = fam.prepare_labels(y, "the group's training rows")
    if blob:
        run = mlp.run_from_bytes(bytes(blob))
    else:
        run = mlp.new_run(fam, req["params"], d, mlp.merge_stats([mlp.partial_stats(X, y)], d))
    Xt, yt = mlp.as_tensors(X, y)
    prepared = mlp.standardize(run.net, Xt, yt, run.regression)      # once for every epoch
    status = "running"
    for _ in range(int(req["epochs"])):
        loss = mlp.train_epoch(run, Xt, yt, epoch=run.epochs_done, shard_id=0, interrupt_check=interrupt_check,
                                prepared=prepared)
        run.epochs_done += 1
        if not math.isfinite(loss):
            status = "diverged"
            break
        if run.epochs_done >= int(run.params["epochs"]):
            status = "max_iter"
            break
    with np.errstate(over="ignore", invalid="ignore"):
        z = mlp.decision_values(run.net, X_val, run.regression)
    state = mlp.run_to_bytes(run)
    return pack_container({"status": status, "epochs_done": run.epochs_done, "state_bytes": len(state)},
                           state + z.astype("<f8").tobytes())


def unpack_block(blob: bytes):
    return unpack_container(blob, "MTP block result")


# ------------------------------------------------------------------ MTP, sampling (LightGBM)
class MTPLGBMTrainer(ShardedLGBMTrainer):
    """engine.Trainer for MTP over LightGBM: a config's whole boosting run is one task
    (single-node LightGBM on a worker holding a copy of the group); blocks advance the
    number of trees the search sees."""

    def _train(self, tids: List[int]) -> None:
        ctx = self.ctx
        futs = []
        for tid in tids:
            p = self._cfgs[tid]["params"]
            s = pick_copy(ctx, tid)
            req = ctx.request(s, op="lgbm_fit", family=self.family.name, params=p,
                              rounds=int(p["num_boost_round"]))
            futs.append((tid, ctx.pool.submit(ctx.shards[s][0], req, b"", ctx.meta(s, "boost", self.jobs, [tid]),
                                              fn="task")))
            self.jobs += 1
        lgb = lgb_module()
        for tid, fut in futs:
            text = await_result(fut, ctx.abort)
            booster = lgb.Booster(model_str=text.decode("utf-8"))
            c = self._cfgs[tid]
            c["booster"], c["trees"], c["text"] = booster, int(booster.current_iteration()), text


# ------------------------------------------------------------------ DP, sequential (MLP)
class DataParallelMLPTrainer(ScoredTrainer):
    """engine.Trainer for DP over the MLP: synchronous data-parallel SGD, one round of
    worker tasks per mini-batch step (all active configs of the group in each round)."""

    CKPT_FORMAT = "mlp-dp-1"

    def __init__(self, family, ctx, X_val, y_val, *, metric: Optional[str] = None,
                 stats: Optional[Dict[str, Any]] = None):
        self.family = family
        self.ctx = ctx
        self.d = ctx.d
        self._init_scoring(family, X_val, y_val, metric)
        self.passes = 0
        self.rounds = 0
        self._cfgs: Dict[int, Dict[str, Any]] = {}
        self._retired: Dict[int, Dict[str, Any]] = {}
        self.interrupt_check = None
        self.bounds = [(int(s[1]), int(s[2])) for s in ctx.shards]
        self.n = sum(r for _, r in self.bounds)
        self.stats = stats if stats is not None else shard_stats(ctx)     # given when resumed from a checkpoint

    # epoch checkpoints: between blocks a config is its whole training state (weights,
    # optimizer moments, dropout generator) and its epoch count; rounds continue numbering
    def checkpoint_state(self) -> Dict[str, Any]:
        for c in list(self._cfgs.values()) + list(self._retired.values()):
            c["state"] = mlp.run_to_bytes(c["run"])
        out = save_configs(self, self.CKPT_FORMAT, ("state", "done", "status", "version"))
        out["rounds"] = int(self.rounds)
        return out

    def load_checkpoint(self, state: Mapping[str, Any]) -> None:
        load_configs(self, state, self.CKPT_FORMAT, ("state", "done", "status", "version"), stats=True,
                      hint=_RESUME_HINT)
        self.rounds = int(state["rounds"])
        for c in list(self._cfgs.values()) + list(self._retired.values()):
            c["run"] = mlp.run_from_bytes(c["state"])

    def add(self, trial_id: int, params: Mapping[str, Any]) -> None:
        p = self._admit(trial_id, params)
        self._cfgs[trial_id] = {"params": p, "run": mlp.new_run(self.family, p, self.d, self.stats), "done": 0,
                                "status": "running", "version": 0}

    def fork(self, trial_id: int, params: Mapping[str, Any], parent_id: int, epochs: int) -> None:
        """Add ``trial_id`` continuing active ``parent_id``'s training state with ``params``
        (population based training, :func:`groupml.learners.mlp.fork_state`)."""
        parent = self._get(parent_id, active_only=True)
        check_fork(trial_id, parent_id, parent["done"], epochs)
        p = self._admit(trial_id, params)
        run = mlp.run_from_bytes(mlp.fork_state(mlp.run_to_bytes(parent["run"]), p))
        self._cfgs[trial_id] = {"params": p, "run": run, "done": parent["done"], "status": "running", "version": 0}

    def run(self, iterations: int) -> None:
        jobs: Dict[int, Dict[str, Any]] = {}
        for tid, c in self._cfgs.items():
            if c["status"] == "running":
                target = min(c["done"] + int(iterations), int(c["params"]["epochs"]))
                if target > c["done"]:
                    jobs[tid] = {"target": target, "batches": dpsgd.epoch_batches(c["run"], c["done"], self.n),
                                 "pos": 0, "total": 0.0}
        while jobs:
            self._round(jobs)

    def _round(self, jobs: Dict[int, Dict[str, Any]]) -> None:
        """One synchronous step of every config in ``jobs``: p worker tasks, then the updates."""
        ctx = self.ctx
        tids = sorted(jobs)
        per_cfg = []
        for tid in tids:
            run = self._cfgs[tid]["run"]
            idx = jobs[tid]["batches"][jobs[tid]["pos"]]
            masks = dpsgd.draw_masks(run, len(idx))
            per_cfg.append((tid, run, idx, masks, dpsgd.split_batch(idx, self.bounds),
                            dpsgd.state_vector(run.net).astype("<f8").tobytes()))
        futs = []
        for s, (w, *_rest) in enumerate(ctx.shards):
            configs, blob = [], []
            for tid, run, idx, masks, split, state in per_cfg:
                pos, loc = split[s]
                configs.append({"params": self._cfgs[tid]["params"], "rows": int(pos.size),
                                "masks": masks is not None and pos.size > 0})
                blob += [state, loc.astype("<i4").tobytes()]
                if masks is not None and pos.size > 0:
                    sel = np.asarray(pos)
                    blob.append(b"".join(m.numpy()[sel].astype(np.uint8).tobytes() for m in masks))
            req = ctx.request(s, op="mlp_grad", family=self.family.name, configs=configs)
            futs.append(ctx.pool.submit(w, req, b"".join(blob), ctx.meta(s, "step", self.rounds, tids), fn="task"))
        outs = [np.frombuffer(await_result(f, ctx.abort), dtype="<f8") for f in futs]   # shard order
        self.rounds += 1
        offsets = [0] * len(outs)
        for tid, run, idx, masks, split, _state in per_cfg:
            size = dpsgd.grad_size(run.net)
            parts = []
            for s, out in enumerate(outs):
                o = offsets[s]
                parts.append((int(split[s][0].size), float(out[o]), out[o + 1:o + 1 + size]))
                offsets[s] = o + 1 + size
            loss, g = dpsgd.combine(parts, len(idx), size)
            dpsgd.apply_step(run, g)
            self._after_step(tid, jobs, loss)

    def _after_step(self, tid: int, jobs, loss: float) -> None:
        c, job = self._cfgs[tid], jobs[tid]
        job["total"] += loss
        job["pos"] += 1
        if job["pos"] < len(job["batches"]):
            return
        run = c["run"]
        run.visits += 1
        run.epochs_done += 1
        c["done"] += 1
        c["version"] += 1
        self.passes += 1
        if not math.isfinite(job["total"] / len(job["batches"])):
            c["status"] = "diverged"
        elif c["done"] >= int(c["params"]["epochs"]):
            c["status"] = "max_iter"
        if c["status"] != "running" or c["done"] >= job["target"]:
            del jobs[tid]
        else:
            job.update(batches=dpsgd.epoch_batches(run, c["done"], self.n), pos=0, total=0.0)
        if self.interrupt_check is not None:
            self.interrupt_check()

    def _compute_margins(self, c) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            return mlp.decision_values(c["run"].net, self.X_val, c["run"].regression)

    def model(self, trial_id: int):
        return MLPModel.from_run(self._get(trial_id)["run"])


# ------------------------------------------------------------------ this module's strategies
@register_trainer("sequential", "configs")
def _mtp_mlp_trainer(family, ctx, X_val, y_val, opts, *, lgbm_timeout_s, flexible, resume):
    return MTPMLPTrainer(family, ctx, X_val, y_val, metric=opts["metric"])


@register_trainer("sampling", "configs")
def _mtp_lgbm_trainer(family, ctx, X_val, y_val, opts, *, lgbm_timeout_s, flexible, resume):
    return MTPLGBMTrainer(family, ctx, X_val, y_val, metric=opts["metric"], timeout_s=lgbm_timeout_s)


@register_trainer("sequential", "steps")
def _dp_mlp_trainer(family, ctx, X_val, y_val, opts, *, lgbm_timeout_s, flexible, resume):
    stats = None if resume is None else resume["trainer"].get("stats")
    return DataParallelMLPTrainer(family, ctx, X_val, y_val, metric=opts["metric"], stats=stats)


for _fmt in (MTPMLPTrainer.CKPT_FORMAT, DataParallelMLPTrainer.CKPT_FORMAT):
    register_checkpoint_format(_fmt, "state")


# (family, params, d) -> network: a worker's scratch networks for DP gradient tasks
_NETS: "OrderedDict[str, Any]" = OrderedDict()
_MAX_NETS = 64


def _scratch_net(family: str, params: Mapping[str, Any], d: int):
    key = json.dumps([family, params, d], sort_keys=True)
    net = _NETS.get(key)
    if net is None:
        p = mlp_family(family).validate_params(params)
        net = mlp.build_net(p, d)
        _NETS[key] = net
        while len(_NETS) > _MAX_NETS:
            _NETS.popitem(last=False)
    else:
        _NETS.move_to_end(key)
    return net


def mlp_grad(req: Mapping[str, Any], blob: bytes, X: np.ndarray, y: np.ndarray) -> bytes:
    """Worker side of one DP step: for every config of the round, its weights (float64
    state vector), the local rows of the batch on this shard (int32) and their dropout
    masks (uint8, per hidden layer); returns per config ``[loss, gradient...]`` (float8)
    over those rows -- zeros when the shard holds none of the batch."""
    fam = mlp_family(req["family"])
    d = int(req["d"])
    y = fam.prepare_labels(y, "the shard")
    torch = mlp.torch_module()
    view = memoryview(bytes(blob))
    at = 0
    out = []
    for cfg in req["configs"]:
        net = _scratch_net(fam.name, cfg["params"], d)
        n_state = sum(int(v.numel()) for v in net.state_dict().values())
        state = np.frombuffer(view[at:at + 8 * n_state], dtype="<f8").astype(np.float64)
        at += 8 * n_state
        rows = cfg.get("rows")
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise InvalidParameterError(f"A DP step's 'rows' must be a count of rows; got {rows!r}",
                                        hint="_gap_task is internal to train_groups.")
        loc = np.frombuffer(view[at:at + 4 * rows], dtype="<i4").astype(np.int64)
        at += 4 * rows
        masks = None
        if cfg.get("masks"):
            masks = []
            for w in dpsgd.hidden_widths(net):
                m = np.frombuffer(view[at:at + rows * w], dtype=np.uint8).reshape(rows, w)
                masks.append(torch.from_numpy(m.astype(bool)))
                at += rows * w
        size = dpsgd.grad_size(net)
        if rows == 0:
            out.append(np.zeros(1 + size))
            continue
        if loc.min() < 0 or loc.max() >= X.shape[0]:
            raise InvalidParameterError(f"A DP step names rows outside this shard of {X.shape[0]} rows",
                                        hint="_gap_task is internal to train_groups.")
        dpsgd.load_state_vector(net, state)
        loss, g = dpsgd.part_gradient(net, fam.kind == "regression", X[loc], y[loc], masks)
        out.append(np.concatenate([[loss], g.astype(np.float64)]))
    if at != len(view):
        raise InvalidParameterError(f"A DP step sent {len(view)} bytes; its configs describe {at}",
                                    hint="_gap_task is internal to train_groups.")
    return np.concatenate(out).astype("<f8").tobytes()
