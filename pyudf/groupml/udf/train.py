"""train_groups: train and select one model per group of a table, into the catalog.

One scan loads every group as a packed block of doubles (``float8send`` per value,
``string_agg`` per group: the conversion runs in C, PL/Python receives one bytea per
group). Groups are then trained one after another; each group's model and trials are
committed before the next starts, so a crash or cancel loses at most the group in
flight, and calling again with the same run_id resumes.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import numpy as np

from ..db import backend_session, quote_ident
from ..fitting import MAX_THREADS
from ..validation import check_number
from ..errors import InvalidParameterError, UndefinedObjectError
from ._source import check_columns, check_select_privilege, columns, packed_row_expr
from . import parse_object, sql_entry

OWNER = "train_groups"


def _load_blocks(session, source: str, group_by, features, label, cols):
    gkey = ("pg_catalog.jsonb_build_object(" + ", ".join(
        f"{_lit(g)}, {quote_ident(g)}" for g in group_by) + ")") if group_by else "'{}'::jsonb"
    packed = packed_row_expr(cols, list(features) + [label])
    group_clause = (" GROUP BY " + ", ".join(quote_ident(g) for g in group_by)
                    + " ORDER BY " + ", ".join(quote_ident(g) for g in group_by)) if group_by else ""
    sql = (f"SELECT {gkey}::text AS gkey, count(*) AS n_rows, "
           f"pg_catalog.string_agg({packed}, ''::bytea) AS block FROM {source}{group_clause}")
    return session.query(sql)


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _validate(session, source, group_by, features, label, model, search, options):
    search_obj = parse_object(search, "search", OWNER)
    options_obj = parse_object(options, "options", OWNER)
    check_select_privilege(session, source, OWNER)
    cols = columns(session, source)
    group_by = check_columns(cols, group_by or [], "group_by", source, numeric=False, owner=OWNER)
    features = check_columns(cols, features, "features", source, numeric=True, owner=OWNER)
    if not features:
        raise InvalidParameterError("The 'features' value of train_groups must name at least one column; got []",
                                    hint="Pass ARRAY['f1', 'f2', ...].")
    if label is None:
        raise InvalidParameterError("The 'label' value of train_groups must be a column name; got null",
                                    hint="Pass the label column, e.g. label => 'clicked'.")
    check_columns(cols, [label], "label", source, numeric=True, owner=OWNER)
    return search_obj, options_obj, cols, group_by, features


def _check_workers(workers, strategy):
    from ..executor.plan import STRATEGY_CHOICES
    from ..validation import check_choice, check_number

    workers = check_number(1 if workers is None else workers, "workers", OWNER, ge=1, le=64, integer=True,
                           hint="Use workers => 1 for one backend, or up to 64 worker backends.")
    strategy = check_choice("auto" if strategy is None else strategy, "strategy", OWNER, STRATEGY_CHOICES,
                            hint="auto picks the cheapest by the planner's cost model.")
    return workers, strategy


class _Stopped(Exception):
    """Raised inside a training thread when the main thread stops the pool (cancel or error)."""


def _threads_option(options: dict) -> int:
    from ..fitting import default_threads

    return check_number(options.get("threads", default_threads()), "threads", "train_groups options", ge=1,
                        le=MAX_THREADS, integer=True,
                        hint=f"Groups trained at the same time in this backend (BLAS limited to one thread "
                             f"each); default min(CPUs, {MAX_THREADS}); 1 trains them one after another.")


def _fit_all(session, jobs, fit, threads):
    """Yield (job, FitResult) as groups finish.

    With ``threads`` > 1, groups train concurrently in a thread pool (numpy releases the
    GIL; BLAS is limited to one thread per group so the threads do not fight over cores).
    Only the backend's main thread -- this generator's consumer -- touches the database: it
    checks for cancel every 0.25 s, and on cancel or error the training threads stop at
    their next data pass.
    """
    from threadpoolctl import threadpool_limits

    if threads <= 1 or len(jobs) <= 1:
        with threadpool_limits(1):
            for job in jobs:
                yield job, fit(job, session.check_cancel)
        return
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    abort = threading.Event()

    def check():
        if abort.is_set():
            raise _Stopped()

    with threadpool_limits(1):
        pool = ThreadPoolExecutor(threads, thread_name_prefix="groupml-train")
        try:
            pending = {pool.submit(fit, job, check): job for job in jobs}
            while pending:
                done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                session.check_cancel()
                for future in done:
                    job = pending.pop(future)
                    yield job, future.result()
        finally:
            abort.set()
            pool.shutdown(wait=True, cancel_futures=True)


@sql_entry
def train_groups(source, group_by, features, label, model, search, options, run_id, workers=1, strategy="auto"):
    from ..fitting import fit_group, validate_request

    session = backend_session()
    workers, strategy = _check_workers(workers, strategy)
    search_obj, options_obj, cols, group_by, features = _validate(session, source, group_by, features, label,
                                                                  model, search, options)
    threads = _threads_option(options_obj)
    options_obj = {k: v for k, v in options_obj.items() if k != "threads"}
    executor = workers > 1 or strategy != "auto"
    exec_options = None
    fit_options = options_obj
    if executor:
        from ..executor.glm import uses_sgd
        from ..executor.pool import check_source_visible
        from ..executor.run import split_options

        from ..executor.patterns import check_strategy, pattern_of

        fit_options, exec_options = split_options(options_obj)
        family, spec, opts = _validate_model(model, search_obj, fit_options)
        pattern = pattern_of(family)
        check_strategy(pattern, strategy, model)
        check_source_visible(session, source)
        if pattern == "algebraic" and uses_sgd(search_obj):
            from ..errors import FeatureNotSupportedError
            raise FeatureNotSupportedError(
                "solver 'sgd' needs a group's rows in one process; train_groups with workers runs full-batch "
                "solvers (lbfgs, gd)", hint="Use solver 'lbfgs' or 'gd', or workers => 1.")
    else:
        validate_request(model, search_obj, options_obj)

    done = set()
    if run_id is None:
        run_id = session.query(
            "INSERT INTO groupml.runs (kind, source, group_by, features, label, family, search, options) "
            "VALUES ('train_groups', $1, $2, $3, $4, $5, $6::jsonb, $7::jsonb) RETURNING run_id",
            [source, group_by, features, label, model, json.dumps(search_obj), json.dumps(options_obj)],
            ["text", "text[]", "text[]", "text", "text", "text", "text"])[0]["run_id"]
        if executor:
            session.query("INSERT INTO groupml.grouped_runs (run_id, strategy, workers) VALUES ($1, $2, $3)",
                          [run_id, strategy, workers], ["bigint", "text", "integer"])
    else:
        rows = session.query("SELECT source, group_by, features, label, family, status FROM groupml.runs "
                             "WHERE run_id = $1", [run_id], ["bigint"])
        if not rows:
            raise UndefinedObjectError(f"The 'run_id' value of train_groups must name an existing run; got {run_id}",
                                       hint="Omit run_id to start a new run; see SELECT * FROM groupml.runs.")
        r = rows[0]
        if (r["source"], list(r["group_by"]), list(r["features"]), r["label"], r["family"]) != \
                (source, group_by, features, label, model):
            raise InvalidParameterError(
                f"Run {run_id} was started with other arguments; resuming needs the same source, group_by, "
                f"features, label and model", hint="Call train_groups with the arguments stored in groupml.runs.")
        done = {g["k"] for g in session.query(
            "SELECT group_key::text AS k FROM groupml.models WHERE run_id = $1", [run_id], ["bigint"])}
        session.query("UPDATE groupml.runs SET status = 'running' WHERE run_id = $1", [run_id], ["bigint"])
        if executor:
            session.query("INSERT INTO groupml.grouped_runs (run_id, strategy, workers) VALUES ($1, $2, $3) "
                          "ON CONFLICT (run_id) DO UPDATE SET workers = EXCLUDED.workers",
                          [run_id, strategy, workers], ["bigint", "text", "integer"])
    session.commit()

    if executor:
        from ..executor.run import run_grouped

        run_grouped(session, run_id=run_id, source=source, group_by=group_by, features=features, label=label,
                    cols=cols, model=model, search=search_obj, fit_options=fit_options, exec_options=exec_options,
                    workers=workers, strategy=strategy, family=family, spec=spec, opts=opts, store=_store)
        return {"run_id": run_id}

    from .search import load_cost_model, record_fit_cost

    started = time.time()
    cost_model = load_cost_model(session, model)
    estimated = 0.0
    blocks = _load_blocks(session, source, group_by, features, label, cols)
    session.query("UPDATE groupml.runs SET n_groups = $2 WHERE run_id = $1", [run_id, len(blocks)],
                  ["bigint", "integer"])
    d = len(features)
    jobs = [b for b in blocks if b["gkey"] not in done and json.dumps(json.loads(b["gkey"])) not in done]
    jobs.sort(key=lambda b: -int(b["n_rows"]))  # largest first, so no big group starts last (LPT)

    def fit(b, check):
        raw = b["block"] or b""
        arr = np.frombuffer(raw, dtype=">f8").astype(np.float64).reshape(-1, d + 1)
        return fit_group(np.ascontiguousarray(arr[:, :d]), arr[:, d].copy(), model, search_obj, options_obj,
                         n_skipped=int(b["n_rows"]) - arr.shape[0], interrupt_check=check, cost_model=cost_model)

    finished = len(blocks) - len(jobs)
    with contextlib.closing(_fit_all(session, jobs, fit, threads)) as results:
        for b, result in results:
            _store(session, run_id, b["gkey"], result)
            record_fit_cost(session, result, source="train_groups")
            estimated += result.estimated_seconds or 0.0
            session.query("UPDATE groupml.runs SET groups_done = groups_done + 1 WHERE run_id = $1",
                          [run_id], ["bigint"])
            finished += 1
            session.notice(f"groupml: group {finished}/{len(blocks)} {b['gkey']}: {result.status}"
                           + (f", {result.metric} {result.score:.4f}" if result.score is not None else ""))
            session.commit()
    session.query("UPDATE groupml.runs SET status = 'done', finished_at = clock_timestamp(), "
                  "seconds = coalesce(seconds, 0) + $2, "
                  "estimated_seconds = coalesce(estimated_seconds, 0) + $3 WHERE run_id = $1",
                  [run_id, time.time() - started, estimated], ["bigint", "float8", "float8"])
    session.commit()
    return {"run_id": run_id}


@sql_entry
def explain_train_groups(source, group_by, features, label, model, search, options, workers, strategy):
    """Rows (strategy, chosen, worker, estimated_seconds, shards, explanation); reads group sizes only."""
    from ..executor.plan import make_plan, placement_for, workload_of
    from ..executor.run import split_options

    session = backend_session()
    workers, strategy = _check_workers(workers, strategy)
    search_obj, options_obj, cols, group_by, features = _validate(session, source, group_by, features, label,
                                                                  model, search, options)
    from ..executor.patterns import check_strategy, pattern_of

    fit_options, exec_options = split_options(options_obj)
    family, spec, opts = _validate_model(model, search_obj, fit_options)
    pattern = pattern_of(family)
    check_strategy(pattern, strategy, model)
    gkey = ("pg_catalog.jsonb_build_object(" + ", ".join(f"{_lit(g)}, {quote_ident(g)}" for g in group_by)
            + ")") if group_by else "'{}'::jsonb"
    notnull = " AND ".join(f"{quote_ident(c)} IS NOT NULL" for c in list(features) + [label])
    group_clause = (" GROUP BY " + ", ".join(quote_ident(g) for g in group_by)
                    + " ORDER BY " + ", ".join(quote_ident(g) for g in group_by)) if group_by else ""
    rows = session.query(f"SELECT {gkey}::text AS gkey, count(*) FILTER (WHERE {notnull}) AS n FROM {source}"
                         f"{group_clause}")
    frac = opts["validation_fraction"]
    sizes = {i: int(round(int(r["n"]) * (1 - frac))) for i, r in enumerate(rows)}
    keys = {i: r["gkey"] for i, r in enumerate(rows)}
    wl = workload_of(spec, family)
    from ..executor.costs import load_calibration

    cal = load_calibration(session, model=model, pattern=pattern, source=source, features=features, search=search_obj,
                           d=len(features), n_configs=wl["n_configs"])
    plan = make_plan(sizes, wl["n_configs"], wl["epochs"], workers, strategy, pattern=pattern, blocks=wl["blocks"],
                     calibration=cal)
    how = {"algebraic": "algebraic pattern (GAP: partial gradients of a group's shards summed, one update per "
                        "pass)",
           "sequential": "sequential pattern (a split group's configs hop from shard to shard within an epoch, "
                         "never on two workers at once; unsplit groups train on one worker)",
           "sampling": "sampling pattern (a split group is trained by LightGBM's own data-parallel mode across "
                       "the workers holding its shards; unsplit groups train on one worker)"}[pattern]
    if pattern != "algebraic" and plan.strategy in ("mtp", "dp"):
        how += {("sequential", "mtp"): "; MTP: each config's epoch block is one task on a worker holding a copy of "
                                       "the whole group",
                ("sequential", "dp"): "; DP: every group split over all workers, one synchronous round of partial "
                                      "gradients per mini-batch step, the update applied by the coordinator",
                ("sampling", "mtp"): "; MTP: each config's whole boosting run is one task on a worker holding a "
                                     "copy of the group",
                ("sampling", "dp"): "; DP: every group split over all workers, one LightGBM data-parallel job "
                                    "per config"}[(pattern, plan.strategy)]
    out = []
    for name, est in plan.estimates.items():
        chosen = name == plan.strategy
        pl = placement_for(name, sizes, workers, pattern,
                           plan=plan if exec_options["placement"] == "auto" else None) if chosen else None
        for w, secs in enumerate(est.per_worker):
            shards = None
            if pl is not None:
                shards = json.dumps([{"group": json.loads(keys[sh.group]), "start": sh.start, "rows": sh.rows}
                                     for sh in pl.workers[w]] if name != "mtp" else
                                    [{"group": json.loads(keys[g]), "copy": True} for g in sizes])
            out.append({"strategy": name, "chosen": chosen, "worker": w, "estimated_seconds": float(secs),
                        "shards": shards,
                        "explanation": f"{how}: {plan.explanation}" if chosen else
                        f"{name}: estimated makespan {est.makespan:.3g} s"})
    out.sort(key=lambda r: (not r["chosen"], r["strategy"], r["worker"]))
    return out


def _validate_model(model, search_obj, fit_options):
    """validate_request for the executor: GLMs as before, MLP and LightGBM families too."""
    from ..fitting import validate_request
    from ..learners import LEARNER_FAMILIES, access_pattern

    if isinstance(model, str) and model in LEARNER_FAMILIES and access_pattern(model) != "algebraic":
        from ..executor.patterns import validate_any
        return validate_any(model, search_obj, fit_options)
    return validate_request(model, search_obj, fit_options)


@sql_entry
def gap_task(request, blob):
    from ..executor.worker import gap_task as _task

    return _task(backend_session(), request, blob)


@sql_entry
def gap_partial(request, theta):
    from ..executor.worker import gap_partial as _gap

    return _gap(backend_session(), request, theta)


def _store(session, run_id, gkey: str, result) -> None:
    row = result.as_sql()
    session.query(
        "INSERT INTO groupml.models (run_id, group_key, fit) VALUES ($1, $2::jsonb, "
        "ROW($3, $4, $5::jsonb, $6, $7, $8::jsonb, $9, $10, $11, $12, $13::jsonb, $14, $15)::groupml.fit)",
        [run_id, gkey, row["status"], row["family"], row["params"], row["metric"], row["score"], row["metrics"],
         row["n_train"], row["n_validation"], row["n_skipped"], row["n_features"], row["trials"], row["message"],
         row["model"]],
        ["bigint", "text", "text", "text", "text", "text", "float8", "text", "bigint", "bigint", "bigint",
         "integer", "text", "text", "bytea"])
    for t in result.trials:
        session.query(
            "INSERT INTO groupml.trials (run_id, group_key, trial_id, params, status, stop_reason, score, "
            "epoch_scores, metrics) VALUES ($1, $2::jsonb, $3, $4::jsonb, $5, $6, $7, $8, $9::jsonb)",
            [run_id, gkey, t["trial_id"], json.dumps(t["params"]), t["status"], t["stop_reason"],
             _num(t["score"]), [_num(v) for v in t["epoch_losses"]],
             json.dumps({k: t.get(k) for k in ("passes", "seconds", "iterations", "is_best")})],
            ["bigint", "text", "integer", "text", "text", "text", "float8", "float8[]", "text"])


def _num(v):
    return None if v is None or not np.isfinite(v) else float(v)
