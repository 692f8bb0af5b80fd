"""Worker side of the grouped-learning executor (runs inside a worker backend).

``groupml._gap_partial(request, theta)`` calls :func:`gap_partial`: load the shard's
training rows from the snapshot (cached in this backend's memory for the run, bounded by
``mem_mb``; a shard that does not fit is re-read on every call -- Kingpin's spill
extension), evaluate every configuration column of ``theta`` in one batched pass and
return the *unnormalised* partial sums (loss, gradient) as little-endian float8 bytes:
``[n_rows, f_1..f_k, G (d+1) x k row major]``.  The coordinator adds the shards up,
divides by the group's training rows and adds the regularisation terms, so the result
equals a pass of :class:`groupml.learners.GLMTrainer` over the whole group.

Everything here except :func:`load_shard` is pure numpy; the database is reached only
through the :class:`groupml.db.Session` handed in.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from numbers import Integral
from typing import Any, List, Mapping, Optional, Tuple

import numpy as np

from .. import catalog
from ..errors import InvalidParameterError
from ..fitting import unpack_rows
from ..learners import (GLMTrainer, free_ports, glmsgd, mlp, row_hash_and_order, train_lightgbm,
                        train_lightgbm_rank_isolated, visit)
from ..validation import check_number, shown
from .baselines import mlp_block, mlp_grad
from .core import pack_stats
from .patterns import local_fit, rank_digest
from .snapshot import build_part, load_validation

# (snapshot_id, group_no, shard blocks) -> (trainer, bytes); one run's shards per backend
_CACHE: "OrderedDict[tuple, Tuple[Any, int]]" = OrderedDict()
_ONE_BLAS_THREAD = False


def one_blas_thread() -> None:
    """Limit BLAS to one thread in this worker backend, for the rest of its life.

    A worker is one core's worth of work (Kingpin's unit of placement).  A multi-threaded
    BLAS in every worker oversubscribes the machine: for example, a 20,000 x 100 data
    pass took 26 ms of CPU with OpenBLAS's default threads beside other busy backends and
    2.3 ms with one thread.  torch and LightGBM set their own thread counts already.
    """
    global _ONE_BLAS_THREAD
    if not _ONE_BLAS_THREAD:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")   # stays in force: not used as a context
        _ONE_BLAS_THREAD = True
STATS = {"loads": 0, "hits": 0, "rows_loaded": 0}

def load_shard(session, snapshot_id: int, group_no: int, pieces, d: int) -> np.ndarray:
    """Training rows of one shard: ``pieces`` = [[block_no, skip, take], ...] (training rows
    of each block, after its validation prefix).  Returns an (n, d+1) float64 matrix."""
    blocks = [int(p[0]) for p in pieces]
    parts = catalog.training_pieces(session, snapshot_id, group_no, pieces, (d + 1) * 8)
    if len(parts) != len(blocks):
        raise InvalidParameterError(
            f"Snapshot {snapshot_id} group {group_no} lacks some of blocks {blocks}",
            hint="The snapshot was dropped or changed while the run was going; call train_groups again.")
    return unpack_rows(b"".join(parts), d + 1)


INTERNAL_HINT = "_gap_partial and _gap_task are internal to train_groups; call train_groups instead."
_REQUEST_INTS = {"snapshot": 1, "group_no": 0, "d": 1, "k": 1, "epoch": 0, "shard": 0, "rank": 0,
                 "rounds": 1, "timeout_minutes": 1, "row_start": 0, "n_rows": 0}


class _Request(dict):
    """A worker request (JSON object): a missing key is an InvalidParameterError, not a KeyError."""

    owner = "_gap_task"

    def __missing__(self, key):
        raise InvalidParameterError(f"The request of {self.owner} lacks '{key}'", hint=INTERNAL_HINT)


def parse_request(request: Any, owner: str) -> "_Request":
    """The request of ``_gap_partial`` / ``_gap_task`` as a :class:`_Request`, its common
    fields checked: whole numbers where numbers are expected, ``pieces`` as
    ``[[block_no, skip, take], ...]`` (the coordinator always sends them so; a hand-made
    request gets a 22023 instead of a Python traceback)."""
    if isinstance(request, (str, bytes)):
        try:
            request = json.loads(request)
        except ValueError:
            request = None
    if not isinstance(request, dict):
        raise InvalidParameterError(f"The request of {owner} must be a JSON object",
                                    hint=INTERNAL_HINT)
    req = _Request(request)
    req.owner = owner
    for key, low in _REQUEST_INTS.items():
        if key in req:
            req[key] = check_number(req[key], key, f"the request of {owner}", ge=low, le=2 ** 62,
                                    integer=True, hint=INTERNAL_HINT)
    if "pieces" in req:
        _check_pieces(req["pieces"], "pieces", owner)
    if "parts" in req:                  # a node's rank: the holder snapshots it reads
        parts = req["parts"]
        if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
            raise InvalidParameterError(f"The 'parts' value of the request of {owner} must be a non-empty list of "
                                        f"objects", hint=INTERNAL_HINT)
        for p in parts:
            p["snapshot"] = check_number(p.get("snapshot"), "snapshot", f"a part of the request of {owner}", ge=1,
                                         le=2 ** 62, integer=True, hint=INTERNAL_HINT)
            _check_pieces(p.get("pieces"), "pieces of a part", owner)
        req["seed"] = check_number(req.get("seed"), "seed", f"the request of {owner}", ge=0, le=2 ** 63 - 1,
                                   integer=True, hint=INTERNAL_HINT)
    return req


def _check_pieces(pieces: Any, what: str, owner: str) -> None:
    if not isinstance(pieces, list) or not all(
            isinstance(p, list) and len(p) == 3 and all(
                isinstance(v, Integral) and not isinstance(v, bool) and 0 <= v < 2 ** 31 for v in p)
            for p in pieces):
        raise InvalidParameterError(
            f"The '{what}' value of the request of {owner} must be a list of "
            f"[block_no, skip, take] non-negative integers", hint=INTERNAL_HINT)


class _Cfg:
    __slots__ = ("params",)

    def __init__(self, params):
        self.params = params


def _shard_trainer(family: str, M: np.ndarray, d: int):
    return GLMTrainer(family, np.ascontiguousarray(M[:, :d]), M[:, d].copy())


def partial_sums(trainer, params_list: List[Mapping[str, Any]], theta: np.ndarray,
                 class_w: Optional[List[float]] = None) -> np.ndarray:
    """Unnormalised loss and gradient sums of ``trainer``'s rows for every column of theta.

    ``class_w`` = [w0, w1]: the group's balanced class weights (computed by the
    coordinator from the whole group's label counts, not from this shard's).
    """
    fam = trainer.family
    cfgs = []
    for p in params_list:
        q = dict(p)
        q["l2"] = 0.0                    # regularisation is added once, by the coordinator
        q["fit_intercept"] = True        # the coordinator zeroes the intercept gradient
        cfgs.append(_Cfg(fam.validate_params(q)))
    # the pass dtype of the configs as the coordinator has them (one without intercept keeps
    # float64 passes, GLMFamily.pass_dtype_for)
    dtype = trainer._pass_dtype([_Cfg(fam.validate_params(p)) for p in params_list])
    if class_w is not None:
        trainer._balanced_w = np.where(trainer.y > 0.5, float(class_w[1]), float(class_w[0]))
    n = trainer.n
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        f, G = trainer._evaluate(theta, cfgs, dtype=dtype)
    out = np.empty(1 + f.size + G.size)
    out[0] = n
    out[1:1 + f.size] = f * n
    out[1 + f.size:] = (G * n).reshape(-1)
    return out


def gap_partial(session, request: Mapping[str, Any], theta_bytes: bytes) -> bytes:
    one_blas_thread()
    req = parse_request(request, "_gap_partial")
    d, k = int(req["d"]), int(req["k"])
    params = req["params"]
    if not (isinstance(params, list) and len(params) == k and all(isinstance(p, dict) for p in params)):
        raise InvalidParameterError(f"The 'params' value of the request of _gap_partial must be a list of "
                                    f"k = {k} objects", hint=INTERNAL_HINT)
    if req.get("class_w") is not None and not (
            isinstance(req["class_w"], list) and len(req["class_w"]) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in req["class_w"])):
        raise InvalidParameterError("The 'class_w' value of the request of _gap_partial must be [w0, w1]",
                                    hint=INTERNAL_HINT)
    if theta_bytes is None or len(theta_bytes) != 8 * (d + 1) * k:
        raise InvalidParameterError(
            f"The theta of _gap_partial must hold (d + 1) * k = {(d + 1) * k} float8 values; got "
            f"{0 if theta_bytes is None else len(theta_bytes)} bytes", hint=INTERNAL_HINT)
    key = (int(req["snapshot"]), int(req["group_no"]), json.dumps(req["pieces"]))
    trainer = _cached(_CACHE, key)
    if trainer is None:
        M = load_shard(session, key[0], key[1], req["pieces"], d)
        trainer = _shard_trainer(req["family"], M, d)
        STATS["loads"] += 1
        STATS["rows_loaded"] += M.shape[0]
        del M
        size = trainer.X.nbytes + trainer.y.nbytes
        if trainer.family.pass_dtype != np.float64:      # its float32 pass rows, built at the first pass
            size += size // 2
        _remember(_CACHE, key, trainer, size, req)
    theta = np.frombuffer(theta_bytes, dtype="<f8").reshape(d + 1, k)
    out = partial_sums(trainer, req["params"], np.ascontiguousarray(theta), req.get("class_w"))
    return out.astype("<f8").tobytes()


def _cached(cache: "OrderedDict", key: tuple):
    """A shard cache's entry for ``key`` (counted as a hit, made most recent), or None; a key
    of another snapshot than the cached ones empties the cache first (a new run on this backend)."""
    hit = cache.get(key)
    if hit is not None:
        cache.move_to_end(key)
        STATS["hits"] += 1
        return hit[0]
    if cache and next(iter(cache))[0] != key[0]:
        cache.clear()
    return None


def _remember(cache: "OrderedDict", key: tuple, value: Any, size: int, req: Mapping[str, Any]) -> None:
    """Keep ``value`` while the cache fits the request's ``mem_mb`` (least recent out first);
    a value larger than the whole budget is not kept (streamed again next time)."""
    budget = int(float(req.get("mem_mb", 512)) * (1 << 20))
    if size <= budget:
        cache[key] = (value, size)
        while sum(v[1] for v in cache.values()) > budget:
            cache.popitem(last=False)


# ------------------------------------------------------------- sequential and sampling patterns
# (snapshot_id, group_no, pieces) -> ((X, y), bytes): raw shard matrices for the MLP and LightGBM ops
_MCACHE: "OrderedDict[tuple, Tuple[Any, int]]" = OrderedDict()


def shard_arrays(session, req: Mapping[str, Any]) -> Tuple[np.ndarray, np.ndarray]:
    """(X, y) of one shard as contiguous float64 arrays, cached like the GLM shards (with
    ``parts``: :func:`node_arrays`)."""
    if req.get("parts"):
        return node_arrays(session, req)
    d = int(req["d"])
    key = (int(req["snapshot"]), int(req["group_no"]), json.dumps(req["pieces"]))
    hit = _cached(_MCACHE, key)
    if hit is not None:
        return hit
    M = load_shard(session, key[0], key[1], req["pieces"], d)
    X, y = np.ascontiguousarray(M[:, :d]), np.ascontiguousarray(M[:, d])
    del M
    STATS["loads"] += 1
    STATS["rows_loaded"] += X.shape[0]
    _remember(_MCACHE, key, (X, y), X.nbytes + y.nbytes, req)
    return X, y


def node_arrays(session, req: Mapping[str, Any]) -> Tuple[np.ndarray, np.ndarray]:
    """(X, y) of a group's training rows in the holder snapshots on this node (``parts``: the
    snapshot and pieces of each): the rows a node's LightGBM rank trains on, in the seeded
    order the snapshots use (:func:`groupml.learners.row_hash_and_order`), so that the rank's
    data does not depend on how many shard tables of the node hold the group."""
    arrays = [shard_arrays(session, dict(req, snapshot=p["snapshot"], pieces=p["pieces"], parts=None))
              for p in req["parts"]]
    if len(arrays) == 1:
        return arrays[0]
    X = np.concatenate([a[0] for a in arrays])
    y = np.concatenate([a[1] for a in arrays])
    order = row_hash_and_order(X, y, int(req["seed"]))[1]
    return np.ascontiguousarray(X[order]), np.ascontiguousarray(y[order])


def validation_arrays(session, req: Mapping[str, Any]) -> Tuple[np.ndarray, np.ndarray]:
    """(X_val, y_val) of the group, cached beside its shards."""
    d = int(req["d"])
    key = (int(req["snapshot"]), int(req["group_no"]), "validation")
    hit = _MCACHE.get(key)
    if hit is not None:
        _MCACHE.move_to_end(key)
        return hit[0]
    Mv = load_validation(session, key[0], key[1], d)
    X, y = np.ascontiguousarray(Mv[:, :d]), np.ascontiguousarray(Mv[:, d])
    if X.nbytes <= float(req.get("mem_mb", 512)) * (1 << 20):
        _MCACHE[key] = ((X, y), X.nbytes + y.nbytes)
    return X, y


def _mlp_state(req: Mapping[str, Any], blob: Optional[bytes]) -> bytes:
    """The config's training state: ``blob``, or a fresh one from ``req['init']`` (family,
    params, merged stats) -- exactly the initial state of :func:`groupml.learners.train_sharded`."""
    if blob:
        return bytes(blob)
    init = req["init"]
    return mlp.run_to_bytes(mlp.new_run(init["family"], init["params"], int(req["d"]), init["stats"]))


def _cancel_check(session):
    """The session's cancel check (None without a session: the pure-Python tests)."""
    return None if session is None else session.check_cancel


def gap_task(session, request: Mapping[str, Any], blob: Optional[bytes]) -> bytes:
    """``groupml._gap_task(request, blob)``: one unit of work of the sequential or sampling
    pattern on this backend's shard of a snapshot.

    * ``mlp_stats``: the shard's standardisation moments (merged by the coordinator);
    * ``mlp_load``: load the shard into this backend's cache (a worker joining a model
      hopper run takes a copy of its partitions), returns its row count;
    * ``mlp_visit``: ``blob`` is a config's MLP training state (empty: a fresh one from
      ``init``); one pass over the shard (:func:`groupml.learners.visit`), returns the new state;
    * ``mlp_eval`` / ``mlp_model``: the state's decision values on the group's validation rows
      (float8) / its model bytes -- so the coordinator never loads torch;
    * ``mlp_fork``: the state continued with ``params`` (population based training's copy of
      a configuration, :func:`groupml.learners.mlp.fork_state`);
    * ``fit``: the whole search of an unsplit group on this backend (training rows of the
      shard, validation rows of the group), returns the packed result;
    * ``snapshot_part``: pack, split and store this worker's share of a snapshot's groups
      (:func:`groupml.executor.snapshot.build_part`), returns its counts as JSON;
    * ``lgbm_ports``: ``n`` TCP ports free on this backend's host, as JSON (the listen
      ports of the LightGBM ranks this worker will run);
    * ``lgbm_rank``: one rank of LightGBM's data-parallel training over the group's
      shards (``machines``: each rank's worker address and a port it chose), returns the
      model text (with ``digest``: its :func:`groupml.executor.patterns.rank_digest`); a
      node's rank reads every holder snapshot in ``parts`` (:func:`node_arrays`);
    * ``glm_stats`` / ``glm_visit`` / ``glm_load``: as ``mlp_stats`` / ``mlp_visit`` / ``mlp_load`` for a GLM trained by SGD under
      model hopper parallelism (``blob``: its state, :func:`groupml.learners.glmsgd.visit`; no torch);
    * ``mlp_block`` (MTP): epochs of one config over the whole group, returns the packed
      state and validation decision values (:func:`groupml.executor.baselines.mlp_block`);
    * ``lgbm_fit`` (MTP): one config's whole single-node LightGBM run, returns the model text;
    * ``mlp_grad`` (DP): this shard's part of one synchronous mini-batch step for every
      config of the round (:func:`groupml.executor.baselines.mlp_grad`).
    """
    one_blas_thread()
    req = parse_request(request, "_gap_task")
    op = req.get("op")
    if op not in TASK_OPS:
        raise InvalidParameterError(f"The 'op' value of _gap_task must be one of {', '.join(TASK_OPS)}; got {shown(op)}",
                                    hint=INTERNAL_HINT)
    if op.startswith("mlp_") and session is not None:
        mlp.torch_module(session.check_cancel)     # a new worker's first import: a cancel is not held
        if op in TRAINING_OPS:
            mlp.optimizer_ready(session.check_cancel)
    handler, rows = TASK_HANDLERS[op]
    if rows:
        X, y = shard_arrays(session, req)
        return handler(session, req, blob, X, y)
    return handler(session, req, blob)


# ------------------------------------------------------------- the task handlers, one per op
def _op_snapshot_part(session, req, blob) -> bytes:
    return build_part(session, req)


def _op_lgbm_ports(session, req, blob) -> bytes:
    n = check_number(req.get("n"), "n", "_gap_task lgbm_ports", ge=1, le=1024, integer=True, hint=INTERNAL_HINT)
    return json.dumps(free_ports(n, host="")).encode("utf-8")


def _op_mlp_eval(session, req, blob) -> bytes:
    run = mlp.run_from_bytes(_mlp_state(req, blob))
    Xv, _ = validation_arrays(session, req)
    with np.errstate(over="ignore", invalid="ignore"):
        return mlp.decision_values(run.net, Xv, run.regression).astype("<f8").tobytes()


def _op_mlp_model(session, req, blob) -> bytes:
    return mlp.MLPModel.from_run(mlp.run_from_bytes(_mlp_state(req, blob))).to_bytes()


def _op_mlp_fork(session, req, blob) -> bytes:
    return mlp.fork_state(_mlp_state(req, blob), req["params"])


def _op_mlp_stats(session, req, blob, X, y) -> bytes:
    return pack_stats(X, y)


def _op_mlp_load(session, req, blob, X, y) -> bytes:
    """A worker joining a model hopper run loads the partition it holds a copy of (and torch,
    for ``mlp_load``): its first unit there trains at once. Returns the partition's row count."""
    return str(int(X.shape[0])).encode("ascii")


def _op_mlp_visit(session, req, blob, X, y) -> bytes:
    return visit(_mlp_state(req, blob), X, y, epoch=int(req["epoch"]), shard_id=int(req["shard"]),
                 interrupt_check=_cancel_check(session))


def _op_glm_visit(session, req, blob, X, y) -> bytes:
    if not blob:
        raise InvalidParameterError("The glm_visit op of _gap_task needs a GLM SGD training state", hint=INTERNAL_HINT)
    return glmsgd.visit(bytes(blob), X, y, epoch=int(req["epoch"]), shard_id=int(req["shard"]),
                        interrupt_check=_cancel_check(session))


def _op_mlp_block(session, req, blob, X, y) -> bytes:
    Xv, _ = validation_arrays(session, req)
    return mlp_block(req, blob, X, y, Xv, interrupt_check=_cancel_check(session))


def _op_mlp_grad(session, req, blob, X, y) -> bytes:
    return mlp_grad(req, blob or b"", X, y)


def _op_lgbm_fit(session, req, blob, X, y) -> bytes:
    return train_lightgbm(req["family"], X, y, req["params"], int(req["rounds"]),
                          interrupt_check=_cancel_check(session)).encode("utf-8")


def _op_lgbm_rank(session, req, blob, X, y) -> bytes:
    text = train_lightgbm_rank_isolated(req["family"], X, y, req["params"], int(req["rounds"]), req["machines"],
                                        int(req["rank"]), timeout_minutes=int(req["timeout_minutes"]),
                                        interrupt_check=session.check_cancel)
    return rank_digest(text.encode("utf-8")) if req.get("digest") else text.encode("utf-8")


def _op_fit(session, req, blob, X, y) -> bytes:
    Mv = load_validation(session, int(req["snapshot"]), int(req["group_no"]), int(req["d"]))
    return local_fit(req, X, y, Mv, interrupt_check=session.check_cancel)


def _op_node_snapshot(session, req, blob) -> bytes:
    """A holder's snapshot of its own table in this node's catalog (kept until the
    coordinator's ``node_drop``); returns its id and each group's counts as JSON."""
    from .snapshot import BUCKETS

    sid = catalog.insert_snapshot(session, source=str(req["source"]), group_by=list(req["group_by"]),
                                  features=list(req["features"]), label=str(req["label"]), seed=int(req["seed"]),
                                  fraction=float(req["fraction"]), block_rows=int(req["block_rows"]), keep=True)
    build_part(session, dict(req, snapshot=sid, buckets=list(range(BUCKETS))))
    groups = catalog.snapshot_groups(session, sid)
    catalog.mark_snapshot_ready(session, sid, sum(int(g["n_train"]) + int(g["n_val"]) for g in groups), len(groups))
    return json.dumps({"snapshot": sid, "groups": {
        str(g["group_no"]): {"n_train": int(g["n_train"]), "n_val": int(g["n_val"]), "n_pos": int(g["n_pos"]),
                             "n_skipped": int(g["n_skipped"]), "train_rows": [int(x) for x in g["train_rows"]]}
        for g in groups}}).encode("utf-8")


def _op_node_validation(session, req, blob) -> bytes:
    """A group's validation rows in this holder's snapshot, packed (big-endian float8)."""
    return catalog.validation_bytes(session, int(req["snapshot"]), int(req["group_no"]), (int(req["d"]) + 1) * 8)


def _op_node_rows(session, req, blob) -> bytes:
    """Training rows ``[row_start, row_start + n_rows)`` of a group in this holder's kept
    snapshot, as float8 X then y (what :func:`groupml.executor.replay.replay_trial` retrains
    a run on the nodes from)."""
    from ..errors import PrerequisiteStateError
    from .snapshot import pieces_for

    sid, gno = int(req["snapshot"]), int(req["group_no"])
    group = next((g for g in catalog.snapshot_groups(session, sid) if int(g["group_no"]) == gno), None)
    if group is None or sum(group["train_rows"]) < int(req["row_start"]) + int(req["n_rows"]):
        raise PrerequisiteStateError(f"Snapshot {sid} of this node has no training rows of group_no {gno} to replay",
                                     hint="The run's node snapshots are kept with options => "
                                          "'{\"keep_snapshot\": true}' until dropped on the node.")
    pieces = pieces_for(group["train_rows"], int(req["row_start"]), int(req["n_rows"]))
    X, y = shard_arrays(session, dict(req, pieces=pieces, mem_mb=0))
    return X.astype("<f8").tobytes() + y.astype("<f8").tobytes()


def _op_node_drop(session, req, blob) -> bytes:
    catalog.delete_snapshot(session, int(req["snapshot"]))
    return b"{}"


#: op -> (handler, whether it reads the shard's training rows): ``handler(session, req, blob)``,
#: or ``handler(session, req, blob, X, y)`` with the shard's rows (:func:`shard_arrays`)
TASK_HANDLERS = {
    "mlp_stats": (_op_mlp_stats, True), "mlp_load": (_op_mlp_load, True), "mlp_visit": (_op_mlp_visit, True),
    "mlp_eval": (_op_mlp_eval, False), "mlp_model": (_op_mlp_model, False), "mlp_fork": (_op_mlp_fork, False),
    "fit": (_op_fit, True), "lgbm_rank": (_op_lgbm_rank, True),
    "lgbm_ports": (_op_lgbm_ports, False), "mlp_block": (_op_mlp_block, True), "lgbm_fit": (_op_lgbm_fit, True),
    "snapshot_part": (_op_snapshot_part, False), "mlp_grad": (_op_mlp_grad, True),
    "node_snapshot": (_op_node_snapshot, False), "node_validation": (_op_node_validation, False),
    "node_drop": (_op_node_drop, False), "glm_stats": (_op_mlp_stats, True), "glm_visit": (_op_glm_visit, True),
    "glm_load": (_op_mlp_load, True), "node_rows": (_op_node_rows, False),
}
#: the MLP ops that train (make a torch optimizer)
TRAINING_OPS = ("mlp_visit", "mlp_block", "mlp_grad", "mlp_fork")
#: the ops of _gap_task, in the order its error message lists them
TASK_OPS = tuple(TASK_HANDLERS)
