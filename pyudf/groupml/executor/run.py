"""The coordinator of a planner-driven train_groups run (runs in the calling backend).

Main thread: all catalog I/O, through the functions of :mod:`groupml.catalog` on the
:class:`groupml.db.Session` (snapshot, plan, per-group models/trials/schedule, per-epoch
metrics and counters), commits, NOTICEs, cancel checks. Group-driver threads: one group's search and solver each, never
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
from typing import Any, Callable, Dict, List, Optional


from .. import catalog
from ..catalog import mark_run_failed
from ..errors import GroupmlError, UndefinedObjectError
from ..planner import check_placement
from ..validation import check_bool, check_choice, check_number
from .checkpoint import decode, encode, fingerprint
from . import baselines  # noqa: F401  (its strategies register themselves in core's table)
from .core import Aborted, check_checkpoint_models, pattern_of
from .costs import load_calibration
from .glm import ShardEvaluator, fit_sharded_group
from .invariants import schedule_violations
from .patterns import fit_other_group, fit_unsplit_glm
from .plan import group_tasks, make_plan, pass_task_rows, placement_for, resumed_plan, workload_of
from .pool import (NodeLostError, PartitionUnavailableError, WorkerDataError, WorkerEndpointError, WorkerLockTimeoutError, WorkerLostError, WorkerPool,
                   WorkerStateError,
                   resolve_endpoints, server_identity)
from .steering import RunRequests, applied_request_ids
from .snapshot import (DEFAULT_BLOCK_ROWS, build_snapshot, can_build_in_parallel, check_snapshot, delete_snapshot,
                       drop_orphan_snapshots, drop_snapshot, load_validation, snapshot_intact)

EXEC_KEYS = ("keep_snapshot", "snapshot", "worker_memory_mb", "block_rows", "lock_timeout_ms", "drivers",
             "network_timeout_s", "flexible_hops", "placement", "checkpoint_every_s", "whole_group_tasks",
             "whole_group_max_work", "replicas")
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
        "replicas": check_number(ex.get("replicas", 1), "replicas", OWNER, ge=1, le=64, integer=True,
                                 hint="Workers holding a copy of each partition under strategy 'mop' (1: rows stay on "
                                      "one worker; 2 or more: a unit may run on any holder, and a run survives a "
                                      "lost worker); default 1."),
        "network_timeout_s": check_number(ex.get("network_timeout_s", 120), "network_timeout_s", OWNER, gt=0,
                                          le=3600, hint="Seconds a rank of distributed LightGBM waits for its "
                                                        "peers (LightGBM's time_out, rounded up to minutes)."),
    }
    return fit, out


def run_grouped(session, *, run_id: int, source: str, group_by, features, label, cols, model: str,
                search: dict, fit_options: dict, exec_options: dict, workers: int, strategy: str,
                family, spec, opts, store, transform=None, holders=None) -> Dict[str, Any]:
    """Snapshot, plan, train every pending group on the worker pool, finish the run.
    ``transform``: the run's raw-column transform (:mod:`groupml.transforms`), which encodes
    the snapshot's rows, or None. ``holders`` (:mod:`groupml.executor.nodes`): the source is
    distributed; one worker per holder, each snapshotting and training on its own node; the
    placement is where the rows are."""
    d = transform.width if transform is not None else len(features)
    clock = RunClock(time.time())
    seed, fraction = opts["seed"], opts["validation_fraction"]
    # schedule times are seconds since the run's first attempt started, so the entries of a
    # resumed group's attempts are on one clock
    since = catalog.run_elapsed_seconds(session, run_id)

    identity = server_identity(session)

    def new_pool():
        return WorkerPool(resolve_endpoints(session, workers), run_id=run_id,
                          lock_timeout_ms=exec_options["lock_timeout_ms"], clock_start=since, identity=identity)

    # -- snapshot (committed before any worker starts: workers see only committed rows)
    for orphan in drop_orphan_snapshots(session):
        session.notice(f"groupml: dropped snapshot {orphan}: no run refers to it (its run was deleted, or its "
                       f"build stopped before the run recorded it)")
    if holders is not None:
        sid, pool, plan = _node_snapshot_and_plan(session, run_id, holders, source=source, group_by=group_by,
                                                  features=features, label=label, seed=seed, fraction=fraction,
                                                  exec_options=exec_options, model=model, family=family, spec=spec,
                                                  clock=clock, since=since, strategy=strategy)
        groups = catalog.snapshot_groups(session, sid)
    else:
        sid, pool = _snapshot_for_run(session, run_id, source, group_by, features, label, cols, seed, fraction,
                                      exec_options, new_pool if workers > 1 else None, transform)
        catalog.set_run_snapshot(session, run_id, sid)
        clock.charge(session, run_id)               # the snapshot
        session.commit()

        groups = catalog.snapshot_groups(session, sid)
        plan = _plan_run(session, run_id, groups, model=model, search=search, source=source, features=features,
                         family=family, spec=spec, exec_options=exec_options, workers=workers, strategy=strategy, d=d)
    done, pending, fps, resume_states, group_logs = _pending_groups(
        session, run_id, groups, plan.tasks, model=model, search=search, fit_options=fit_options,
        pattern=plan.pattern, d=d)
    clock.training()                    # what estimated_seconds (the makespan) estimates starts here
    if holders is not None:
        pass                            # the holders' pool stays: it drops their snapshots at the end
    elif pending and pool is None:
        pool = new_pool()
    elif not pending and pool is not None:
        pool.close()
        pool = None
    events: "queue.Queue" = queue.Queue()
    abort = threading.Event()
    # a model hopper run is steered from other sessions (groupml.run_requests); the requests
    # filed before this call apply at its first epoch boundary
    requests = RunRequests(session, run_id) if plan.chosen == "mop" and holders is None else None
    if requests is not None:
        requests.refresh()
    driver = _GroupDriver(pool, plan, sid=sid, d=d, family=family, spec=spec, opts=opts, model=model,
                          search=search, fit_options=fit_options, exec_options=exec_options, events=events,
                          abort=abort, requests=None if requests is None else requests.for_search)
    run = _RunContext(run_id=run_id, sid=sid, workers=workers, exec_options=exec_options, store=store, clock=clock,
                      fps=fps, resume_states=resume_states, group_logs=group_logs, n_groups=len(groups),
                      n_done=len(done), before_close=None if holders is None else _node_finish(
                          session, run_id, keep=exec_options["keep_snapshot"]), requests=requests)
    all_log = _train_pending(session, run, driver, pending)
    bad = schedule_violations(all_log, {g["gkey"]: int(g["n_train"]) for g in groups},
                              {g["gkey"]: plan.tasks[g["group_no"]]["mode"] for g in groups
                               if g["group_no"] in plan.tasks})
    if bad:
        raise ScheduleInvariantError("grouped learning broke an invariant: " + "; ".join(bad[:3]))
    keep = exec_options["keep_snapshot"] or (exec_options["snapshot"] is not None)
    if not keep:
        drop_snapshot(session, sid)
        catalog.clear_run_snapshot(session, run_id)
    clock.charge(session, run_id, done=True)
    if requests is not None:
        catalog.expire_requests(session, run_id)
    catalog.mark_grouped_done(session, run_id)
    catalog.delete_run_checkpoints(session, run_id)
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
        catalog.charge_run_time(session, run_id, wall, train, done=done)


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
    pattern = pattern_of(family)
    wl = workload_of(spec, family)
    # unit costs measured from earlier runs' tasks
    cal = load_calibration(session, model=model, pattern=pattern, source=source, features=features, search=search,
                           d=d, n_configs=wl["n_configs"], epochs=wl["epochs"])
    whole_max_rows = pass_task_rows(exec_options, d, wl["n_configs"], wl["epochs"])
    plan = make_plan(sizes, wl["n_configs"], wl["epochs"], workers, strategy, pattern=pattern, blocks=wl["blocks"],
                     calibration=cal, pass_task_rows=whole_max_rows, placement=exec_options["placement"])
    prev = catalog.recorded_plan(session, run_id)
    again = resumed_plan(prev["strategy"], json.loads(prev["plan"]) if prev["plan"] else None,
                         sizes, workers, strategy) if prev else None
    if again is not None:          # a resumed run keeps its first attempt's plan (and its record)
        chosen, placement = again
        session.notice(f"groupml: run {run_id}: resumes with the plan of its first attempt: {chosen} on {workers} "
                       f"worker(s), {pattern} pattern")
    else:
        chosen = plan.strategy
        placement = placement_for(chosen, sizes, workers, pattern,
                                  plan=plan if exec_options["placement"] == "auto" else None)
    check_placement(placement, sizes)
    tasks = group_tasks(chosen, placement, groups, workers, pattern)
    if again is None:
        catalog.set_run_estimate(session, run_id, len(groups), plan.makespan)
        catalog.record_plan(session, run_id, chosen, {"explanation": plan.explanation, "pattern": pattern,
                                                      "makespan": plan.makespan, "per_worker": plan.per_worker,
                                                      "placement": placement.to_dict(), "workload": wl,
                                                      "unit_costs": cal.to_dict()})
        session.notice(f"groupml: run {run_id}: {chosen} on {workers} worker(s), {pattern} pattern: "
                       f"{plan.explanation}")
    return _RunPlan(chosen, pattern, tasks, whole_max_rows)


def _pending_groups(session, run_id: int, groups, tasks, *, model: str, search: dict, fit_options: dict,
                    pattern: str, d: int):
    """(done keys, pending groups largest first, fingerprints, resume points, committed logs);
    commits groups_done."""
    done = catalog.stored_group_keys(session, run_id)
    pending = [g for g in groups if g["gkey"] not in done]
    fps = {g["gkey"]: fingerprint(model=model, search=search, fit_options=fit_options, pattern=pattern,
                                  mode=tasks.get(g["group_no"], {}).get("mode", "shards"),
                                  shards=tasks.get(g["group_no"], {}).get("shards", [])) for g in pending}
    # leftovers of an interrupted attempt: a group with a valid checkpoint continues after its
    # last committed epoch block, the others restart
    resume_states, group_logs = _resume_points(session, run_id, pending, fps, d)
    catalog.set_groups_done(session, run_id, len(done))
    session.commit()
    pending.sort(key=lambda g: (-g["n_train"], g["group_no"]))
    return done, pending, fps, resume_states, group_logs


class _GroupDriver:
    """Trains one group in a group-driver thread (never touches plpy): its search and solver,
    with data passes as worker tasks; epoch reports and checkpoints go to ``events``."""

    def __init__(self, pool, plan: _RunPlan, *, sid: int, d: int, family, spec, opts, model: str, search: dict,
                 fit_options: dict, exec_options: dict, events: "queue.Queue", abort: threading.Event,
                 requests: Optional[Callable] = None):
        self.pool, self.plan, self.sid, self.d = pool, plan, sid, d
        self.requests = requests                # a model hopper run's trial requests (RunRequests.for_search)
        self.family, self.spec, self.opts = family, spec, opts
        self.model, self.search, self.fit_options, self.exec_options = model, search, fit_options, exec_options
        self.events, self.abort = events, abort
        self.progress: Dict[str, str] = {}      # group key -> its trainer's latest progress line

    def take_progress(self) -> Optional[str]:
        """The newest progress line of a group in flight (None: nothing new), consumed."""
        if not self.progress:
            return None
        gkey = next(iter(self.progress))
        return self.progress.pop(gkey, None)

    def check_abort(self) -> None:
        if self.abort.is_set():
            raise Aborted()

    def __call__(self, g, Xv, resume):
        gno, gkey = g["group_no"], g["gkey"]
        t = self.plan.tasks.get(gno, {"mode": "shards", "shards": []})
        d, pool, events, ex = self.d, self.pool, self.events, self.exec_options

        def on_block(e, state):
            # every task of the group so far has reported: its log entries belong to blocks <= e.block
            events.put((gkey, e.block, e.passes, [(tid, ep, sc, dec) for tid, ep, sc, dec in e.reports],
                        (state, pool.take_log(gkey))))

        def on_epoch_raw(block, passes, reports):
            events.put((gkey, block, passes, reports, None))

        if self.plan.pattern != "algebraic" or t["mode"] == "mop":
            return fit_other_group(pool, family=self.family, spec=self.spec, opts=self.opts, model=self.model,
                                   search=self.search, fit_options=self.fit_options, g=g, shards=t["shards"],
                                   snapshot_id=self.sid, d=d, X_val=Xv[:, :d], y_val=Xv[:, d],
                                   mem_mb=ex["worker_memory_mb"], abort=self.abort, on_epoch_raw=on_epoch_raw,
                                   interrupt_check=self.check_abort, lgbm_timeout_s=ex["network_timeout_s"],
                                   flexible=ex["flexible_hops"], checkpoint=on_block, resume=resume,
                                   mode=t["mode"], replicas=ex["replicas"], holders=t.get("holders"),
                                   val_holders=t.get("val"),
                                   progress=lambda line: self.progress.__setitem__(gkey, line),
                                   requests=self.requests)
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


@dataclass
class _RunContext:
    """What the main thread keeps of a run while its pending groups train."""
    run_id: int
    sid: int                             # the run's snapshot
    workers: int
    exec_options: Dict[str, Any]         # split_options' executor options
    store: Callable                      # store(session, run_id, gkey, result): a group's model and trials
    clock: "RunClock"
    fps: Dict[str, str]                  # group key -> fingerprint of its checkpoints
    resume_states: Dict[str, Any]        # group key -> the checkpoint it resumes from
    group_logs: Dict[str, List[Dict[str, Any]]]  # group key -> its committed schedule entries
    n_groups: int
    n_done: int                          # groups stored so far
    before_close: Optional[Callable] = None  # called with the pool after the last group, before it closes
    requests: Optional[RunRequests] = None   # a model hopper run's requests from other sessions
    added_workers: int = 0               # workers this call added to the pool (requests applied)


def _driver_count(run: _RunContext, driver: "_GroupDriver", n_pending: int) -> int:
    """Groups in flight at once: one under DP (a group spans every worker), else ``drivers``
    or three per worker (at least two), never more than the pending groups."""
    if driver.plan.chosen == "dp":
        n_drivers = 1                       # DP: one group at a time across all workers
    else:
        n_drivers = run.exec_options["drivers"] or max(2, 3 * run.workers)
    return max(1, min(n_drivers, n_pending or 1))


def _train_pending(session, run: _RunContext, driver: "_GroupDriver", pending) -> List[Dict[str, Any]]:
    """Train the pending groups, a few at a time (main thread: catalog I/O, commits, cancel
    checks); every finished group is stored and committed. Returns the whole schedule log."""
    pool, events, run_id = driver.pool, driver.events, run.run_id
    n_drivers = _driver_count(run, driver, len(pending))
    all_log: List[Dict[str, Any]] = []
    ex = ThreadPoolExecutor(max_workers=n_drivers, thread_name_prefix="groupml-group") if pending else None
    in_flight: Dict[Any, Dict[str, Any]] = {}
    try:
        if pool is not None and not pool.started:
            pool.start()
        if run.requests is not None:
            _rejoin_workers(session, run, pool)
        last_commit = time.perf_counter()
        while pending or in_flight:
            while pending and len(in_flight) < n_drivers:
                g = pending.pop(0)
                Xv = load_validation(session, run.sid, g["group_no"], driver.d)
                in_flight[ex.submit(driver, g, Xv, run.resume_states.pop(g["gkey"], None))] = g
            finished, _ = wait(list(in_flight), timeout=0.25, return_when=FIRST_COMPLETED)
            # also the cancel check. A run deleted meanwhile would fail the next insert on a foreign
            # key: the row lock (until this transaction's commit) waits out a delete in progress, and
            # keeps one from starting before this transaction's inserts are in
            if not catalog.lock_run_row(session, run_id):
                raise _RunDeleted()
            wrote = _flush_events(session, run_id, events, run.group_logs, run.fps,
                                  {in_flight[f]["gkey"] for f in finished if f.exception() is None}, run.requests)
            if run.requests is not None and pool is not None:
                run.requests.refresh()
                wrote = _apply_worker_requests(session, run, pool) or wrote
            line = driver.take_progress()
            if line is not None:
                catalog.set_last_event(session, run_id, line)
                wrote = True
            for fut in finished:
                g = in_flight.pop(fut)
                all_log.extend(_finish_group(session, run, driver, g, fut.result()))
                wrote = True
            if finished or (wrote and time.perf_counter() - last_commit >= run.exec_options["checkpoint_every_s"]):
                run.clock.charge(session, run_id)
                session.commit()
                last_commit = time.perf_counter()
        _flush_events(session, run_id, events, run.group_logs, run.fps, requests=run.requests)
    except BaseException as exc:
        _stop_training(session, run, driver, ex, exc)
        raise
    if pool is not None:
        if run.before_close is not None:
            run.before_close(pool)
        pool.close()
        if ex is not None:
            ex.shutdown(wait=True)
    return all_log


def _rejoin_workers(session, run: _RunContext, pool) -> None:
    """A resumed model hopper run starts with the workers its applied requests added."""
    n = catalog.added_workers(session, run.run_id)
    if n:
        pool.add_workers(resolve_endpoints(session, run.workers + n)[run.workers:])
        run.added_workers = n
        session.notice(f"groupml: run {run.run_id}: {n} worker(s) added by earlier requests rejoin the pool")


def _apply_worker_requests(session, run: _RunContext, pool) -> bool:
    """Connect the workers of pending ``mop_add_workers`` requests (between sub-epochs: the
    model hopper trainers take them at their next placement) and mark the requests applied,
    or refused when a worker cannot connect; True when a request was settled."""
    todo = run.requests.pending_workers()
    for r in todo:
        n, have = int(r["n_workers"]), run.workers + run.added_workers
        try:
            new = pool.add_workers(resolve_endpoints(session, have + n)[have:])
        except GroupmlError as exc:
            # the workers connected before the one that failed stay in the pool for this call
            run.added_workers = pool.size - run.workers
            run.requests.settle([r["request_id"]], "refused", exc.message)
            session.notice(f"groupml: run {run.run_id}: request {r['request_id']} (add {n} workers) refused: "
                           f"{exc.message}")
            continue
        run.added_workers += n
        run.requests.settle([r["request_id"]], "applied", f"workers {', '.join(map(str, new))} joined the pool")
        session.notice(f"groupml: run {run.run_id}: worker(s) {', '.join(map(str, new))} joined the pool "
                       f"(request {r['request_id']})")
    return bool(todo)


def _finish_group(session, run: _RunContext, driver: "_GroupDriver", g, result) -> List[Dict[str, Any]]:
    """A group's driver returned ``result``: check its whole schedule, store it (the caller
    commits). Returns the group's schedule entries over every attempt."""
    gkey = g["gkey"]
    log = driver.pool.take_log(gkey)                # since the group's last checkpoint
    full = run.group_logs.pop(gkey, []) + log       # + committed blocks (earlier attempts too)
    bad = schedule_violations(full, {gkey: int(g["n_train"])}, {gkey: driver.plan.tasks.get(g["group_no"], {}).get(
        "mode", "shards")})
    if bad:
        raise ScheduleInvariantError("grouped learning broke an invariant: " + "; ".join(bad[:3]))
    run.n_done += 1
    _store_finished_group(session, run.run_id, gkey, result, log, run.store, f"{run.n_done}/{run.n_groups}")
    return full


def _stop_training(session, run: _RunContext, driver: "_GroupDriver", ex, exc: BaseException) -> None:
    """Stop the drivers and the pool after ``exc``; a deleted run drops its snapshot (unless
    kept) and raises 42704, a lost worker or a broken invariant marks the run failed and
    raises how to resume. Any other ``exc`` is re-raised by the caller."""
    run_id = run.run_id
    node = _lost_node(driver.pool, exc)         # before the pool closes its connections
    driver.abort.set()
    if driver.pool is not None:
        driver.pool.close()
    if ex is not None:
        ex.shutdown(wait=True, cancel_futures=True)
    if isinstance(exc, _RunDeleted):
        if not run.exec_options["keep_snapshot"] and run.exec_options["snapshot"] is None:
            drop_snapshot(session, run.sid)
        session.commit()
        raise UndefinedObjectError(
            f"Run {run_id} was deleted while it was being trained; this call stops",
            hint="Nothing of the run is left (its snapshot is dropped unless kept); start a new run.") from None
    if isinstance(exc, (WorkerLostError, ScheduleInvariantError)):
        run.clock.charge(session, run_id)
        mark_run_failed(session, run_id)
        session.commit()
        what = exc.message if node is None else f"node {node} was lost ({exc.message})"
        raise _stopped(exc, f"run {run_id} stopped: {what}; {run.n_done} of {run.n_groups} groups are committed",
                       f"Call train_groups again with run_id => {run_id} to resume from the committed groups.",
                       node=node) from None


def _flush_events(session, run_id: int, events: "queue.Queue", group_logs, fps, finishing=(),
                  requests: Optional[RunRequests] = None) -> int:
    """Write the epoch blocks queued in ``events`` by the group drivers: run_epochs rows, and
    for checkpointed groups the blocks' run_schedule rows (also kept in ``group_logs``) and the
    group's latest checkpoint (``fps``: fingerprints) -- all in the transaction the caller
    commits, so a committed block always has its checkpoint (``finishing``: groups whose model
    is stored in this transaction; their checkpoint would be deleted). Returns the blocks
    written. ``requests``: the trial requests a block's search applied are marked applied in
    the same transaction."""
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
            if requests is not None:
                requests.settle(applied_request_ids(state), "applied", f"applied by group {gkey}, committed with "
                                                                       f"its epoch block {block}")
            if part:
                group_logs.setdefault(gkey, []).extend(part)
                catalog.insert_schedule(session, run_id, gkey, part)
        n += 1
        last = f"group {gkey} epoch block {block}"
        if reports:
            catalog.insert_epoch_reports(session, run_id, gkey, block, reports)
    for gkey, (block, passes, state) in latest.items():
        if gkey in finishing:
            continue
        catalog.upsert_checkpoint(session, run_id, gkey, block, passes, fps[gkey], encode(state))
    if n:
        catalog.add_epochs_done(session, run_id, n, last)
    return n


def _store_finished_group(session, run_id: int, gkey: str, result, log, store, position: str) -> None:
    """A finished group's model and trials (``store``), the rest of its executed schedule, its
    checkpoint gone, the run's counters, and a NOTICE (``position``: "k/n")."""
    store(session, run_id, gkey, result)
    catalog.insert_schedule(session, run_id, gkey, log)
    catalog.delete_group_checkpoint(session, run_id, gkey)
    catalog.add_group_done(session, run_id)
    catalog.add_passes_done(session, run_id, int(result.passes), f"group {gkey} done")
    session.notice(f"groupml: group {position} {gkey}: {result.status}"
                   + (f", {result.metric} {result.score:.4f}" if result.score is not None else "")
                   + f" ({result.passes} passes)")


def _node_snapshot_and_plan(session, run_id: int, holders, *, source: str, group_by, features, label: str,
                            seed: int, fraction: float, exec_options, model: str, family, spec, clock, since,
                            strategy: str = "grouped"):
    """A run on the nodes of a distributed source: the holders' pool (started), their
    snapshots and the coordinator's, and the plan whose placement is where the rows are.
    An MLP run adds an endpoint per other placement of a replicated shard (the model
    hopper's replicas); its groups spread over nodes train by model hopping, a LightGBM
    run's by one rank per node, a GLM run's by partial sums."""
    from .nodes import (SPREAD_HOW, build_node_snapshots, check_pattern, drop_node_snapshots, groups_may_spread,
                        holder_endpoints, hop_plan_text, node_plan_facts, replica_endpoints, split_groups,
                        stale_node_snapshots)

    pattern = pattern_of(family)
    hop = pattern == "sequential"
    endpoints = holder_endpoints(session, holders)
    if hop and any(ep["alternates"] for ep in endpoints) and groups_may_spread(session, source, group_by):
        endpoints += replica_endpoints(endpoints)
    pool = WorkerPool(endpoints, run_id=run_id, lock_timeout_ms=exec_options["lock_timeout_ms"],
                      clock_start=since, identity=server_identity(session))
    t0 = time.perf_counter()
    prev = catalog.recorded_plan(session, run_id)
    stale = stale_node_snapshots(prev["plan"] if prev else None)
    try:
        pool.start()
        for name, down, used in pool.failovers:
            session.notice(f"groupml: run {run_id}: node {down} is unreachable; "
                           + (f"{name} is read from its placement on {used}" if used is not None
                              else f"the replica {name} is left out"))
        sid, tasks = build_node_snapshots(session, pool, run_id=run_id, source=source, group_by=group_by,
                                          features=features, label=label, seed=seed, fraction=fraction,
                                          block_rows=exec_options["block_rows"], cancel_check=session.check_cancel,
                                          stale=stale, hop=hop)
    except BaseException as exc:
        node = _lost_node(pool, exc)            # before the pool closes its connections
        pool.close()
        if isinstance(exc, WorkerLostError):
            raise _snapshot_failed(session, run_id, exc, "while the nodes built their snapshots",
                                   "once the node is back; it resumes from the committed groups.",
                                   node=node) from None
        raise
    groups = catalog.snapshot_groups(session, sid)
    split = split_groups(tasks)
    try:
        check_pattern(pattern, split, {g["group_no"]: g["gkey"] for g in groups})
    except GroupmlError:
        drop_node_snapshots(pool)
        pool.close()
        raise
    wl = workload_of(spec, family)
    nodes = sorted({ep["node"] for ep in pool.endpoints})
    how = hop_plan_text(tasks, pool.endpoints) if hop else SPREAD_HOW.get(pattern, pattern)
    explanation = (f"on the nodes holding the rows: {len(holders)} shard(s) on {len(nodes)} node(s) "
                   f"({', '.join(nodes)}); {len(tasks) - len(split)} group(s) whole on their node, {len(split)} "
                   f"spread over nodes ({how}); snapshots built on the nodes in "
                   f"{time.perf_counter() - t0:.2f} s")
    # every attempt plans again: the placement is where the rows are, the same while they stay;
    # committed with the snapshots, so the plan always names the node snapshots that exist
    clock.charge(session, run_id)
    catalog.set_run_estimate(session, run_id, len(groups), None)
    chosen = "mop" if strategy == "mop" else "grouped"
    catalog.record_plan(session, run_id, chosen, {"explanation": explanation, "pattern": pattern,
                                                     "workload": wl, "nodes": node_plan_facts(holders, tasks, pool.endpoints)})
    session.notice(f"groupml: run {run_id}: {explanation}")
    session.commit()
    return sid, pool, _RunPlan(chosen, pattern, tasks, pass_task_rows(exec_options, len(features),
                                                                         wl["n_configs"], wl["epochs"]))


def _node_finish(session, run_id: int, keep: bool = False):
    """After the last group of a node run: the holders drop their snapshots (``keep``: they
    stay, for :func:`groupml.executor.replay.replay_trial`); the bytes sent to and received
    from each node go into the run's plan (``moved``) and a NOTICE."""
    def finish(pool) -> None:
        from .nodes import drop_node_snapshots

        moved = {}
        for i, ep in enumerate(pool.endpoints):
            m = moved.setdefault(ep["node"], {"sent": 0, "received": 0, "tasks": 0})
            m["sent"] += pool.sent[i]
            m["received"] += pool.received[i]
        if not keep:
            drop_node_snapshots(pool)
        catalog.add_plan_facts(session, run_id, {"moved": moved})
        total = sum(m["sent"] + m["received"] for m in moved.values())
        session.notice(f"groupml: run {run_id}: {total} bytes moved between the coordinator and the nodes "
                       f"(requests, partial sums, models; no training rows)")
    return finish


class _RunDeleted(Exception):
    """The run's row disappeared while the run trained (another session deleted it)."""


def _snapshot_for_run(session, run_id: int, source: str, group_by, features, label, cols, seed: int,
                      fraction: float, exec_options: Dict[str, Any], new_pool, transform=None):
    """(snapshot id, worker pool or None) of a run: its own snapshot when it is ready and
    intact, else the kept one named by ``options.snapshot``, else a new one -- built by the
    workers when ``new_pool`` (a pool factory; None for one worker) and the group-by types
    allow it, the pool then started and returned for the training."""
    for building in catalog.building_snapshots_of_run(session, run_id):
        # a parallel build of this run that was cancelled or crashed: its committed parts go
        session.notice(f"groupml: run {run_id}: snapshot {building} was not finished; rebuilding it")
        delete_snapshot(session, building)
    sid = catalog.ready_snapshot_of_run(session, run_id)
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
                                 parallel=parallel, on_created=lambda s: catalog.set_run_snapshot(session, run_id, s),
                                 transform=transform)
        except BaseException as exc:
            if pool is not None:
                pool.close()
            if isinstance(exc, WorkerLostError):            # a failed part; the snapshot is already gone
                raise _snapshot_failed(session, run_id, exc, "while building its snapshot",
                                       "once the cause is fixed; it builds the snapshot again and resumes from the "
                                       "committed groups.") from None
            raise
        how = f" by {parallel.parts} workers" if parallel is not None else ""
        session.notice(f"groupml: run {run_id}: snapshot {sid} of {source} built{how} in "
                       f"{time.perf_counter() - t0:.2f} s")
    return sid, pool


def _snapshot_failed(session, run_id: int, exc: GroupmlError, when: str, then: str,
                     node: Optional[str] = None) -> GroupmlError:
    """A worker failed while the run's snapshot was built: the run is marked failed (committed)
    and the error says how many groups are kept and how to resume (naming the lost ``node``)."""
    mark_run_failed(session, run_id)
    session.commit()
    n_done = catalog.count_models(session, run_id)
    what = exc.message if node is None else f"node {node} was lost ({exc.message})"
    return _stopped(exc, f"run {run_id} stopped {when}: {what}; {n_done} groups are committed",
                    f"Call train_groups again with run_id => {run_id} {then}", node=node)


def _lost_node(pool, exc: GroupmlError) -> Optional[str]:
    """The node (host:port) a lost worker was on when the workers are the nodes of a
    distributed source (:func:`groupml.executor.nodes.lost_node`), else None."""
    from .nodes import lost_node

    return lost_node(pool, exc) if pool is not None else None


def _stopped(exc: GroupmlError, message: str, hint: str, node: Optional[str] = None) -> GroupmlError:
    """The error that ends a run whose worker failed: XX000 with how to resume, or, when the
    worker gave up waiting for a lock, its endpoint could not be used or its task raised an
    error of its own SQLSTATE (42501, 53200, ...), that SQLSTATE with the error's hint first;
    a lost ``node`` of a distributed source is 08001."""
    from .nodes import NodeUnavailableError

    if isinstance(exc, NodeLostError):             # a hopping partition with no live node: its own hint
        return NodeLostError(message, hint=f"{exc.hint} {hint}")
    if node is not None:
        return NodeUnavailableError(message, hint=f"Bring node {node} back, then: {hint}")
    if isinstance(exc, WorkerStateError):
        return WorkerStateError(exc.sqlstate, message, hint=f"{exc.hint} {hint}")
    if isinstance(exc, (WorkerLockTimeoutError, WorkerEndpointError, PartitionUnavailableError)):
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
    LightGBM or torch (:func:`groupml.executor.core.check_checkpoint_models`)."""
    rows = catalog.run_checkpoints(session, run_id)
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
            catalog.delete_group_epochs(session, run_id, gkey)
            catalog.delete_group_schedule(session, run_id, gkey)
            catalog.delete_group_trials(session, run_id, gkey)
            catalog.delete_group_checkpoint(session, run_id, gkey)
            continue
        catalog.delete_group_epochs(session, run_id, gkey, after_block=int(r["block"]))
        catalog.delete_group_trials(session, run_id, gkey)
        resume[gkey] = state
        logs[gkey] = catalog.group_schedule(session, run_id, gkey)
        session.notice(f"groupml: run {run_id}: group {gkey} resumes after its committed epoch block {r['block']}")
    catalog.delete_checkpoints_except(session, run_id, list(resume))
    return resume, logs

