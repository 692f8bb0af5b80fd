"""The coordinator of a planner-driven train_groups run (runs in the calling backend).

Main thread: all catalog I/O through the :class:`groupml.db.Session` (snapshot, plan,
per-group models/trials/schedule, per-epoch metrics and counters, commits, NOTICEs,
cancel checks). Group-driver threads: one group's search and solver each, never
touching plpy; their data passes become worker tasks (:class:`ShardEvaluator` for GLMs,
:func:`groupml.executor.patterns.fit_other_group` for MLP and LightGBM). Worker
threads: one connection each (:class:`WorkerPool`).
"""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any, Dict, List, Optional

import numpy as np

from ..errors import GroupmlError, UndefinedObjectError
from ..validation import check_bool, check_choice, check_number
from .checkpoint import decode, encode, fingerprint
from .glm import ShardEvaluator, _Aborted, fit_sharded_group
from .invariants import schedule_violations
from .plan import group_tasks, make_plan, pass_task_rows, placement_for, resumed_plan, workload_of
from .pool import (WorkerDataError, WorkerEndpointError, WorkerLockTimeoutError, WorkerLostError, WorkerPool,
                   WorkerStateError,
                   resolve_endpoints, server_identity)
from .snapshot import (DEFAULT_BLOCK_ROWS, build_snapshot, can_build_in_parallel, check_snapshot, delete_snapshot,
                       drop_orphan_snapshots, drop_snapshot, load_validation, snapshot_groups, snapshot_intact)

EXEC_KEYS = ("keep_snapshot", "snapshot", "worker_memory_mb", "block_rows", "lock_timeout_ms", "drivers",
             "network_timeout_s", "flexible_hops", "placement", "checkpoint_every_s", "whole_group_tasks",
             "whole_group_max_work")
#: Planned work (training rows x (features + 1) x configurations x iterations of the search
#: budget) up to which a GLM group kept whole is one task. 1e10 is about 10 s of passes here
#: (the demo's largest group, 2.4e8 x 21 / 100 iterations actually run, trains in 1-2 s); a
#: larger group keeps a task per pass: its passes are long enough that the round trips cost
#: little, and its epoch checkpoints bound what a cancel or crash loses.
WHOLE_GROUP_MAX_WORK = 1e10
PLACEMENTS = ("auto", "wrap_around")
OWNER = "train_groups options"


class ScheduleInvariantError(GroupmlError):
    sqlstate = "XX000"


def split_options(options: Dict[str, Any]):
    """(fit options, executor options), the latter validated."""
    fit = {k: v for k, v in options.items() if k not in EXEC_KEYS}
    ex = {k: v for k, v in options.items() if k in EXEC_KEYS}
    out = {
        "keep_snapshot": check_bool(ex.get("keep_snapshot", False), "keep_snapshot", OWNER,
                                    hint="true keeps the snapshot after the run (reuse it with options.snapshot)."),
        "snapshot": None if ex.get("snapshot") is None else check_number(ex["snapshot"], "snapshot", OWNER, ge=1,
                                                                         integer=True,
                                                                         hint="Pass a snapshot_id of groupml.snapshots."),
        "worker_memory_mb": check_number(ex.get("worker_memory_mb", 512), "worker_memory_mb", OWNER, ge=0,
                                         le=1 << 24, hint="Megabytes of shard rows each worker keeps in memory for the run "
                                              "(beyond it, shards are re-read every pass); default 512."),
        "block_rows": check_number(ex.get("block_rows", DEFAULT_BLOCK_ROWS), "block_rows", OWNER, ge=16,
                                   le=1 << 20, integer=True, hint="Rows per packed snapshot block; default 8192."),
        "lock_timeout_ms": check_number(ex.get("lock_timeout_ms", 10000), "lock_timeout_ms", OWNER, ge=1, le=1 << 30,
                                        integer=True, hint="Lock timeout of worker connections in ms."),
        "drivers": None if ex.get("drivers") is None else check_number(ex["drivers"], "drivers", OWNER, ge=1, le=256,
                                                                       integer=True,
                                                                       hint="Groups in flight at once, one "
                                                                            "coordinator thread each: 1 to 256."),
        "flexible_hops": check_bool(ex.get("flexible_hops", True), "flexible_hops", OWNER,
                                    hint="true: an MLP config whose next shard's worker is busy takes another "
                                         "unvisited shard (logged); false: the seeded hop order only."),
        "placement": check_choice(ex.get("placement", "auto"), "placement", OWNER, PLACEMENTS,
                                  hint="auto: grouped keeps MLP/LightGBM groups whole when the cost model says a "
                                       "split (hop tasks, a distributed job) costs more than it balances; "
                                       "wrap_around: always Kingpin's wrap-around placement."),
        "checkpoint_every_s": check_number(ex.get("checkpoint_every_s", 0.5), "checkpoint_every_s", OWNER, ge=0,
                                           le=3600, hint="Seconds between commits of finished epoch blocks and "
                                                         "their checkpoints; 0 commits every block (a cancel or "
                                                         "crash loses less, at a commit per block); default 0.5."),
        "whole_group_tasks": check_bool(ex.get("whole_group_tasks", True), "whole_group_tasks", OWNER,
                                        hint="true: a GLM group that is not split runs its whole search as one "
                                             "task on its worker (no per-pass round trips; the group commits when "
                                             "it is done, so a cancel restarts it); false: one task per data pass, "
                                             "with epoch checkpoints."),
        "whole_group_max_work": check_number(ex.get("whole_group_max_work", WHOLE_GROUP_MAX_WORK),
                                             "whole_group_max_work", OWNER, ge=0,
                                             hint="Largest planned work (training rows x (features + 1) x configs x "
                                                  "iterations) of a GLM group run as one task; default 1e10."),
        "network_timeout_s": check_number(ex.get("network_timeout_s", 120), "network_timeout_s", OWNER, gt=0,
                                          le=3600, hint="Seconds a rank of distributed LightGBM waits for its "
                                                        "peers (LightGBM's time_out, rounded up to minutes)."),
    }
    return fit, out


def run_grouped(session, *, run_id: int, source: str, group_by, features, label, cols, model: str,
                search: dict, fit_options: dict, exec_options: dict, workers: int, strategy: str,
                family, spec, opts, store, transform=None) -> Dict[str, Any]:
    """Snapshot, plan, train every pending group on the worker pool, finish the run.
    ``transform``: the run's raw-column transform (:mod:`groupml.transforms`), which encodes
    the snapshot's rows, or None."""
    d = transform.width if transform is not None else len(features)
    clock = RunClock(time.time())
    seed, fraction = opts["seed"], opts["validation_fraction"]
    # schedule times are seconds since the run's first attempt started, so the entries of a
    # resumed group's attempts are on one clock
    since = float(session.query("SELECT extract(epoch FROM clock_timestamp() - started_at)::float8 AS s "
                                "FROM groupml.runs WHERE run_id = $1", [run_id], ["bigint"])[0]["s"])

    identity = server_identity(session)

    def new_pool():
        return WorkerPool(resolve_endpoints(session, workers), run_id=run_id,
                          lock_timeout_ms=exec_options["lock_timeout_ms"], clock_start=since, identity=identity)

    # -- snapshot (committed before any worker starts: workers see only committed rows)
    for orphan in drop_orphan_snapshots(session):
        session.notice(f"groupml: dropped snapshot {orphan}: no run refers to it (its run was deleted, or its "
                       f"build stopped before the run recorded it)")
    sid, pool = _snapshot_for_run(session, run_id, source, group_by, features, label, cols, seed, fraction,
                                  exec_options, new_pool if workers > 1 else None, transform)
    _record_snapshot(session, run_id, sid)
    clock.charge(session, run_id)               # the snapshot
    session.commit()

    groups = snapshot_groups(session, sid)
    plan = _plan_run(session, run_id, groups, model=model, search=search, source=source, features=features,
                     family=family, spec=spec, exec_options=exec_options, workers=workers, strategy=strategy, d=d)
    done, pending, fps, resume_states, group_logs = _pending_groups(
        session, run_id, groups, plan.tasks, model=model, search=search, fit_options=fit_options,
        pattern=plan.pattern, d=d)
    clock.training()                    # what estimated_seconds (the makespan) estimates starts here
    if pending and pool is None:
        pool = new_pool()
    elif not pending and pool is not None:
        pool.close()
        pool = None
    events: "queue.Queue" = queue.Queue()
    abort = threading.Event()
    driver = _GroupDriver(pool, plan, sid=sid, d=d, family=family, spec=spec, opts=opts, model=model,
                          search=search, fit_options=fit_options, exec_options=exec_options, events=events,
                          abort=abort)
    all_log = _train_pending(session, run_id, driver, pending, fps=fps, resume_states=resume_states,
                             group_logs=group_logs, n_groups=len(groups), n_done=len(done), sid=sid,
                             workers=workers, exec_options=exec_options, store=store, clock=clock)
    bad = schedule_violations(all_log, {g["gkey"]: int(g["n_train"]) for g in groups},
                              {g["gkey"]: plan.tasks[g["group_no"]]["mode"] for g in groups
                               if g["group_no"] in plan.tasks})
    if bad:
        raise ScheduleInvariantError("grouped learning broke an invariant: " + "; ".join(bad[:3]))
    keep = exec_options["keep_snapshot"] or (exec_options["snapshot"] is not None)
    if not keep:
        drop_snapshot(session, sid)
        session.query("UPDATE groupml.grouped_runs SET snapshot_id = NULL WHERE run_id = $1", [run_id], ["bigint"])
    clock.charge(session, run_id, done=True)
    session.query("UPDATE groupml.grouped_runs SET last_event = 'done', updated_at = clock_timestamp() "
                  "WHERE run_id = $1", [run_id], ["bigint"])
    session.query("DELETE FROM groupml.run_checkpoints WHERE run_id = $1", [run_id], ["bigint"])
    session.commit()
    return {"run_id": run_id, "strategy": plan.chosen, "snapshot_id": sid if keep else None}


class RunClock:
    """Charges a call's time to its run as the call commits: ``runs.seconds`` (wall time) and,
    once :meth:`training` was called, ``runs.train_seconds`` (what the planner's estimate
    covers). A cancelled, crashed or failed call keeps what it charged up to its last commit,
    so both columns cover every attempt of a resumed run."""

    def __init__(self, started: float):
        self.last = started
        self.training_from: Optional[float] = None

    def training(self) -> None:
        self.training_from = time.time()

    def take(self):
        """(wall seconds, training seconds) since the last charge, now charged: for a caller
        that adds them to ``runs`` in an UPDATE of its own."""
        now = time.time()
        train = 0.0 if self.training_from is None else now - max(self.last, self.training_from)
        wall, self.last = now - self.last, now
        return wall, train

    def charge(self, session, run_id: int, *, done: bool = False) -> None:
        """Add the time since the last charge (in the caller's transaction; commit follows);
        ``done`` also marks the run done."""
        wall, train = self.take()
        session.query("UPDATE groupml.runs SET seconds = coalesce(seconds, 0) + $2, "
                      "train_seconds = coalesce(train_seconds, 0) + $3"
                      + (", status = 'done', finished_at = clock_timestamp()" if done else "")
                      + " WHERE run_id = $1", [run_id, wall, train], ["bigint", "float8", "float8"])


@dataclass
class _RunPlan:
    chosen: str                          # the strategy the run trains with
    pattern: str                         # the family's access pattern
    tasks: Dict[int, Dict[str, Any]]     # group_no -> {"mode", "shards"} (group_tasks)
    whole_max_rows: int                  # largest GLM group run as one task


def _plan_run(session, run_id: int, groups, *, model: str, search: dict, source: str, features, family, spec,
              exec_options: dict, workers: int, strategy: str, d: Optional[int] = None) -> _RunPlan:
    """The run's strategy and placement: planned now, or a resumed run's first plan; recorded
    in groupml.runs / grouped_runs on the first attempt."""
    d = len(features) if d is None else d
    sizes = {g["group_no"]: int(g["n_train"]) for g in groups}
    from .patterns import pattern_of
    pattern = pattern_of(family)
    wl = workload_of(spec, family)
    from .costs import load_calibration          # unit costs measured from earlier runs' tasks
    cal = load_calibration(session, model=model, pattern=pattern, source=source, features=features, search=search,
                           d=d, n_configs=wl["n_configs"])
    whole_max_rows = pass_task_rows(exec_options, d, wl["n_configs"], wl["epochs"])
    plan = make_plan(sizes, wl["n_configs"], wl["epochs"], workers, strategy, pattern=pattern, blocks=wl["blocks"],
                     calibration=cal, pass_task_rows=whole_max_rows, placement=exec_options["placement"])
    prev = session.query("SELECT strategy, plan::text AS plan FROM groupml.grouped_runs WHERE run_id = $1",
                         [run_id], ["bigint"])
    again = resumed_plan(prev[0]["strategy"], json.loads(prev[0]["plan"]) if prev and prev[0]["plan"] else None,
                         sizes, workers, strategy) if prev else None
    if again is not None:          # a resumed run keeps its first attempt's plan (and its record)
        chosen, placement = again
        session.notice(f"groupml: run {run_id}: resumes with the plan of its first attempt: {chosen} on {workers} "
                       f"worker(s), {pattern} pattern")
    else:
        chosen = plan.strategy
        placement = placement_for(chosen, sizes, workers, pattern,
                                  plan=plan if exec_options["placement"] == "auto" else None)
    from ..planner import check_placement
    check_placement(placement, sizes)
    tasks = group_tasks(chosen, placement, groups, workers, pattern)
    if again is None:
        session.query("UPDATE groupml.runs SET n_groups = $2, estimated_seconds = $3 WHERE run_id = $1",
                      [run_id, len(groups), plan.makespan], ["bigint", "integer", "float8"])
        session.query("UPDATE groupml.grouped_runs SET strategy = $2, plan = $3::jsonb, last_event = $4, "
                      "updated_at = clock_timestamp() WHERE run_id = $1",
                      [run_id, chosen, json.dumps({"explanation": plan.explanation, "pattern": pattern,
                                                   "makespan": plan.makespan, "per_worker": plan.per_worker,
                                                   "placement": placement.to_dict(), "workload": wl,
                                                   "unit_costs": cal.to_dict()}), "planned"],
                      ["bigint", "text", "text", "text"])
        session.notice(f"groupml: run {run_id}: {chosen} on {workers} worker(s), {pattern} pattern: "
                       f"{plan.explanation}")
    return _RunPlan(chosen, pattern, tasks, whole_max_rows)


def _pending_groups(session, run_id: int, groups, tasks, *, model: str, search: dict, fit_options: dict,
                    pattern: str, d: int):
    """(done keys, pending groups largest first, fingerprints, resume points, committed logs);
    commits groups_done."""
    done = {r["k"] for r in session.query("SELECT group_key::text AS k FROM groupml.models WHERE run_id = $1",
                                          [run_id], ["bigint"])}
    pending = [g for g in groups if g["gkey"] not in done]
    fps = {g["gkey"]: fingerprint(model=model, search=search, fit_options=fit_options, pattern=pattern,
                                  mode=tasks.get(g["group_no"], {}).get("mode", "shards"),
                                  shards=tasks.get(g["group_no"], {}).get("shards", [])) for g in pending}
    # leftovers of an interrupted attempt: a group with a valid checkpoint continues after its
    # last committed epoch block, the others restart
    resume_states, group_logs = _resume_points(session, run_id, pending, fps, d)
    session.query("UPDATE groupml.runs SET groups_done = $2 WHERE run_id = $1", [run_id, len(done)],
                  ["bigint", "integer"])
    session.commit()
    pending.sort(key=lambda g: (-g["n_train"], g["group_no"]))
    return done, pending, fps, resume_states, group_logs


class _GroupDriver:
    """Trains one group in a group-driver thread (never touches plpy): its search and solver,
    with data passes as worker tasks; epoch reports and checkpoints go to ``events``."""

    def __init__(self, pool, plan: _RunPlan, *, sid: int, d: int, family, spec, opts, model: str, search: dict,
                 fit_options: dict, exec_options: dict, events: "queue.Queue", abort: threading.Event):
        self.pool, self.plan, self.sid, self.d = pool, plan, sid, d
        self.family, self.spec, self.opts = family, spec, opts
        self.model, self.search, self.fit_options, self.exec_options = model, search, fit_options, exec_options
        self.events, self.abort = events, abort

    def check_abort(self) -> None:
        if self.abort.is_set():
            raise _Aborted()

    def __call__(self, g, Xv, resume):
        from .patterns import fit_other_group, fit_unsplit_glm
        gno, gkey = g["group_no"], g["gkey"]
        t = self.plan.tasks.get(gno, {"mode": "shards", "shards": []})
        d, pool, events, ex = self.d, self.pool, self.events, self.exec_options

        def on_block(e, state):
            # every task of the group so far has reported: its log entries belong to blocks <= e.block
            events.put((gkey, e.block, e.passes, [(tid, ep, sc, dec) for tid, ep, sc, dec in e.reports],
                        (state, pool.take_log(gkey))))

        def on_epoch_raw(block, passes, reports):
            events.put((gkey, block, passes, reports, None))

        if self.plan.pattern != "algebraic":
            return fit_other_group(pool, family=self.family, spec=self.spec, opts=self.opts, model=self.model,
                                   search=self.search, fit_options=self.fit_options, g=g, shards=t["shards"],
                                   snapshot_id=self.sid, d=d, X_val=Xv[:, :d], y_val=Xv[:, d],
                                   mem_mb=ex["worker_memory_mb"], abort=self.abort, on_epoch_raw=on_epoch_raw,
                                   interrupt_check=self.check_abort, lgbm_timeout_s=ex["network_timeout_s"],
                                   flexible=ex["flexible_hops"], checkpoint=on_block, resume=resume,
                                   mode=t["mode"])
        if (t["mode"] == "shards" and len(t["shards"]) == 1 and resume is None
                and int(g["n_train"]) <= self.plan.whole_max_rows):
            return fit_unsplit_glm(pool, family=self.family, model=self.model, search=self.search,
                                   fit_options=self.fit_options, g=g, shard=t["shards"][0], snapshot_id=self.sid,
                                   d=d, y_val=Xv[:, d], mem_mb=ex["worker_memory_mb"], abort=self.abort,
                                   on_epoch_raw=on_epoch_raw)
        ev = ShardEvaluator(pool, snapshot_id=self.sid, group_no=gno, group_key=gkey, family=self.family.name, d=d,
                            shards=t["shards"], mode=t["mode"], mem_mb=ex["worker_memory_mb"], abort=self.abort)
        return fit_sharded_group(self.model, self.search, self.fit_options, n_train=int(g["n_train"]),
                                 n_val=int(g["n_val"]), n_pos=int(g["n_pos"]), n_skipped=int(g["n_skipped"]), d=d,
                                 X_val=Xv[:, :d], y_val=Xv[:, d], evaluator=ev, checkpoint=on_block,
                                 resume=resume, interrupt_check=self.check_abort)


def _train_pending(session, run_id: int, driver: _GroupDriver, pending, *, fps, resume_states, group_logs,
                   n_groups: int, n_done: int, sid: int, workers: int, exec_options: dict,
                   store, clock: RunClock) -> List[Dict[str, Any]]:
    """Train the pending groups, a few at a time (main thread: catalog I/O, commits, cancel
    checks); every finished group is stored and committed. Returns the whole schedule log."""
    pool, tasks, events = driver.pool, driver.plan.tasks, driver.events
    if driver.plan.chosen == "dp":
        n_drivers = 1                       # DP: one group at a time across all workers
    else:
        n_drivers = exec_options["drivers"] or max(2, 3 * workers)
    n_drivers = max(1, min(n_drivers, len(pending) or 1))
    all_log: List[Dict[str, Any]] = []
    ex = ThreadPoolExecutor(max_workers=n_drivers, thread_name_prefix="groupml-group") if pending else None
    in_flight: Dict[Any, Dict[str, Any]] = {}
    try:
        if pool is not None and not pool.started:
            pool.start()
        last_commit = time.perf_counter()
        while pending or in_flight:
            while pending and len(in_flight) < n_drivers:
                g = pending.pop(0)
                Xv = load_validation(session, sid, g["group_no"], driver.d)
                in_flight[ex.submit(driver, g, Xv, resume_states.pop(g["gkey"], None))] = g
            finished, _ = wait(list(in_flight), timeout=0.25, return_when=FIRST_COMPLETED)
            # also the cancel check. A run deleted meanwhile would fail the next insert on a foreign
            # key: the row lock (until this transaction's commit) waits out a delete in progress, and
            # keeps one from starting before this transaction's inserts are in
            if not session.query("SELECT run_id FROM groupml.runs WHERE run_id = $1 FOR KEY SHARE",
                                 [run_id], ["bigint"]):
                raise _RunDeleted()
            wrote = _flush_events(session, run_id, events, group_logs, fps,
                                  {in_flight[f]["gkey"] for f in finished if f.exception() is None})
            for fut in finished:
                g = in_flight.pop(fut)
                result = fut.result()
                gkey = g["gkey"]
                log = pool.take_log(gkey)                  # since the group's last checkpoint
                full = group_logs.pop(gkey, []) + log      # + committed blocks (earlier attempts too)
                all_log.extend(full)
                bad = schedule_violations(full, {gkey: int(g["n_train"])}, {gkey: tasks.get(g["group_no"], {}).get(
                    "mode", "shards")})
                if bad:
                    raise ScheduleInvariantError("grouped learning broke an invariant: " + "; ".join(bad[:3]))
                n_done += 1
                _store_finished_group(session, run_id, gkey, result, log, store, f"{n_done}/{n_groups}")
                wrote = True
            if finished or (wrote and time.perf_counter() - last_commit >= exec_options["checkpoint_every_s"]):
                clock.charge(session, run_id)
                session.commit()
                last_commit = time.perf_counter()
        _flush_events(session, run_id, events, group_logs, fps)
    except BaseException as exc:
        driver.abort.set()
        if pool is not None:
            pool.close()
        if ex is not None:
            ex.shutdown(wait=True, cancel_futures=True)
        if isinstance(exc, _RunDeleted):
            if not exec_options["keep_snapshot"] and exec_options["snapshot"] is None:
                drop_snapshot(session, sid)
            session.commit()
            raise UndefinedObjectError(
                f"Run {run_id} was deleted while it was being trained; this call stops",
                hint="Nothing of the run is left (its snapshot is dropped unless kept); start a new run.") from None
        if isinstance(exc, (WorkerLostError, ScheduleInvariantError)):
            clock.charge(session, run_id)
            mark_run_failed(session, run_id)
            session.commit()
            raise _stopped(exc, f"run {run_id} stopped: {exc.message}; {n_done} of {n_groups} groups are committed",
                           f"Call train_groups again with run_id => {run_id} to resume from the committed groups.") \
                from None
        raise
    if pool is not None:
        pool.close()
        ex.shutdown(wait=True)
    return all_log


def _flush_events(session, run_id: int, events: "queue.Queue", group_logs, fps, finishing=()) -> int:
    """Write the epoch blocks queued in ``events`` by the group drivers: run_epochs rows, and
    for checkpointed groups the blocks' run_schedule rows (also kept in ``group_logs``) and the
    group's latest checkpoint (``fps``: fingerprints) -- all in the transaction the caller
    commits, so a committed block always has its checkpoint (``finishing``: groups whose model
    is stored in this transaction; their checkpoint would be deleted). Returns the blocks
    written."""
    n = 0
    last = None
    latest = {}
    while True:
        try:
            gkey, block, passes, reports, ck = events.get_nowait()
        except queue.Empty:
            break
        if ck is not None:
            state, part = ck
            latest[gkey] = (block, passes, state)
            if part:
                group_logs.setdefault(gkey, []).extend(part)
                _store_schedule(session, run_id, gkey, part)
        n += 1
        last = f"group {gkey} epoch block {block}"
        if reports:
            session.query(
                "INSERT INTO groupml.run_epochs (run_id, group_key, block, trial_id, epoch, score, decision) "
                "SELECT $1, $2::jsonb, $3, t, e, s, dd FROM unnest($4::int[], $5::int[], $6::float8[], "
                "$7::text[]) AS u(t, e, s, dd) ON CONFLICT DO NOTHING",
                [run_id, gkey, block, [r[0] for r in reports], [r[1] for r in reports],
                 [None if r[2] is None or not np.isfinite(r[2]) else float(r[2]) for r in reports],
                 [str(r[3]) for r in reports]],
                ["bigint", "text", "integer", "int[]", "int[]", "float8[]", "text[]"])
    for gkey, (block, passes, state) in latest.items():
        if gkey in finishing:
            continue
        session.query(
            "INSERT INTO groupml.run_checkpoints (run_id, group_key, block, passes, fingerprint, state) "
            "VALUES ($1, $2::jsonb, $3, $4, $5, $6) ON CONFLICT (run_id, group_key) DO UPDATE SET "
            "block = EXCLUDED.block, passes = EXCLUDED.passes, fingerprint = EXCLUDED.fingerprint, "
            "state = EXCLUDED.state, at = clock_timestamp()",
            [run_id, gkey, block, passes, fps[gkey], encode(state)],
            ["bigint", "text", "integer", "bigint", "text", "bytea"])
    if n:
        session.query("UPDATE groupml.grouped_runs SET epochs_done = epochs_done + $2, last_event = $3, "
                      "updated_at = clock_timestamp() WHERE run_id = $1", [run_id, n, last],
                      ["bigint", "bigint", "text"])
    return n


def _store_finished_group(session, run_id: int, gkey: str, result, log, store, position: str) -> None:
    """A finished group's model and trials (``store``), the rest of its executed schedule, its
    checkpoint gone, the run's counters, and a NOTICE (``position``: "k/n")."""
    store(session, run_id, gkey, result)
    _store_schedule(session, run_id, gkey, log)
    session.query("DELETE FROM groupml.run_checkpoints WHERE run_id = $1 AND group_key = $2::jsonb",
                  [run_id, gkey], ["bigint", "text"])
    session.query("UPDATE groupml.runs SET groups_done = groups_done + 1 WHERE run_id = $1", [run_id], ["bigint"])
    session.query("UPDATE groupml.grouped_runs SET passes_done = passes_done + $2, last_event = $3, "
                  "updated_at = clock_timestamp() WHERE run_id = $1",
                  [run_id, int(result.passes), f"group {gkey} done"], ["bigint", "bigint", "text"])
    session.notice(f"groupml: group {position} {gkey}: {result.status}"
                   + (f", {result.metric} {result.score:.4f}" if result.score is not None else "")
                   + f" ({result.passes} passes)")


def mark_run_failed(session, run_id: int) -> None:
    """A running run that stopped for good: status 'failed' and its end time (without one,
    groupml.progress counted its elapsed time on for ever). The caller commits."""
    session.query("UPDATE groupml.runs SET status = 'failed', finished_at = clock_timestamp() "
                  "WHERE run_id = $1 AND status = 'running'", [run_id], ["bigint"])


class _RunDeleted(Exception):
    """The run's row disappeared while the run trained (another session deleted it)."""


def _record_snapshot(session, run_id: int, sid: int) -> None:
    session.query("UPDATE groupml.grouped_runs SET snapshot_id = $2, updated_at = clock_timestamp() WHERE run_id = $1",
                  [run_id, sid], ["bigint", "bigint"])


def _snapshot_for_run(session, run_id: int, source: str, group_by, features, label, cols, seed: int,
                      fraction: float, exec_options: Dict[str, Any], new_pool, transform=None):
    """(snapshot id, worker pool or None) of a run: its own snapshot when it is ready and
    intact, else the kept one named by ``options.snapshot``, else a new one -- built by the
    workers when ``new_pool`` (a pool factory; None for one worker) and the group-by types
    allow it, the pool then started and returned for the training."""
    for r in session.query("SELECT s.snapshot_id FROM groupml.grouped_runs g JOIN groupml.snapshots s ON "
                           "s.snapshot_id = g.snapshot_id WHERE g.run_id = $1 AND s.status = 'building'",
                           [run_id], ["bigint"]):
        # a parallel build of this run that was cancelled or crashed: its committed parts go
        session.notice(f"groupml: run {run_id}: snapshot {r['snapshot_id']} was not finished; rebuilding it")
        delete_snapshot(session, r["snapshot_id"])
    row = session.query("SELECT snapshot_id FROM groupml.grouped_runs g WHERE run_id = $1 AND EXISTS "
                        "(SELECT 1 FROM groupml.snapshots s WHERE s.snapshot_id = g.snapshot_id AND s.status = 'ready')",
                        [run_id], ["bigint"])
    sid = row[0]["snapshot_id"] if row else None
    if sid is not None and not snapshot_intact(session, sid):
        # a crash restart emptied the (unlogged) blocks; the same arguments rebuild the same
        # rows, blocks and shard layout, so committed groups and checkpoints stay valid
        session.notice(f"groupml: run {run_id}: snapshot {sid} lost its blocks (a crash restart empties them, and a "
                       f"restore without unlogged data leaves them out); rebuilding it")
        if exec_options["snapshot"] is None:
            delete_snapshot(session, sid)
        sid = None
    if sid is None and exec_options["snapshot"] is not None:
        sid = exec_options["snapshot"]
        check_snapshot(session, sid, source, group_by, features, label, seed, fraction)
    pool = None
    if sid is None:
        t0 = time.perf_counter()
        parallel = None
        try:
            if new_pool is not None and can_build_in_parallel(group_by, cols):
                pool = new_pool()
                pool.start()
                parallel = _SnapshotParts(pool, session)
            sid = build_snapshot(session, source, group_by, features, label, cols, seed=seed, fraction=fraction,
                                 block_rows=exec_options["block_rows"], keep=exec_options["keep_snapshot"],
                                 parallel=parallel, on_created=lambda s: _record_snapshot(session, run_id, s),
                                 transform=transform)
        except BaseException as exc:
            if pool is not None:
                pool.close()
            if isinstance(exc, WorkerLostError):            # a failed part; the snapshot is already gone
                mark_run_failed(session, run_id)
                session.commit()
                n_done = session.query("SELECT count(*) AS n FROM groupml.models WHERE run_id = $1", [run_id],
                                       ["bigint"])[0]["n"]
                raise _stopped(exc, f"run {run_id} stopped while building its snapshot: {exc.message}; {n_done} "
                                    f"groups are committed",
                               f"Call train_groups again with run_id => {run_id} once the cause is fixed; it builds "
                               f"the snapshot again and resumes from the committed groups.") from None
            raise
        how = f" by {parallel.parts} workers" if parallel is not None else ""
        session.notice(f"groupml: run {run_id}: snapshot {sid} of {source} built{how} in "
                       f"{time.perf_counter() - t0:.2f} s")
    return sid, pool


def _stopped(exc: GroupmlError, message: str, hint: str) -> GroupmlError:
    """The error that ends a run whose worker failed: XX000 with how to resume, or, when the
    worker gave up waiting for a lock, its endpoint could not be used or its task raised an
    error of its own SQLSTATE (42501, 53200, ...), that SQLSTATE with the error's hint first."""
    if isinstance(exc, WorkerStateError):
        return WorkerStateError(exc.sqlstate, message, hint=f"{exc.hint} {hint}")
    if isinstance(exc, (WorkerLockTimeoutError, WorkerEndpointError)):
        return type(exc)(message, hint=f"{exc.hint} {hint}")
    return GroupmlError(message, hint=hint)


class _SnapshotParts:
    """Runs the ``snapshot_part`` requests of a parallel snapshot build, one per worker, while
    the coordinator keeps checking for cancel; a failed part stops the pool (the other parts
    roll back) and deletes the snapshot."""

    def __init__(self, pool, session):
        self.pool, self.session, self.parts = pool, session, len(pool.endpoints)

    def __call__(self, sid: int, requests) -> List[Dict[str, Any]]:
        from concurrent.futures import wait as wait_all

        futs = [self.pool.submit(w, json.dumps(r), b"", {"kind": "snapshot", "group_key": None}, fn="task")
                for w, r in enumerate(requests)]
        while not all(f.done() for f in futs):
            wait_all(futs, timeout=0.25)
            self.session.check_cancel()
        bad = [f.exception() for f in futs if f.exception() is not None]
        if bad:
            self.pool.close()                  # the other parts roll back
            delete_snapshot(self.session, sid)
            self.session.commit()
            exc = bad[0]
            raise exc if isinstance(exc, (WorkerLostError, WorkerDataError)) else WorkerLostError(str(exc))
        return [json.loads(f.result()) for f in futs]


def _resume_points(session, run_id: int, pending, fps, d: int):
    """(resume state per group key, committed schedule entries per group key) for the groups of
    an interrupted attempt that have a usable checkpoint; the rows of every other pending
    group are deleted (it restarts from its first epoch). A checkpoint is usable when it was
    made for this call (fingerprint), decodes, and the models in it are safe to hand to
    LightGBM or torch (:func:`groupml.executor.patterns.check_checkpoint_models`)."""
    from .patterns import check_checkpoint_models

    rows = {r["k"]: r for r in session.query(
        "SELECT group_key::text AS k, block, fingerprint, state FROM groupml.run_checkpoints WHERE run_id = $1",
        [run_id], ["bigint"])}
    resume, logs = {}, {}
    for g in pending:
        gkey = g["gkey"]
        r = rows.get(gkey)
        state, why = None, ("its checkpoint does not match the model, search, options or shard layout of "
                            "this call")
        if r is not None and r["fingerprint"] == fps[gkey]:
            try:
                state = decode(bytes(r["state"]))
                check_checkpoint_models(state, d)
            except GroupmlError as exc:
                state, why = None, f"its checkpoint is damaged ({exc})"
        if state is None:
            if r is not None:
                session.notice(f"groupml: run {run_id}: group {gkey} restarts: {why}")
            for t in ("run_epochs", "run_schedule", "trials", "run_checkpoints"):
                session.query(f"DELETE FROM groupml.{t} WHERE run_id = $1 AND group_key = $2::jsonb",
                              [run_id, gkey], ["bigint", "text"])
            continue
        for t, extra in (("run_epochs", " AND block > $3"), ("trials", "")):
            session.query(f"DELETE FROM groupml.{t} WHERE run_id = $1 AND group_key = $2::jsonb{extra}",
                          [run_id, gkey] + ([int(r["block"])] if extra else []),
                          ["bigint", "text"] + (["integer"] if extra else []))
        resume[gkey] = state
        logs[gkey] = [dict(e, group_key=gkey, trials=list(e["trials"])) for e in session.query(
            "SELECT pass, worker, shard, row_start, n_rows, trials, started, finished, worker_pid, kind "
            "FROM groupml.run_schedule WHERE run_id = $1 AND group_key = $2::jsonb", [run_id, gkey],
            ["bigint", "text"])]
        session.notice(f"groupml: run {run_id}: group {gkey} resumes after its committed epoch block {r['block']}")
    session.query("DELETE FROM groupml.run_checkpoints WHERE run_id = $1 AND NOT (group_key::text = ANY ($2))",
                  [run_id, list(resume)], ["bigint", "text[]"])
    return resume, logs


def _store_schedule(session, run_id, gkey, log) -> None:
    if not log:
        return
    cols = ["pass", "worker", "shard", "row_start", "n_rows", "started", "finished", "worker_pid"]
    log = sorted(log, key=lambda e: e["started"])
    session.query(
        "INSERT INTO groupml.run_schedule (run_id, group_key, pass, worker, shard, row_start, n_rows, trials, started, "
        "finished, worker_pid, kind) SELECT $1, $2::jsonb, p, w, s, rs, nr, "
        "pg_catalog.string_to_array(tr, ',')::int[], st, fi, pid, k FROM unnest($3::int[], $4::int[], "
        "$5::int[], $6::bigint[], $7::bigint[], $8::text[], $9::float8[], $10::float8[], $11::int[], $12::text[]) "
        "AS u(p, w, s, rs, nr, tr, st, fi, pid, k)",
        [run_id, gkey] + [[e[c] for e in log] for c in cols[:5]]
        + [[",".join(str(t) for t in e["trials"]) for e in log], [e["started"] for e in log],
           [e["finished"] for e in log], [e["worker_pid"] for e in log], [e.get("kind", "pass") for e in log]],
        ["bigint", "text", "int[]", "int[]", "int[]", "bigint[]", "bigint[]", "text[]", "float8[]", "float8[]",
         "int[]", "text[]"])
