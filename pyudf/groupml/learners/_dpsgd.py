"""Synchronous data-parallel mini-batch SGD for the MLP: the DP baseline (Kingpin 3.2).

A group's training rows are cut into shards held by different workers; every
mini-batch step is one synchronous round:

1. the coordinator holds the config's network, optimizer and dropout generator
   (an :class:`groupml.learners._mlp.MLPRun`). It takes the next batch of the
   *single-process* epoch order -- :func:`_mlp.epoch_order` over the whole group with
   shard id 0, cut every ``batch_size`` rows, exactly as :func:`_mlp.train_epoch`
   does -- and draws the whole batch's dropout masks from the config's generator
   (:func:`draw_masks`: the same draws, in the same order, as the forward pass of
   ``train_epoch``);
2. every worker gets the current weights (:func:`state_vector`), the local positions
   of the batch rows it holds (:func:`split_batch`) and their rows of the masks, and
   returns the mean loss and mean gradient over them (:func:`part_gradient`);
3. the coordinator adds the parts weighted by each worker's share of the batch,
   ``sum_k (n_k / B) * g_k`` in float64 in worker order (:func:`combine`): the
   batch-mean gradient; then one optimizer step (:func:`apply_step`).

**Equivalence.** Batches, masks, initial weights and optimizer are those of
single-process training (:class:`groupml.learners.MLPTrainer` on the group's training
rows in snapshot order); only the batch gradient is assembled from parts. When a
batch lies on one worker (always with one shard) its weight is exactly 1 and the
step is bit for bit the single-process step, so DP over one shard reproduces
``MLPTrainer`` bit for bit. Over several shards the weights differ from it only by
float32 rounding of the split sum (tested to a tight tolerance).

The executor's DP trainer (:mod:`groupml.executor.baselines`) is tested against
``MLPTrainer`` itself. ``torch`` is imported lazily.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ArrayLengthError
from . import _mlp


def state_vector(net) -> np.ndarray:
    """Every tensor of ``net.state_dict()`` (weights and standardisation buffers), flattened
    in state_dict order, as float64 (the float32 weights exactly, the float64 statistics
    without rounding)."""
    return np.concatenate([v.detach().reshape(-1).double().numpy() for v in net.state_dict().values()])


def load_state_vector(net, vec: np.ndarray) -> None:
    """Inverse of :func:`state_vector`: copy ``vec`` into ``net``'s tensors."""
    torch = _mlp.torch_module()
    tensors = list(net.state_dict().values())
    total = sum(int(v.numel()) for v in tensors)
    if vec.size != total:
        raise ArrayLengthError(f"The state vector has {vec.size} values; the network has {total}",
                               hint="Send the state of a network with the same layers and features.")
    pos = 0
    with torch.no_grad():
        for v in tensors:
            n = int(v.numel())
            v.copy_(torch.from_numpy(np.ascontiguousarray(vec[pos:pos + n])).reshape(v.shape))
            pos += n


def grad_size(net) -> int:
    """Number of trainable values (the length of a gradient vector)."""
    return int(sum(p.numel() for p in net.parameters()))


def hidden_widths(net) -> List[int]:
    return [int(lin.out_features) for lin in net.hidden]


def draw_masks(run: "_mlp.MLPRun", rows: int) -> Optional[list]:
    """The keep-masks of one training batch of ``rows`` rows, drawn from the config's
    generator as the forward pass of :func:`_mlp.train_epoch` draws them; None without
    dropout."""
    p = float(run.net.dropout)
    if not p > 0.0 or rows == 0:
        return None
    torch = _mlp.torch_module()
    return [torch.rand((rows, w), generator=run.gen) >= p for w in hidden_widths(run.net)]


def epoch_batches(run: "_mlp.MLPRun", epoch: int, n: int) -> List[np.ndarray]:
    """Row indices (into the group's ``n`` training rows) of every batch of ``epoch``."""
    order = _mlp.epoch_order(run.params["seed"], epoch, 0, n)
    bs = int(run.params["batch_size"])
    return [order[s:s + bs] for s in range(0, n, bs)]


def split_batch(idx: np.ndarray, bounds: Sequence[Tuple[int, int]]) -> List[Tuple[np.ndarray, np.ndarray]]:
    """Per shard ``(row_start, n_rows)``: (positions in the batch, local row numbers) of
    the batch rows it holds, in batch order."""
    out = []
    for start, rows in bounds:
        pos = np.flatnonzero((idx >= start) & (idx < start + rows))
        out.append((pos, (idx[pos] - start).astype(np.int64)))
    return out


def part_gradient(net, regression: bool, X: np.ndarray, y: np.ndarray,
                  masks: Optional[list]) -> Tuple[float, np.ndarray]:
    """Mean loss and mean gradient (float32, ``net.parameters()`` order) over the rows
    ``X``/``y`` (float64) of one batch, with their ``masks``; the computation of one
    step of :func:`_mlp.train_epoch` restricted to these rows."""
    torch = _mlp.torch_module()
    Xt, yt = _mlp.as_tensors(X, y)
    net.train()
    Xs, target = _mlp.standardize(net, Xt, yt, regression)
    loss = _mlp.train_step(net, Xs, target, regression, masks=masks)
    g = torch.cat([p.grad.reshape(-1) for p in net.parameters()]).numpy().copy()
    net.zero_grad(set_to_none=True)
    net.eval()
    return float(loss), g


def combine(parts: Sequence[Tuple[int, float, Optional[np.ndarray]]], batch_rows: int,
            size: int) -> Tuple[float, np.ndarray]:
    """The batch loss and batch-mean gradient from the workers' parts ``(n_k, loss_k, g_k)``
    (worker order): ``sum_k (n_k / B) * part_k`` in float64, the gradient rounded to float32."""
    g = np.zeros(size, dtype=np.float64)
    loss = 0.0
    for n_k, loss_k, g_k in parts:
        if n_k == 0:
            continue
        w = n_k / batch_rows
        g += w * np.asarray(g_k, dtype=np.float64)
        loss += w * float(loss_k)
    return loss, g.astype(np.float32)


def apply_step(run: "_mlp.MLPRun", g: np.ndarray) -> None:
    """One optimizer step of ``run`` with the batch gradient ``g``."""
    torch = _mlp.torch_module()
    pos = 0
    for p in run.net.parameters():
        n = int(p.numel())
        p.grad = torch.from_numpy(np.array(g[pos:pos + n], dtype=np.float32)).reshape(p.shape)
        pos += n
    run.opt.step()
    run.opt.zero_grad(set_to_none=True)
