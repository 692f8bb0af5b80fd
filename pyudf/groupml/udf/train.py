"""train_groups: train and select one model per group of a table, into the catalog.

One scan loads every group as a packed block of native doubles (``groupml._pack_values``, a C
aggregate) into the load arena, a memory file: PL/Python receives where each group's rows are,
and the helpers map them without a copy. Groups are then trained, largest first, by a few helper processes of this
backend (:mod:`groupml.procpool`; option ``processes``, automatic for tables of
``MIN_ROWS_FOR_HELPERS`` rows or more) or, for small tables, in the backend one after
another. The backend's main thread stores each group's model and trials and commits as
the group finishes, so a crash or cancel loses at most the groups in flight, and calling
again with the same run_id resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import time
from typing import Any, Dict, List, Optional


from .. import catalog
from ..catalog import KEY_SETTINGS, RUN_LOCK_CLASS
from ..db import backend_session, quote_ident, quote_literal
from ..procpool import MAX_PROCESSES
from ..validation import check_number, shown
from ..errors import (DataError, FeatureNotSupportedError, GroupmlError, InvalidParameterError, ObjectInUseError,
                      UndefinedObjectError)
from ..learners import wrap_transformed
from ._catalog import check_catalog_privileges
from ..sourcesql import (check_distinct_group_keys, check_group_keys, check_training_source, columns,
                         group_clause_sql, group_key_sql, native_scan_sql, reading_source,
                         source_oid)
from ._transform import check_no_kept_snapshot, feature_specs, needs_transform, run_transform, transform_option
from . import modelsets, parse_object, pinned, sql_entry

OWNER = "train_groups"


def _load_blocks(session, source: str, group_by, features, label, cols, transform=None, *, keep):
    """One row per group: gkey, n_rows and block, a :class:`~groupml.procpool.SharedBlock` of
    its rows in the load arena (native float8, features then label;
    :func:`~groupml.sourcesql.native_scan_sql`). The arena's descriptor, duplicated before the
    loading transaction ends (which closes the backend's own), is closed by ``keep`` (an
    ExitStack the caller leaves once the groups are trained)."""
    from ..procpool import SharedBlock
    from ..transforms.sql import encode_exprs

    sql = native_scan_sql(source, group_by, features, label, cols,
                          feature_exprs=encode_exprs(transform) if transform else None)
    with reading_source(session, source, OWNER):    # the source's views may name their tables bare
        rows = session.query(sql)
    fds = {int(r["block"][0]) for r in rows if int(r["block"][2]) > 0}
    if len(fds) > 1:
        raise RuntimeError(f"one load wrote to several memory files: {sorted(fds)}")
    fd = os.dup(fds.pop()) if fds else -1
    if fd >= 0:
        keep.callback(os.close, fd)
    for r in rows:
        r["block"] = SharedBlock(fd, int(r["block"][1]), int(r["block"][2]))
    return rows


def _validate(session, oid, group_by, features, label, model, search, options):
    """Checks of a train_groups request on relation ``oid`` (run under the pinned search_path);
    returns its schema-qualified name with the parsed arguments."""
    search_obj = parse_object(search, "search", OWNER)
    options_obj = parse_object(options, "options", OWNER)
    raw = transform_option(options_obj)         # taken out of the options: the run stores its transform

    def encodable(source, cols, feats):         # 0A000 for a type no transform encodes
        if needs_transform(raw, cols, feats):
            feature_specs(session, source, feats)
    source, cols, group_by, features = check_training_source(session, oid, group_by, features, label, OWNER,
                                                             label_example="label => 'clicked'",
                                                             numeric_features=raw is False, check_features=encodable)
    return source, search_obj, options_obj, cols, group_by, features, raw


def _mop_search(model, search_obj, strategy: str):
    """The search a run trains: under strategy 'mop' a GLM's says solver 'sgd' (model hopper
    parallelism trains GLMs by mini-batch SGD, :func:`groupml.learners.glmsgd.mop_search`),
    and one SGD cannot honour is refused; any other search is unchanged."""
    from ..learners import FAMILIES, glmsgd

    if strategy != "mop" or not isinstance(model, str) or model not in FAMILIES:
        return search_obj
    return glmsgd.mop_search(model, search_obj)


def _check_workers(workers, strategy):
    from ..executor.plan import STRATEGY_CHOICES
    from ..validation import check_choice, check_number

    workers = check_number(1 if workers is None else workers, "workers", OWNER, ge=0, le=64, integer=True,
                           hint="Use workers => 1 for one backend, up to 64 worker backends, or 0 to let the "
                                "planner choose.")
    strategy = check_choice("auto" if strategy is None else strategy, "strategy", OWNER, STRATEGY_CHOICES,
                            hint="auto picks the cheapest by the planner's cost model.")
    return workers, strategy


# Below this many rows, starting helper processes (about 0.3 s of imports each, in
# parallel with loading) costs more than training the groups in the backend saves.
MIN_ROWS_FOR_HELPERS = 20_000


#: Whose options the messages about train_groups' options name.
OPTIONS = "train_groups options"


def _check_option_keys(options: dict, executor: bool) -> None:
    """train_groups' own option keys: the fitting options, then 'processes' for a run in this
    backend or the executor's keys for a run on worker backends (the messages name
    train_groups' own keys, not learn_over_groups' options)."""
    from ..executor.run import EXEC_KEYS
    from ..fitting import OPTION_KEYS
    from ..validation import check_keys

    fit_keys = [k for k in OPTION_KEYS if k != "threads"]
    if not executor:
        for k in options:
            if k in EXEC_KEYS:
                raise InvalidParameterError(
                    f"The '{k}' option of train_groups applies to runs on worker backends; got it with workers => 1 "
                    f"and strategy 'auto'", hint="Pass workers => 2 (or more), or a strategy, to use it; or drop it.")
    # 'processes' is one backend's (with workers it is refused before, with its own message)
    allowed = fit_keys + (list(EXEC_KEYS) if executor else ["processes"])
    check_keys(options, OPTIONS, allowed, cls=InvalidParameterError,
               hint="See SELECT groupml.help('train_groups') for the options.")


def _processes_option(options: dict, executor: bool = False):
    """The ``processes`` option (None: automatic); ``threads`` belongs to learn_over_groups."""
    if "threads" in options:
        if executor:
            raise InvalidParameterError(
                "train_groups options take no 'threads': 'threads' is learn_over_groups' option",
                hint="With workers the worker backends train in parallel: drop 'threads'.")
        raise InvalidParameterError(
            "train_groups options take 'processes', not 'threads'",
            hint="train_groups trains groups in helper processes: {\"processes\": 2}; 'threads' is "
                 "learn_over_groups' option.")
    if options.get("processes") is None:
        return None
    return check_number(options["processes"], "processes", "train_groups options", ge=1, le=MAX_PROCESSES,
                        integer=True,
                        hint=f"Groups trained at the same time by helper processes of this backend; default "
                             f"min(CPUs, {MAX_PROCESSES}) for tables of {MIN_ROWS_FOR_HELPERS:,} rows or more; "
                             f"1 trains them in the backend, one after another.")


def _helper_count(processes, n_rows) -> int:
    """Helper processes to use for ``n_rows`` rows (an estimate, or None if unknown)."""
    if processes is not None:
        return processes
    if n_rows is None or n_rows < MIN_ROWS_FOR_HELPERS:
        return 1
    return max(1, min(os.cpu_count() or 1, MAX_PROCESSES))


def _start_helpers(n: int):
    """A :class:`~groupml.procpool.HelperPool` of ``n`` processes, or None (n = 1, or no
    Python interpreter to run them with)."""
    from ..procpool import HelperPool, helper_python

    python = helper_python() if n > 1 else None
    return HelperPool(n, python) if python else None


def _estimated_rows(session, source: str):
    """The planner's row estimate of ``source`` (None before its first ANALYZE)."""
    got = session.query("SELECT c.reltuples::float8 AS n FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass",
                        [source], ["text"])
    n = got[0]["n"] if got else None
    return None if n is None or n < 0 else n


def _width(transform, features) -> int:
    """Features per row: the transform's encoded width, else the feature columns."""
    return transform.width if transform is not None else len(features)


#: the byte order of the blocks _pack_rows packs (the server's own)
NATIVE = "=f8"


def _is_done(gkey: str, done) -> bool:
    return gkey in done or json.dumps(json.loads(gkey)) in done


def _todo(blocks, done):
    """The loaded groups not in ``done``, largest first (LPT: no big group starts last)."""
    return sorted((b for b in blocks if not _is_done(b["gkey"], done)), key=lambda b: -int(b["n_rows"]))


def _fit_all(session, jobs, d, model, search, options, cost_model, helpers):
    """Yield (job, FitResult) as groups finish: in the helper processes when ``helpers``
    is a pool, else in the backend one after another.  Either way only the backend's main
    thread -- this generator's consumer -- touches the database, and it checks for cancel
    at least every 0.25 s (the backend's own training: after every data pass)."""
    from threadpoolctl import threadpool_limits

    from ..fitting import fit_packed

    if helpers is None:
        with threadpool_limits(1):
            for job in jobs:
                with job["block"].view() as raw:
                    result = fit_packed(raw, job["n_rows"], d, model, search, options, cost_model,
                                        interrupt_check=session.check_cancel, dtype=NATIVE)
                yield job, result
        return
    for i, job in enumerate(jobs):
        helpers.submit(i, functools.partial(fit_packed, dtype=NATIVE), job["block"], job["n_rows"], d, model,
                       search, options, cost_model)
    for i, result in helpers.results(session.check_cancel):
        yield jobs[i], result


def _check_executor_request(session, source, group_by, features, label, model, search_obj, options_obj, strategy,
                            on_workers: bool = True):
    """The checks of a train_groups run on worker backends (workers > 1 or a strategy), shared
    with explain_train_groups so the plan is refused exactly when the run would be: the model and
    search for the family's access pattern, the strategy, and -- ``on_workers`` -- a source the
    workers can see (not a temporary table), no sgd for GLMs but under strategy 'mop', and a named
    snapshot that matches the arguments. Returns (fit_options, exec_options, family, spec, opts, pattern)."""
    from ..executor.glm import uses_sgd
    from ..executor.core import check_strategy, pattern_of
    from ..executor.pool import check_source_visible
    from ..executor.run import split_options

    from ..learners import mentions_model

    if on_workers and mentions_model(search_obj):
        raise FeatureNotSupportedError(
            "A search that chooses the model family ('model' in its space) trains in one backend; train_groups "
            "with workers or a strategy runs one family per run",
            hint="Use workers => 1 and strategy 'auto', or one run per family.")
    fit_options, exec_options = split_options(options_obj)
    family, spec, opts = _validate_model(model, search_obj, fit_options)
    pattern = pattern_of(family)
    check_strategy(pattern, strategy, model)
    if not on_workers:
        return fit_options, exec_options, family, spec, opts, pattern
    check_source_visible(session, source)
    if pattern == "algebraic" and strategy != "mop" and uses_sgd(search_obj):
        raise FeatureNotSupportedError(
            "solver 'sgd' needs a group's rows in one process; train_groups with workers runs full-batch "
            "solvers (lbfgs, gd), or SGD over partitions under strategy 'mop'",
            hint="Use solver 'lbfgs' or 'gd', strategy => 'mop', or workers => 1.")
    if exec_options["snapshot"] is not None:         # before the run exists: a bad one writes nothing
        from ..executor.snapshot import check_snapshot
        check_snapshot(session, exec_options["snapshot"], source, group_by, features, label, opts["seed"],
                       opts["validation_fraction"])
    return fit_options, exec_options, family, spec, opts, pattern


def _check_options(session, source, group_by, features, label, model, search_obj, options_obj, workers, strategy):
    """train_groups' options as a run with these workers and strategy takes them -- shared
    with explain_train_groups, so that both accept and refuse the same keys. Returns
    (processes, the options without 'processes', what :func:`_check_executor_request` returns)."""
    executor = workers != 1 or strategy != "auto"
    processes = _processes_option(options_obj, executor)
    if executor and processes is not None:
        raise InvalidParameterError(
            f"The 'processes' option of train_groups applies to workers => 1 and strategy 'auto'; got "
            f"workers => {workers}, strategy '{strategy}'",
            hint="Worker backends already train in parallel: drop 'processes', or use workers => 1.")
    _check_option_keys(options_obj, executor)
    options_obj = {k: v for k, v in options_obj.items() if k != "processes"}
    return processes, options_obj, _check_executor_request(
        session, source, group_by, features, label, model, search_obj, options_obj, strategy, on_workers=executor)


@sql_entry
def train_groups(source, group_by, features, label, model, search, options, run_id, workers=1, strategy="auto",
                 model_set=None):
    session = backend_session()
    workers, strategy = _check_workers(workers, strategy)
    oid = source_oid(session, source, OWNER)
    with session.pinned_search_path():
        return _train_groups(session, oid, group_by, features, label, model, search, options, run_id, workers,
                             strategy, model_set)


def _train_groups(session, oid, group_by, features, label, model, search, options, run_id, workers, strategy,
                  model_set=None):
    from ..fitting import validate_request

    check_catalog_privileges(session, "train_groups" if workers == 1 and strategy == "auto"
                             else "train_groups with workers or a strategy")
    source, search_obj, options_obj, cols, group_by, features, raw = _validate(session, oid, group_by, features,
                                                                               label, model, search, options)
    search_obj = _mop_search(model, search_obj, strategy)
    if needs_transform(raw, cols, features):
        check_no_kept_snapshot(options_obj)
    holders = _holders_of(session, source, strategy)
    if holders is not None:             # a distributed source: one worker per shard, on its node
        if needs_transform(raw, cols, features):
            raise FeatureNotSupportedError(
                f"train_groups on the distributed table {source} takes numeric and boolean features only; "
                "a raw-column transform is not built on the nodes",
                hint="Encode the columns in a view on each node, or train from a local copy of the rows.")
        if "replicas" in options_obj:
            raise InvalidParameterError(
                f"The 'replicas' option of train_groups does not apply to the distributed table {source}: the copies "
                f"of its shards are their placements on the nodes", hint="Drop 'replicas'; a Citus table created "
                "with citus.shard_replication_factor = 2 gives every shard a second placement the run may use.")
        workers, strategy = len(holders), "mop" if strategy == "mop" else "grouped"
    executor = workers != 1 or strategy != "auto"
    processes, options_obj, (fit_options, exec_options, family, spec, opts, pattern) = _check_options(
        session, source, group_by, features, label, model, search_obj, options_obj, workers, strategy)
    if holders is not None:
        from ..executor.nodes import check_grouping, check_node_strategy
        check_node_strategy(pattern, strategy, source)
        check_grouping(pattern, group_by, _key_columns(session, source, holders), source)
    backend = executor and holders is None and _may_run_in_backend(strategy, options_obj, run_id)
    inputs = _plan_inputs(session, source, group_by, features, label, model, search_obj, exec_options, family, spec,
                          opts, pattern, imputed=needs_transform(raw, cols, features),
                          calibrate=backend) if workers == 0 or backend else None
    if workers == 0:
        workers, why = _auto_workers(session, inputs, strategy, exec_options, pattern)
        session.notice(f"groupml: {why}")
    if executor and holders is None:
        # every executor run connects its workers, one included (workers => 0 may choose 1); checked
        # before the one-backend choice, so a call is refused or not whatever the planner prices
        from ..executor.pool import check_endpoints
        check_endpoints(session, workers)
    if backend:
        choice = _backend_choice(session, inputs, workers, strategy, exec_options, pattern, len(features))
        session.notice(f"groupml: {choice['explanation']}")
        if choice["backend"]:
            executor, processes = False, choice["one_estimate"].details["helpers"]
    if not executor:
        exec_options, fit_options = None, options_obj
        validate_request(model, search_obj, options_obj, OPTIONS)
    model_set = modelsets.check_publishing(session, model_set, source, group_by)      # before the run exists

    with _attempt(session, run_id, source, group_by, features, label, model, search_obj, options_obj,
                  (strategy, workers) if executor else None) as (run_id, done), \
            _failed_run_on_error(session, run_id, _executor_args(workers, strategy) if executor else None):
        modelsets.publish_pending(session, run_id, model_set)       # ready and active when the run is done
        transform = run_transform(session, run_id, source, features, label, raw, cols, model)
        session.commit()
        store = functools.partial(_store, transform=transform)
        if executor:
            from ..executor.run import run_grouped

            run_grouped(session, run_id=run_id, source=source, group_by=group_by, features=features, label=label,
                        cols=cols, model=model, search=search_obj, fit_options=fit_options, exec_options=exec_options,
                        workers=workers, strategy=strategy, family=family, spec=spec, opts=opts, store=store,
                        transform=transform, holders=holders)
            return {"run_id": run_id}
        _train_in_backend(session, run_id, done, source, group_by, features, label, cols, model, search_obj,
                          options_obj, processes, transform, store)
        return {"run_id": run_id}


def _holders_of(session, source: str, strategy: str):
    """The holders of a Citus distributed source (its shards on their nodes), else None. Such
    a run trains where the rows are: the strategy is the data's placement ('auto' or
    'grouped'), or model hopping over the shards ('mop'); the workers are its shards."""
    from ..executor.nodes import citus_holders, fdw_holders, has_foreign_partitions, is_distributed

    citus = is_distributed(session, source)
    if not citus and not has_foreign_partitions(session, source):
        return None
    if strategy not in ("auto", "grouped", "mop"):
        raise FeatureNotSupportedError(
            f"The 'strategy' value of train_groups on the distributed table {source} must be 'auto', 'grouped' or "
            f"'mop'; got '{strategy}'",
            hint="A distributed table trains where its shards are (each group on the nodes holding its rows; 'mop': "
                 "MLP states hop between the shards); omit strategy, or copy the rows into a local table to compare "
                 "strategies.")
    return citus_holders(session, source) if citus else fdw_holders(session, source)


def _key_columns(session, source: str, holders):
    """The columns whose groups lie in one holder: the distribution column (Citus) or the
    partition key's columns (postgres_fdw)."""
    if holders and holders[0].server is not None:
        rows = session.query("SELECT a.attname::text AS col FROM pg_catalog.pg_partitioned_table p, "
                             "pg_catalog.unnest(p.partattrs) k JOIN pg_catalog.pg_attribute a ON a.attnum = k "
                             "WHERE p.partrelid = $1::regclass AND a.attrelid = p.partrelid", [source], ["text"])
        return [r["col"] for r in rows]
    from ..shards import citus_shard_map
    return [citus_shard_map(session, source).distribution_column]


def _what_decides(model, search, options):
    """(search spec, fit options) of a run as they decide its models: normalised (defaults
    filled in), without the options that only say how it runs."""
    from ..executor.run import EXEC_KEYS
    from ..fitting import validate_request

    fit = {k: v for k, v in (options or {}).items() if k not in EXEC_KEYS and k != "processes"}
    family, spec, opts = validate_request(model, search, fit, OPTIONS)
    return spec.to_dict(), {"validation_fraction": opts["validation_fraction"], "seed": opts["seed"],
                            "metric": opts["metric"] or family.default_metric}


#: group-by types whose JSON text no key setting changes (arrays of them too)
_SETTING_FREE_TYPES = frozenset({"smallint", "integer", "bigint", "numeric", "text", "character varying", "character",
                                 "name", "boolean", "date", "uuid", "timestamp without time zone",
                                 "time without time zone", "bytea", "jsonb", "json"})


def _key_setting_names(types) -> List[str]:
    """The key settings a run's group keys of these column types depend on (all of them for
    a type not known here)."""
    need = set()
    for t in types:
        base = t[:-2] if t.endswith("[]") else t
        if base.endswith("with time zone"):
            need.add("TimeZone")
        elif base.startswith("interval"):
            need.add("IntervalStyle")
        elif base in ("real", "double precision"):
            need.add("extra_float_digits")
        elif base not in _SETTING_FREE_TYPES:
            return list(KEY_SETTINGS)
    return sorted(need)


def _check_key_settings(session, run_id: int, source: str, group_by) -> None:
    """A run resumes under the settings its group keys were written in: a timestamptz key
    under another TimeZone (or a float under other extra_float_digits) is another key, and the
    groups already stored were trained and stored again (two models of one group). Only the
    settings the group-by columns' types depend on count (an integer key resumes anywhere)."""
    cols = columns(session, source)
    names = _key_setting_names([cols.get(g, "unknown") for g in group_by])
    if not names:
        return
    rows = catalog.changed_key_settings(session, run_id, names)
    if rows:
        diff = ", ".join(f"{r['name']} {r['was']!r} (this session: {r['now']!r})" for r in rows)
        sets = " ".join(f"SET {r['name']} = {quote_literal(r['was'])};" for r in rows)
        raise InvalidParameterError(
            f"Run {run_id} wrote its group keys under {diff}; resumed under other settings the same groups would "
            f"get other keys and be trained again",
            hint=f"{sets} Then call train_groups again with run_id => {run_id}.")


def _executor_args(workers: int, strategy: Optional[str]) -> str:
    """The arguments that send a resumed call to worker backends again, as a hint writes them
    (one worker needs a strategy, else the call trains in one backend)."""
    if workers > 1:
        return f"workers => {workers}"
    return f"workers => {workers}, strategy => '{strategy if strategy and strategy != 'auto' else 'grouped'}'"


def _recorded_executor(session, run_id: int):
    """(the :func:`_executor_args` the run was recorded with -- the strategy the planner chose,
    with ``workers => 0`` the count it chose --, the run's status), or None for a run no
    worker backend trained."""
    r = catalog.recorded_executor(session, run_id)
    return (_executor_args(int(r["workers"]), r["strategy"]), r["status"]) if r else None


def _stored_executor_args(session, run_id: int) -> Optional[str]:
    """:func:`_recorded_executor`'s arguments, or None when they cannot be read now."""
    try:
        recorded = _recorded_executor(session, run_id)
    except Exception:  # noqa: BLE001 - only while another error propagates; the caller's text is used
        return None
    return recorded[0] if recorded else None


def _check_not_an_executor_run(session, run_id: int) -> None:
    """A run that worker backends trained resumes on worker backends: its snapshot, epoch
    checkpoints and schedule belong to the executor, which a one-backend call would neither
    use nor clean up (it retrained every open group and left them behind). A finished one is
    refused too: a one-backend call reads the live source, and would add groups that appeared
    since to a run whose record is the executor's."""
    recorded = _recorded_executor(session, run_id)
    if recorded:
        args, status = recorded
        why = ("it is done, and a call in one backend would read the live source and add the groups that appeared "
               "since to a run the executor recorded") if status == "done" else \
            "it resumes only on worker backends, where its snapshot and epoch checkpoints are"
        raise InvalidParameterError(
            f"Run {run_id} was trained by worker backends ({args}); {why}",
            hint=f"Call train_groups again with run_id => {run_id}, {args} (another worker count from 2, or a "
                 f"strategy with 1, resumes it too).")


@contextlib.contextmanager
def _attempt(session, run_id, source, group_by, features, label, model, search_obj, options_obj, grouped):
    """One call's attempt at a run: a new run's rows (``run_id`` None) or the checked and
    claimed existing run, committed; yields (run id, keys of the groups already stored).
    ``grouped``: (strategy, workers) of an executor run, else None. The run is claimed for this
    session (:func:`_claim_run`) until the attempt ends, however it ends."""
    done, claimed = set(), None
    try:
        if run_id is None:
            run_id = catalog.insert_run(session, source=source, group_by=group_by, features=features, label=label,
                                        model=model, search=search_obj, options=options_obj)
            claimed = _claim_run(session, run_id)
        else:
            r = catalog.run_arguments(session, run_id)
            if r is None:
                raise UndefinedObjectError(
                    f"The 'run_id' value of train_groups must name an existing run; got {run_id}",
                    hint="Omit run_id to start a new run; see SELECT * FROM groupml.runs.")
            stored = {"source": r["source"], "group_by": list(r["group_by"]), "features": list(r["features"]),
                      "label": r["label"], "model": r["family"]}
            given = {"source": source, "group_by": list(group_by), "features": list(features), "label": label,
                     "model": model}
            differ = [k for k in stored if stored[k] != given[k]]
            if differ:
                raise InvalidParameterError(
                    f"Run {run_id} was started with other arguments; resuming needs the same source, group_by, "
                    f"features, label and model; these differ: " + "; ".join(
                        f"{k} {shown(stored[k])} (given {shown(given[k])})" for k in differ),
                    hint="Call train_groups with the arguments stored in groupml.runs.")
            was = _what_decides(model, json.loads(r["search"]), json.loads(r["options"]))
            now = _what_decides(model, search_obj, options_obj)
            for what, same in (("search", was[0] == now[0]), ("options", was[1] == now[1])):
                if not same:
                    # groups trained on resume would follow other draws or another split than
                    # the groups already stored, and the run's record would not say so
                    raise InvalidParameterError(
                        f"Run {run_id} was started with {'another search' if what == 'search' else 'other options'}; "
                        f"resuming needs the same search and options (only how it runs may change: processes, "
                        f"progress and the executor's options such as drivers)",
                        hint=f"Pass the {what} stored in groupml.runs: SELECT search, options FROM groupml.runs "
                             f"WHERE run_id = {run_id};")
            _check_key_settings(session, run_id, source, group_by)
            if grouped is None:
                _check_not_an_executor_run(session, run_id)
            claimed = _claim_run(session, run_id)       # before anything of the run is changed
            done = catalog.stored_group_keys(session, run_id)
            catalog.mark_run_running(session, run_id)
        if grouped is not None:
            catalog.upsert_grouped_run(session, run_id, *grouped)
        _close_abandoned_runs(session)              # this call's run is claimed: not among them
        session.commit()
        yield run_id, done
    except BaseException:
        if claimed is not None:
            _release_run(session, claimed, quiet=True)
        raise
    _release_run(session, claimed, quiet=False)


def _train_in_backend(session, run_id, done, source, group_by, features, label, cols, model, search_obj,
                      options_obj, processes, transform=None, store=None) -> None:
    """The groups of the run not in ``done``, trained by this backend (or its helper processes),
    largest first; each group's model and trials are stored and committed as it finishes."""
    from ..executor.run import RunClock
    from ..executor.costs import load_cost_model
    from .search import record_fit_cost

    clock = RunClock(time.time())
    # the model as it was when the run was created, on every attempt: a resumed group gets the
    # batch size (and so the search) it would have had (rows this run records come later)
    cost_model = load_cost_model(session, model, before_run=run_id)
    estimate = _estimated_rows(session, source)
    with contextlib.ExitStack() as stack:
        arena = stack.enter_context(contextlib.ExitStack())     # entered first: closed after the helpers
        # started before the load query, so the helpers' imports overlap it
        helpers = _start_helpers(_helper_count(processes, estimate)) if estimate is not None else None
        if helpers is not None:
            stack.enter_context(helpers)
        blocks = _load_blocks(session, source, group_by, features, label, cols, transform, keep=arena)
        keys = [b["gkey"] for b in blocks]
        check_group_keys(session, keys, len(group_by), OWNER)
        check_distinct_group_keys(session, keys, OWNER)
        catalog.set_run_groups(session, run_id, len(keys))
        clock.charge(session, run_id)           # the loading
        session.commit()        # progress shows the count while the first group trains
        d = _width(transform, features)
        jobs = _todo(blocks, done)
        if helpers is None and estimate is None and len(jobs) > 1:
            helpers = _start_helpers(_helper_count(processes, sum(int(b["n_rows"]) for b in jobs)))
            if helpers is not None:
                stack.enter_context(helpers)
        finished = len(keys) - len(jobs)
        for b, result in _fit_all(session, jobs, d, model, search_obj, options_obj, cost_model, helpers):
            # a run deleted meanwhile would fail the insert on a foreign key; the row lock (until
            # the group's commit) waits out a delete in progress and keeps one from starting
            if not catalog.lock_run_row(session, run_id):
                raise UndefinedObjectError(
                    f"Run {run_id} was deleted while it was being trained; this call stops",
                    hint="Nothing of the run is left (its groups went with it); start a new run.")
            (store or _store)(session, run_id, b["gkey"], result)
            record_fit_cost(session, result, source="train_groups")
            # committed with the group, so a cancelled call's groups keep their times and the two
            # columns cover the same groups (every group of the run) however often it resumed
            # train_seconds: the searches' own time; seconds: the call's wall time so far
            catalog.add_backend_group_done(session, run_id, estimated_seconds=result.estimated_seconds or 0.0,
                                           train_seconds=result.seconds or 0.0, wall_seconds=clock.take()[0])
            finished += 1
            session.notice(f"groupml: group {finished}/{len(keys)} {b['gkey']}: {result.status}"
                           + (f", {result.metric} {result.score:.4f}" if result.score is not None else ""))
            session.commit()
    clock.charge(session, run_id, done=True)
    session.commit()


def _run_lock_keys(run_id: int):
    """(class, key) of ``run_id``'s advisory lock: the run id's low 32 bits as a signed int4."""
    low = int(run_id) & 0xFFFFFFFF
    return RUN_LOCK_CLASS, low - (1 << 32) if low >= 1 << 31 else low


def _close_abandoned_runs(session) -> None:
    """Store 'cancelled' for the runs whose call ended without finishing them (the caller's
    transaction; commits with it), with a NOTICE naming each."""
    for run_id in catalog.close_abandoned_runs(session):
        session.notice(f"groupml: run {run_id} was left running by a call that ended without finishing it "
                       f"(cancelled, or its session ended); it is marked cancelled and resumes with run_id => "
                       f"{run_id}")


def _lock_holders(session, run_id: int, *, mine: bool = False):
    """Pids of the sessions holding ``run_id``'s advisory lock (``mine``: only this one)."""
    cls, key = _run_lock_keys(run_id)
    return catalog.run_lock_holders(session, cls, key & 0xFFFFFFFF, mine=mine)


def _try_run_lock(session, run_id: int, *, xact: bool = False) -> bool:
    """Try ``run_id``'s advisory lock: session-level, or until the transaction ends (``xact``)."""
    fn = "pg_try_advisory_xact_lock" if xact else "pg_try_advisory_lock"
    return session.query(f"SELECT pg_catalog.{fn}($1, $2) AS ok", list(_run_lock_keys(run_id)),
                         ["integer", "integer"])[0]["ok"]


def _claim_run(session, run_id: int) -> int:
    """Hold ``run_id``'s session-level advisory lock for this call (a call commits as it goes,
    so a transaction lock would not last); raise ObjectInUseError if another session holds it,
    i.e. is training the run now. Two calls on one run would train the same groups and write
    over each other's epochs, checkpoints and models. Released by :func:`_release_run` when the
    call ends, however it ends; a backend that dies releases it with its session."""
    if _lock_holders(session, run_id, mine=True):
        return run_id                       # an earlier call of this session could not release it
    for _ in range(2):                      # the holder may end between the try and the lookup
        if _try_run_lock(session, run_id):
            return run_id
        pids = _lock_holders(session, run_id)
        if pids:
            raise ObjectInUseError(
                f"Run {run_id} is being trained by another session (pid {pids[0]}); a run is trained by one "
                f"call at a time",
                hint=f"Wait for that call to end, or stop it with SELECT pg_cancel_backend({pids[0]}); then "
                     f"call train_groups with run_id => {run_id} again to resume.")
    raise ObjectInUseError(f"Run {run_id} is being trained by another session; a run is trained by one call at "
                           f"a time", hint="Wait for that call to end, then call train_groups again.")


def _release_run(session, run_id: int, *, quiet: bool) -> None:
    """Release :func:`_claim_run`'s lock. ``quiet``: the call is ending with an error (a cancel
    included), which is what the caller must see; if the release fails then, the session keeps
    the lock until it ends or calls train_groups on the run again (its own claim passes)."""
    cls, key = _run_lock_keys(run_id)
    try:
        session.query("SELECT pg_catalog.pg_advisory_unlock($1, $2)", [cls, key], ["integer", "integer"])
    except Exception:  # noqa: BLE001 - only while another error propagates, which is raised instead
        if not quiet:
            raise


@sql_entry
@pinned
def drop_snapshot(snapshot_id) -> bool:
    """Delete a snapshot and its groups and blocks; True if it existed. Refused (55006) while
    a call of train_groups in another session trains a run that uses it: that call reads the
    snapshot's blocks on every pass and would fail half-way. Deleting first locks the row
    against a call that is just taking the snapshot (:func:`check_snapshot` locks it until the
    run records it); each run that uses it is then locked until this transaction ends, so no
    call can start on it before the delete is committed (it then builds a fresh snapshot)."""
    sid = check_number(snapshot_id, "snapshot_id", "drop_snapshot", ge=1, integer=True,
                       hint="Pass a snapshot_id of groupml.snapshots.")
    session = backend_session()
    check_catalog_privileges(session, "drop_snapshot")
    gone = catalog.delete_snapshot(session, sid)
    for run_id in catalog.runs_using_snapshot(session, sid):
        if _try_run_lock(session, run_id, xact=True):
            continue
        pids = _lock_holders(session, run_id) or ["unknown"]
        raise ObjectInUseError(
            f"Snapshot {sid} is in use by run {run_id}, which another session is training (pid {pids[0]}); "
            f"a snapshot is dropped when no call uses it",
            hint=f"Wait for that call to end, or stop it with SELECT pg_cancel_backend({pids[0]}); then drop the "
                 f"snapshot again.")
    return bool(gone)


@contextlib.contextmanager
def _failed_run_on_error(session, run_id: int, executor_args: Optional[str] = None):
    """A groupml error after the run's row was committed marks the run failed (not left
    'running' in groupml.progress for good). A data or parameter problem cannot be resumed past
    -- the same rows fail again -- so the run's snapshot is dropped too (unless kept); other
    errors (a lost worker) keep it for ``run_id => ...``. A cancel (SQLSTATE class 57) marks
    it cancelled and keeps everything, for a resume. Any other error -- PostgreSQL's own, say a
    foreign table whose remote table is gone -- marks it failed too."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - re-raised unchanged below
        from ..db import error_parts
        state, first, _, _ = error_parts(exc)
        if (state or "").startswith("57") and not isinstance(exc, GroupmlError):
            # passed on with the same SQLSTATE, naming the run to resume (the INOUT run_id of a
            # cancelled CALL never reaches the caller)
            from ..errors import PassedOnError
            if executor_args:
                executor_args = _stored_executor_args(session, run_id) or executor_args
            again = f"run_id => {run_id}" + (f", {executor_args}" if executor_args else "")
            _mark_run_cancelled(session, run_id)
            raise PassedOnError(state, f"{first}; run {run_id} keeps the groups it committed",
                                hint=f"Call train_groups again with {again} to resume it.") from None
        try:
            catalog.mark_run_failed(session, run_id)
            if isinstance(exc, (DataError, InvalidParameterError)):
                for sid in catalog.run_snapshot_ids(session, run_id):
                    catalog.delete_unkept_snapshot(session, sid)
                    catalog.clear_run_snapshot_if_gone(session, run_id, sid)
            session.commit()
        except Exception:  # noqa: BLE001 - the transaction may be unusable; the original error is what counts
            pass
        raise


def _mark_run_cancelled(session, run_id: int) -> None:
    """A cancelled call's run: status 'cancelled' and its end time, committed. The cancel
    undid only the statement it interrupted (PL/Python runs each in a subtransaction), so
    this call can still write; if it cannot, the run is read as cancelled anyway once this
    call releases it (groupml.progress, :func:`_close_abandoned_runs`)."""
    try:
        catalog.mark_run_cancelled(session, run_id)
        session.commit()
    except Exception:  # noqa: BLE001 - only while the cancel propagates, which is raised instead
        pass


@sql_entry
def explain_train_groups(source, group_by, features, label, model, search, options, workers, strategy):
    """Rows (strategy, chosen, worker, estimated_seconds, shards, explanation); reads group sizes only."""
    session = backend_session()
    workers, strategy = _check_workers(workers, strategy)
    oid = source_oid(session, source, OWNER)
    with session.pinned_search_path():
        return _explain_train_groups(session, oid, group_by, features, label, model, search, options, workers,
                                     strategy)


def _plan_inputs(session, source, group_by, features, label, model, search_obj, exec_options, family, spec, opts,
                 pattern, owner: str = OWNER, imputed: bool = False, calibrate: bool = False) -> Dict[str, Any]:
    """What the planner needs of a request: every group's training rows (a count query over
    the source, NULLs left out), the workload, the calibration and the pass-task limit.
    ``imputed``: a transform imputes NULL features (only a NULL label leaves a row out).
    ``calibrate``: measure this host's GLM passes first when the catalog has none of the
    family (:func:`~groupml.udf.search.ensure_host_calibration`)."""
    from ..executor.costs import base_costs, load_calibration
    from ..executor.plan import pass_task_rows, workload_of
    from .search import ensure_host_calibration

    if calibrate:
        ensure_host_calibration(session, model)

    notnull = " AND ".join(f"{quote_ident(c)} IS NOT NULL" for c in ([] if imputed else list(features)) + [label])
    with reading_source(session, source, owner):
        rows = session.query(f"SELECT {group_key_sql(group_by)}::text AS gkey, pg_catalog.count(*) FILTER "
                             f"(WHERE {notnull}) AS n FROM {source}{group_clause_sql(group_by, source)}")
    frac = opts["validation_fraction"]
    wl = workload_of(spec, family)
    base = base_costs(session, model, pattern, len(features), wl["n_configs"])
    cal = load_calibration(session, model=model, pattern=pattern, source=source, features=features, search=search_obj,
                           d=len(features), n_configs=wl["n_configs"], epochs=wl["epochs"], base=base)
    # one backend is priced with the cost model's unit costs when it has runs (searches timed in
    # backends and their helpers): worker tasks' calibration prices an update with a worker's
    # round trip (0.65 ms measured, against microseconds for a backend's own L-BFGS step)
    return {"sizes": {i: int(round(int(r["n"]) * (1 - frac))) for i, r in enumerate(rows)},
            "keys": {i: r["gkey"] for i, r in enumerate(rows)}, "wl": wl, "frac": frac, "cal": cal, "family": model,
            "one_costs": base[0] if base[1] else cal.costs,
            "max_rows": pass_task_rows(exec_options, len(features), wl["n_configs"], wl["epochs"])}


def _plan_for(inputs, workers: int, strategy: str, exec_options, pattern: str):
    from ..executor.plan import make_plan

    wl = inputs["wl"]
    return make_plan(inputs["sizes"], wl["n_configs"], wl["epochs"], workers, strategy, pattern=pattern,
                     blocks=wl["blocks"], calibration=inputs["cal"], pass_task_rows=inputs["max_rows"],
                     placement=exec_options["placement"])


def _auto_workers(session, inputs, strategy: str, exec_options, pattern: str):
    """``workers => 0``: (the worker count the planner picks, why). Every count from 1 to
    :func:`~groupml.executor.pool.auto_worker_limit` is planned; the fewest whose estimated
    makespan is within 10% of the best wins (TuPAQ's right-sizing, eq. 2, over the
    strategies' calibrated estimates)."""
    from ..executor.pool import auto_worker_limit
    from ..planner import right_size

    top = auto_worker_limit(session)
    times = {}
    for w in range(1, top + 1):
        plan = _plan_for(inputs, w, strategy, exec_options, pattern)
        times[w] = plan.estimates[plan.strategy].makespan
    chosen = right_size(times, 1.1)
    shown = ", ".join(f"{w}: {t:.3g} s" for w, t in times.items())
    return chosen, (f"workers => 0: the planner chose {chosen} worker(s) of up to {top} (estimated makespan {shown}; "
                    f"the fewest within 10% of the best)")


def _may_run_in_backend(strategy: str, options_obj: dict, run_id) -> bool:
    """Whether a call with workers may train in one backend instead: strategy 'auto', a new
    run (a resumed one keeps where it was trained), and no option only worker backends take
    (a snapshot, placement, memory per worker...)."""
    from ..executor.run import EXEC_KEYS

    return strategy == "auto" and run_id is None and not any(k in options_obj for k in EXEC_KEYS)


def _backend_choice(session, inputs, workers: int, strategy: str, exec_options, pattern: str, d: int):
    """:func:`~groupml.planner.choose_backend` for a request: one backend (in the backend
    itself or with the helper processes it would start, whichever is cheaper) against the
    worker plan with its snapshot and coordination, each priced with the unit costs measured
    where it runs (``inputs['one_costs']``, :func:`_plan_inputs`). Adds 'plan' and
    'one_estimate' (the estimates)."""
    from ..executor.costs import host_costs_for
    from ..planner import best_one_backend, choose_backend, executor_overhead

    plan = _plan_for(inputs, workers, strategy, exec_options, pattern)
    host, overhead_runs = host_costs_for(session, inputs["family"])
    n_rows = sum(inputs["sizes"].values())
    helpers = max(1, min(os.cpu_count() or 1, MAX_PROCESSES))
    one = best_one_backend(plan.workload, helpers, inputs["one_costs"], host, d)
    choice = choose_backend(one, plan, executor_overhead(n_rows, d, workers, host), overhead_runs)
    choice.update(plan=plan, one_estimate=one)
    return choice


def _explain_train_groups(session, oid, group_by, features, label, model, search, options, workers, strategy):
    from ..executor.plan import placement_for

    source, search_obj, options_obj, cols, group_by, features, raw = _validate(session, oid, group_by, features,
                                                                               label, model, search, options)
    search_obj = _mop_search(model, search_obj, strategy)
    _, _, (fit_options, exec_options, family, spec, opts, pattern) = _check_options(
        session, source, group_by, features, label, model, search_obj, options_obj, workers, strategy)
    holders = _holders_of(session, source, strategy)
    backend_ok = holders is None and _may_run_in_backend(strategy, options_obj, None)     # as a run would choose
    inputs = _plan_inputs(session, source, group_by, features, label, model, search_obj, exec_options, family, spec,
                          opts, pattern, owner="explain_train_groups", imputed=needs_transform(raw, cols, features),
                          calibrate=backend_ok)
    if holders is not None:
        from ..executor.nodes import check_node_strategy
        check_node_strategy(pattern, strategy, source)
        from ..executor.nodes import check_grouping, explain_on_nodes
        check_grouping(pattern, group_by, _key_columns(session, source, holders), source)
        return explain_on_nodes(session, source, group_by, features, holders, inputs, pattern,
                                validation_fraction=opts["validation_fraction"])
    chose = ""
    if workers == 0:
        workers, chose = _auto_workers(session, inputs, strategy, exec_options, pattern)
        chose += "; "
    sizes, keys, max_rows = inputs["sizes"], inputs["keys"], inputs["max_rows"]
    plan = _plan_for(inputs, workers, strategy, exec_options, pattern)
    backend = _backend_choice(session, inputs, workers, strategy, exec_options, pattern, len(features)) \
        if backend_ok else None
    backend_rows = []
    if backend is not None:
        one = backend["one_estimate"]
        for w, secs in enumerate(one.per_worker):
            backend_rows.append({"strategy": "backend", "chosen": backend["backend"], "worker": w,
                                 "estimated_seconds": float(secs + (one.breakdown.get("load", 0.0) if w == 0 else 0)),
                                 "shards": None, "explanation": chose + backend["explanation"]})
    n_big = sum(1 for n in sizes.values() if n > max_rows)
    if not exec_options["whole_group_tasks"]:
        unsplit = "unsplit groups too, one task per pass)"
    elif n_big:
        unsplit = (f"unsplit groups run their whole search as one task on one worker, except {n_big} above "
                   f"whole_group_max_work, which run a task per pass)")
    else:
        unsplit = "unsplit groups run their whole search as one task on one worker)"
    how = {"algebraic": "algebraic pattern (GAP: partial gradients of a split group's shards summed, one update "
                        "per pass; " + unsplit,
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
    out = backend_rows
    for name, est in plan.estimates.items():
        chosen = name == plan.strategy and not (backend and backend["backend"])
        pl = placement_for(name, sizes, workers, pattern,
                           plan=plan if exec_options["placement"] == "auto" else None) if chosen else None
        for w, secs in enumerate(est.per_worker):
            shards = None
            if pl is not None:
                # the keys are PostgreSQL's JSON text, kept as written: parsed into Python floats a
                # numeric key beyond float64 became Infinity (invalid JSON) and close ones merged
                parts = ([f'{{"group": {keys[sh.group]}, "start": {int(sh.start)}, "rows": {int(sh.rows)}}}'
                          for sh in pl.workers[w]] if name != "mtp" else
                         [f'{{"group": {keys[g]}, "copy": true}}' for g in sizes])
                shards = "[" + ", ".join(parts) + "]"
            out.append({"strategy": name, "chosen": chosen, "worker": w, "estimated_seconds": float(secs),
                        "shards": shards,
                        "explanation": f"{chose}{how}: {plan.explanation}" if chosen else
                        f"{name}: estimated makespan {est.makespan:.3g} s"})
    out.sort(key=lambda r: (not r["chosen"], r["strategy"], r["worker"]))
    return out


def _validate_model(model, search_obj, fit_options):
    """validate_request for the executor: GLMs as before, MLP and LightGBM families too."""
    from ..fitting import validate_request
    from ..learners import LEARNER_FAMILIES, access_pattern

    if isinstance(model, str) and model in LEARNER_FAMILIES and access_pattern(model) != "algebraic":
        from ..executor.core import validate_any
        return validate_any(model, search_obj, fit_options)
    return validate_request(model, search_obj, fit_options, OPTIONS)


@sql_entry
@pinned
def gap_task(request, blob):
    from ..executor.worker import gap_task as _task

    session = backend_session()
    check_catalog_privileges(session, "_gap_task")
    return _task(session, request, blob)


@sql_entry
@pinned
def gap_partial(request, theta):
    from ..executor.worker import gap_partial as _gap

    session = backend_session()
    check_catalog_privileges(session, "_gap_partial")
    return _gap(session, request, theta)


def _store(session, run_id, gkey: str, result, transform=None) -> None:
    """A finished group's model and trials; with a transform, the model carries it (scoring
    applies it to raw columns)."""
    if transform is not None and result.model is not None:
        result = dataclasses.replace(result, model=wrap_transformed(result.model, transform))
    catalog.insert_model(session, run_id, gkey, result)
    for t in result.trials:
        catalog.insert_trial(session, run_id, gkey, t)
