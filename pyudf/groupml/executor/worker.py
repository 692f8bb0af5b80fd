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
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import InvalidParameterError

# (snapshot_id, group_no, shard blocks) -> (trainer, bytes); one run's shards per backend
_CACHE: "OrderedDict[tuple, Tuple[Any, int]]" = OrderedDict()
STATS = {"loads": 0, "hits": 0, "rows_loaded": 0}

LOAD_SQL = (
    "SELECT pg_catalog.substr(b.data, (b.n_val + r.skip) * $4 + 1, r.take * $4) AS data "
    "FROM unnest($3::int[], $5::int[], $6::int[]) WITH ORDINALITY AS r(block_no, skip, take, ord) "
    "JOIN groupml.snapshot_blocks b ON b.snapshot_id = $1 AND b.group_no = $2 AND b.block_no = r.block_no "
    "ORDER BY r.ord")
LOAD_TYPES = ["bigint", "integer", "int[]", "integer", "int[]", "int[]"]


def load_shard(session, snapshot_id: int, group_no: int, pieces, d: int) -> np.ndarray:
    """Training rows of one shard: ``pieces`` = [[block_no, skip, take], ...] (training rows
    of each block, after its validation prefix).  Returns an (n, d+1) float64 matrix."""
    rb = (d + 1) * 8
    blocks = [int(p[0]) for p in pieces]
    rows = session.query(LOAD_SQL, [snapshot_id, group_no, blocks, rb, [int(p[1]) for p in pieces],
                                     [int(p[2]) for p in pieces]], LOAD_TYPES)
    if len(rows) != len(blocks):
        raise InvalidParameterError(
            f"Snapshot {snapshot_id} group {group_no} lacks some of blocks {blocks}",
            hint="The snapshot was dropped or changed while the run was going; call train_groups again.")
    raw = b"".join(bytes(r["data"]) for r in rows)
    return np.frombuffer(raw, dtype=">f8").astype(np.float64).reshape(-1, d + 1)


class _Cfg:
    __slots__ = ("params",)

    def __init__(self, params):
        self.params = params


def _shard_trainer(family: str, M: np.ndarray, d: int):
    from ..learners import GLMTrainer

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
    if class_w is not None:
        trainer._balanced_w = np.where(trainer.y > 0.5, float(class_w[1]), float(class_w[0]))
    n = trainer.n
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        f, G = trainer._evaluate(theta, cfgs)
    out = np.empty(1 + f.size + G.size)
    out[0] = n
    out[1:1 + f.size] = f * n
    out[1 + f.size:] = (G * n).reshape(-1)
    return out


def gap_partial(session, request: Mapping[str, Any], theta_bytes: bytes) -> bytes:
    req = request if isinstance(request, dict) else json.loads(request)
    d, k = int(req["d"]), int(req["k"])
    key = (int(req["snapshot"]), int(req["group_no"]), json.dumps(req["pieces"]))
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        trainer = hit[0]
        STATS["hits"] += 1
    else:
        if _CACHE and next(iter(_CACHE))[0] != key[0]:
            _CACHE.clear()                       # another snapshot: a new run on this backend
        M = load_shard(session, key[0], key[1], req["pieces"], d)
        trainer = _shard_trainer(req["family"], M, d)
        STATS["loads"] += 1
        STATS["rows_loaded"] += M.shape[0]
        size = trainer.X.nbytes + trainer.y.nbytes
        del M
        budget = int(float(req.get("mem_mb", 512)) * (1 << 20))
        if size <= budget:
            _CACHE[key] = (trainer, size)
            while sum(v[1] for v in _CACHE.values()) > budget:
                _CACHE.popitem(last=False)
    theta = np.frombuffer(theta_bytes, dtype="<f8").reshape(d + 1, k)
    out = partial_sums(trainer, req["params"], np.ascontiguousarray(theta), req.get("class_w"))
    return out.astype("<f8").tobytes()


def cache_info() -> Dict[str, Any]:
    return {"entries": len(_CACHE), "bytes": sum(v[1] for v in _CACHE.values()), **STATS}
