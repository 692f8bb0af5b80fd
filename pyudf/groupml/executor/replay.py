"""Replay one configuration of a model hopper run from its visit log (runs in the calling backend).

A split MLP group's configurations (and a GLM's under ``strategy => 'mop'``) hop from partition to partition; every visit is one
pass of mini-batch SGD over one partition's rows, a pure function of (state, rows, epoch,
partition) (:func:`groupml.learners.visit`, :func:`groupml.learners.glmsgd.visit`). The run's schedule keeps, per group, the
partitions' row ranges (``kind = 'stats'``, the standardisation moments merged in partition
order) and every executed visit (``kind = 'visit'``, in the order the configuration made
them, failed units left out). Replaying them one after another in one process from the
same initial state gives the state the run ended with, byte for byte on the same host, and
from it the model bytes the run stored. A trial forked by population based training
(groupml.trials.parent_trial_id) replays its ancestors' visits up to each fork, the fork
itself (:func:`groupml.learners.mlp.fork_state`), then its own visits.

A run on the nodes of a distributed source (Citus shards, postgres_fdw partitions) kept
its partitions' rows in the nodes' snapshots (``keep_snapshot``): the replay reads each
partition's training rows from the snapshot of the node that held it, as the calling role
(the rows travel to the coordinator for the replay only), and retrains here.
"""

from __future__ import annotations

import json
from concurrent.futures import wait
from typing import Any, Dict, List, Mapping, Tuple, Optional

import numpy as np

from .. import catalog
from ..errors import InvalidParameterError, PrerequisiteStateError, UndefinedObjectError
from ..learners import access_pattern, get_learner_family, glmsgd, merge_stats, mlp, visit
from .core import pack_stats, unpack_stats
from .snapshot import pieces_for, snapshot_intact
from .worker import shard_arrays

OWNER = "replay"


def replay_trial(session, run_id: int, trial_id: int, group_key: Optional[str]) -> bytes:
    """The model bytes of trial ``trial_id`` of ``run_id`` (group ``group_key``), retrained
    sequentially from the run's visit log."""
    src = catalog.replay_source(session, run_id)
    if src is None:
        raise UndefinedObjectError(f"Run {run_id} is not a run of train_groups on worker backends",
                                   hint="Pass a run_id of groupml.grouped_runs (a run with workers or a strategy).")
    family = get_learner_family(src["family"])
    glm = access_pattern(family) == "algebraic"
    if family.name != "mlp" and not glm:
        raise PrerequisiteStateError(f"Run {run_id} trained model '{src['family']}'; replay retrains MLP and GLM "
                                     f"configurations that hopped over partitions",
                                     hint="Replay a run of model 'mlp', 'logistic', 'linear' or 'svm' with strategy "
                                          "'mop' (or a split MLP group).")
    gkey = _group_key(session, run_id, trial_id, group_key)
    params = catalog.trial_params(session, run_id, gkey, trial_id)
    if params is None:
        raise UndefinedObjectError(f"Run {run_id} has no trial {trial_id} in group {gkey}",
                                   hint="See SELECT trial_id, group_key FROM groupml.trials WHERE run_id = ...")
    sid = src["snapshot_id"]
    if sid is None or src["snapshot_status"] != "ready" or not snapshot_intact(session, sid):
        raise PrerequisiteStateError(f"The training snapshot of run {run_id} is gone; replay reads the partitions' "
                                     f"rows from it", hint="Train with options => '{\"keep_snapshot\": true}' to "
                                                           "replay a run later.")
    log = catalog.group_schedule(session, run_id, gkey)
    shards = _partitions(log)
    lineage = _lineage(session, run_id, gkey, trial_id, params)
    visits = _visits(log, trial_id)
    if not shards or not visits:
        raise PrerequisiteStateError(f"Trial {trial_id} of run {run_id} (group {gkey}) has no visit log: its group "
                                     f"was not split into partitions",
                                     hint="Replay a trial of a run with strategy => 'mop' (or a split MLP group).")
    group = next(g for g in catalog.snapshot_groups(session, sid) if g["gkey"] == gkey)
    d = len(src["features"])
    plan = catalog.recorded_plan(session, run_id)
    on_nodes = json.loads(plan["plan"] or "{}").get("nodes") if plan else None
    if on_nodes:
        rows = _node_rows(session, run_id, on_nodes, log, group["group_no"], d)
    else:
        rows = [_rows(session, sid, group, start, n, d) for start, n in shards]
    stats = merge_stats([unpack_stats(pack_stats(X, y), d) for X, y in rows], d)
    if glm:
        return _replay_glm(session, family, params, d, stats, rows, visits)
    root = lineage[0]
    state = mlp.run_to_bytes(mlp.new_run(family.name, family.validate_params(root[1]), d, stats))
    for i, (tid, tparams, start) in enumerate(lineage):
        end = lineage[i + 1][2] if i + 1 < len(lineage) else None
        if i:       # a fork: the parent's state at the fork epoch, with this trial's params
            state = mlp.fork_state(state, tparams)
        for e in _visits(log, tid):
            if int(e["pass"]) < start or (end is not None and int(e["pass"]) >= end):
                continue
            sh = int(e["shard"])
            state = visit(state, *rows[sh], epoch=int(e["pass"]), shard_id=sh, interrupt_check=session.check_cancel)
    return mlp.MLPModel.from_run(mlp.run_from_bytes(state)).to_bytes()


def _replay_glm(session, family, params, d: int, stats, rows, visits) -> bytes:
    """The GLM SGD half of :func:`replay_trial`: BLAS on one thread, as in the worker backends
    (a product's summation order may depend on the thread count)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        state = glmsgd.init_state(family, params, d, stats)
        for e in visits:
            s = int(e["shard"])
            state = glmsgd.visit(state, *rows[s], epoch=int(e["pass"]), shard_id=s,
                                 interrupt_check=session.check_cancel)
    return glmsgd.state_model(state).to_bytes()


def _visits(log, trial_id: int) -> List[dict]:
    """The visits of one configuration, in the order it made them."""
    return sorted((e for e in log if e.get("kind") == "visit" and list(e["trials"]) == [trial_id]),
                  key=lambda e: e["started"])


def _lineage(session, run_id: int, gkey: str, trial_id: int, params) -> List[Tuple[int, dict, int]]:
    """``[(trial_id, params, first epoch)]`` from the first ancestor to ``trial_id``: a trial
    forked by population based training continues its parent's state from ``forked_at_epoch``
    (groupml.trials), so its model is its ancestors' visits up to each fork, then its own."""
    chain = [(trial_id, params, 0)]
    while True:
        tid = chain[0][0]
        fork = catalog.trial_fork(session, run_id, gkey, tid)
        if fork is None or fork["parent_trial_id"] is None:
            return chain
        parent, at = int(fork["parent_trial_id"]), int(fork["forked_at_epoch"])
        parent_params = catalog.trial_params(session, run_id, gkey, parent)
        if parent >= tid or parent_params is None:
            raise PrerequisiteStateError(f"Trial {tid} of run {run_id} names parent trial {parent}, which the run "
                                         f"does not have before it", hint="The run's trials were changed; replay "
                                                                          "needs the lineage the run wrote.")
        chain[0] = (tid, chain[0][1], at)
        chain.insert(0, (parent, parent_params, 0))


def _group_key(session, run_id: int, trial_id: int, group_key: Optional[str]) -> str:
    keys = catalog.trial_group_keys(session, run_id, trial_id)
    if group_key is None:
        if len(keys) == 1:
            return keys[0]
        if not keys:
            raise UndefinedObjectError(f"Run {run_id} has no trial {trial_id}",
                                       hint="See SELECT trial_id, group_key FROM groupml.trials WHERE run_id = ...")
        raise InvalidParameterError(f"The 'group_key' value of replay is required: trial {trial_id} of run {run_id} "
                                    f"is in {len(keys)} groups", hint=f"Pass group_key => '{keys[0]}' (or another).")
    return group_key


def _partitions(log) -> List[Tuple[int, int]]:
    """(row_start, n_rows) of every partition of a group, in partition order, from the
    schedule's 'stats' entries (one per partition)."""
    parts: Dict[int, Tuple[int, int]] = {}
    for e in log:
        if e.get("kind") == "stats":
            parts[int(e["shard"])] = (int(e["row_start"]), int(e["n_rows"]))
    return [parts[s] for s in sorted(parts)] if sorted(parts) == list(range(len(parts))) else []


def _rows(session, sid: int, group, start: int, n: int, d: int) -> Tuple[np.ndarray, np.ndarray]:
    req = {"snapshot": sid, "group_no": group["group_no"], "pieces": pieces_for(group["train_rows"], start, n),
           "d": d, "mem_mb": 0}
    return shard_arrays(session, req)


def _node_rows(session, run_id: int, nodes: Mapping[str, Any], log, group_no: int,
               d: int) -> List[Tuple[np.ndarray, np.ndarray]]:
    """(X, y) of every partition of a group of a run on the nodes, in partition order, each
    read from the kept snapshot of the node whose worker computed the partition's moments
    (``kind = 'stats'``), over a connection as the calling role."""
    from .nodes import replay_endpoints
    from .pool import WorkerPool, server_identity

    # one per partition (a resumed group's attempts each logged them: the last one's)
    stats = sorted({int(e["shard"]): (int(e["shard"]), int(e["worker"]), int(e["row_start"]), int(e["n_rows"]))
                    for e in sorted(log, key=lambda e: e["started"]) if e.get("kind") == "stats"}.values())
    snaps = {int(s["worker"]): s for s in nodes.get("snapshots", []) if "worker" in s}
    missing = sorted({w for _, w, _, _ in stats if w not in snaps})
    if missing:
        raise PrerequisiteStateError(f"The node snapshots of run {run_id} are gone; replay reads the partitions' rows "
                                     f"from them", hint="Train with options => '{\"keep_snapshot\": true}' to "
                                                        "replay a run later.")
    workers = sorted({w for _, w, _, _ in stats})
    pool = WorkerPool(replay_endpoints(session, [snaps[w] for w in workers]), run_id=run_id,
                      identity=server_identity(session))
    try:
        pool.start()
        # a partition is all of its holder's training rows of the group (row_start is its place
        # in the group's row order, not in the holder's)
        futs = [pool.submit(workers.index(w), json.dumps({"op": "node_rows", "snapshot": 1, "group_no": group_no,
                                                          "row_start": 0, "n_rows": n, "d": d}),
                            b"", {"kind": "replay", "group_key": None}, fn="task") for _, w, _, n in stats]
        while not all(f.done() for f in futs):
            wait(futs, timeout=0.25)
            session.check_cancel()
        out = []
        for f, (_, _, _, n) in zip(futs, stats):
            M = np.frombuffer(f.result(), dtype="<f8")
            out.append((M[:n * d].reshape(n, d).copy(), M[n * d:].copy()))
        return out
    finally:
        pool.close()
