"""SQL entry points of the search engine: cost-model calibration, explain_search, trial_info.

* ``groupml.cost_runs`` holds measured training runs (rows, features, batch size k,
  workers, passes, seconds); :func:`groupml.executor.costs.load_cost_model` refits TuPAQ's
  eq. (1) cost model from them (NNLS, :class:`groupml.planner.CostModel`), :func:`record_cost_run` adds one
  (catalog writers call it after every group), :func:`calibrate_cost_model` measures a
  few real passes on synthetic data so a fresh install has a model.
* :func:`explain_search` prints the plan of a search without training anything.
* :func:`trial_info` expands ``fit.trials`` into rows (BigQuery's ML.TRIAL_INFO).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, Dict, List, Optional

import numpy as np

from .. import catalog
from ..db import quote_ident
from ..executor.costs import load_cost_model
from ..errors import InvalidParameterError
from ..validation import check_keys, check_number, short_int, shown
from ._catalog import check_catalog_privileges
from ..sourcesql import check_training_source, reading_source, source_oid
from . import families_hint, parse_object, pinned, sql_entry

CALIBRATION_SIZES = [  # (rows, features, k): a few seconds in all on one core
    (2000, 10, 1), (2000, 10, 8), (20000, 10, 1), (20000, 10, 8),
    (5000, 100, 1), (5000, 100, 8), (20000, 50, 4), (50000, 20, 2),
]


# ----------------------------------------------------------------------------- cost runs
def record_cost_run(session, *, n, d, k, workers=1, passes, seconds, source, family=None) -> None:
    """Store one measured training run in groupml.cost_runs (``seconds`` is the wall time
    of all ``passes`` data passes over ``n`` rows of ``d`` features with ``k`` configs per
    pass on ``workers`` workers). Invalid measurements (no pass, no time) are ignored, so a
    catalog writer may call this after every group without checks of its own."""
    if passes is None or seconds is None or not passes or passes < 1 or not seconds > 0 or not n:
        return
    owner = "cost run"
    n = check_number(int(n), "n", owner, ge=1, integer=True)
    d = check_number(int(d), "d", owner, ge=1, integer=True)
    k = check_number(max(1, int(round(k or 1))), "k", owner, ge=1, integer=True)
    workers = check_number(int(workers or 1), "workers", owner, ge=1, integer=True)
    passes = check_number(int(passes), "passes", owner, ge=1, integer=True)
    seconds = check_number(float(seconds), "seconds", owner, gt=0)
    catalog.insert_cost_run(session, n=n, d=d, k=k, workers=workers, passes=passes, seconds=seconds, family=family,
                            source=source)


def record_fit_cost(session, result, *, source: str, workers: int = 1) -> None:
    """Record the cost of a :class:`groupml.fitting.FitResult` (no-op when nothing trained).
    A search over model families is not recorded: its passes and seconds are several families'
    (each its own cost per pass), and the model is fitted per family."""
    if any("model" in (t.get("params") or {}) for t in result.trials or []):
        return
    record_cost_run(session, n=result.n_train, d=result.n_features or 1, k=result.mean_batch or 1,
                    workers=workers, passes=result.passes, seconds=result.seconds, source=source,
                    family=result.family)


def _synthetic(n: int, d: int, seed: int):
    rng = np.random.default_rng([seed, n, d])
    X = rng.standard_normal((n, d))
    w = rng.standard_normal(d) / math.sqrt(d)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ w)))).astype(np.float64)
    return X, y


def measure_passes(family: str, n: int, d: int, k: int, passes: int, seed: int = 0, interrupt_check=None):
    """(wall seconds, passes) of ``passes`` batched gradient passes of ``k`` configs over synthetic
    data; ``interrupt_check`` runs after every pass (a cancel)."""
    from ..learners import GLMTrainer

    X, y = _synthetic(n, d, seed)
    if family == "linear":
        y = X[:, 0] + 0.1 * y
    trainer = GLMTrainer(family, X, y)
    trainer.interrupt_check = interrupt_check
    for j in range(k):
        trainer.add(j, {"solver": "gd", "lr": 1e-3, "tol": 1e-300, "max_iter": passes + 1,
                        "l2": 10.0 ** -(j % 6)})
    trainer.run(1)  # warm the workspace
    p0, t0 = trainer.passes, time.perf_counter()
    trainer.run(passes)
    return time.perf_counter() - t0, trainer.passes - p0


#: (rows, features, configs per pass) measured at first use for a GLM family with no cost run
#: yet: about a quarter of a second on one core, enough for the cost model's terms
FIRST_USE_SIZES = ((10000, 10, 1), (10000, 10, 8), (4000, 50, 4), (20000, 20, 2))
FIRST_USE_PASSES = 3
FIRST_USE_SOURCE = "first use"


def ensure_host_calibration(session, family: str) -> bool:
    """At first use of a GLM ``family`` on this database: when ``groupml.cost_runs`` holds no
    run of it, measure :data:`FIRST_USE_SIZES` batched passes on synthetic data here (what
    ``groupml.calibrate_cost_model`` does, smaller) and store them, so the planner's default
    unit costs are this host's. Only a role that may write the catalog stores them, outside a
    read-only transaction; True when measured and stored now."""
    from ..learners import FAMILIES

    if family not in FAMILIES:
        return False
    ok = session.query(
        "SELECT pg_catalog.has_table_privilege('groupml.cost_runs', 'INSERT') AND "
        "pg_catalog.has_sequence_privilege('groupml.cost_runs_run_id_seq', 'USAGE') AND "
        "NOT pg_catalog.current_setting('transaction_read_only')::bool AS ok")[0]["ok"]
    if not ok or catalog.recent_cost_runs(session, 1, family=family):
        return False
    for i, (n, d, k) in enumerate(FIRST_USE_SIZES):
        secs, done = measure_passes(family, n, d, k, FIRST_USE_PASSES, seed=i, interrupt_check=session.check_cancel)
        record_cost_run(session, n=n, d=d, k=k, workers=1, passes=done, seconds=secs, source=FIRST_USE_SOURCE,
                        family=family)
    return True


@sql_entry
@pinned
def calibrate_cost_model(sizes, family, passes):
    """Measure a few real passes, store them in groupml.cost_runs, return them with the refit estimate."""
    from ..db import backend_session
    from ..learners import get_family

    from ..learners import LEARNER_FAMILIES
    from ..learners import FAMILIES
    from ..errors import FeatureNotSupportedError

    owner = "calibrate_cost_model"
    if family in LEARNER_FAMILIES and family not in FAMILIES:
        raise FeatureNotSupportedError(
            f"calibrate_cost_model measures the batched GLM passes (logistic, linear, svm); got model '{family}'",
            hint="The planner's batch size and estimates are for GLM searches; MLP and LightGBM costs come from "
                 "their runs.")
    fam = get_family(family, owner).name
    session = backend_session()
    check_catalog_privileges(session, owner)
    passes = check_number(passes, "passes", owner, ge=1, le=1000, integer=True,
                          hint="A handful of passes per size is enough (default 5).")
    plan = CALIBRATION_SIZES
    if sizes is not None:
        raw = json.loads(sizes) if isinstance(sizes, str) else sizes
        if not isinstance(raw, list) or not raw:
            raise InvalidParameterError(
                f"The 'sizes' value of {owner} must be a non-empty JSON array of objects "
                f"{{\"n\": rows, \"d\": features, \"k\": configs}}; got {json.dumps(raw)}",
                hint='Example: \'[{"n": 10000, "d": 20, "k": 1}, {"n": 10000, "d": 20, "k": 10}]\'')
        plan = []
        for item in raw:
            if not isinstance(item, dict):
                raise InvalidParameterError(
                    f"Every element of {owner} sizes must be an object {{\"n\", \"d\", \"k\"}}; got {json.dumps(item)}",
                    hint='Example: {"n": 10000, "d": 20, "k": 4}')
            check_keys(item, f"{owner} sizes", ("n", "d", "k"), cls=InvalidParameterError,
                       hint='Each size is {"n": rows, "d": features, "k": configurations per pass}.')
            plan.append((check_number(item.get("n"), "n", f"{owner} sizes", ge=2, le=10_000_000, integer=True),
                         check_number(item.get("d"), "d", f"{owner} sizes", ge=1, le=100_000, integer=True),
                         check_number(item.get("k", 1), "k", f"{owner} sizes", ge=1, le=1000, integer=True)))
            if plan[-1][0] * plan[-1][1] > 50_000_000:
                raise InvalidParameterError(
                    f"A calibration size of {owner} must have n*d <= 50000000 values; got n={plan[-1][0]}, "
                    f"d={plan[-1][1]}", hint="Calibrate on smaller synthetic tables; the model extrapolates.")
            if plan[-1][0] * plan[-1][2] > 50_000_000:      # the passes hold n x k margins and residuals
                raise InvalidParameterError(
                    f"A calibration size of {owner} must have n*k <= 50000000 values; got n={plan[-1][0]}, "
                    f"k={plan[-1][2]}", hint="Calibrate on smaller synthetic tables; the model extrapolates.")
    measured = []
    for i, (n, d, k) in enumerate(plan):
        session.check_cancel()
        secs, done = measure_passes(fam, n, d, k, passes, seed=i, interrupt_check=session.check_cancel)
        record_cost_run(session, n=n, d=d, k=k, workers=1, passes=done, seconds=secs,
                        source="calibrate_cost_model", family=fam)
        measured.append((n, d, k, done, secs))
    model = load_cost_model(session, fam)
    return [{"n": n, "d": d, "k": k, "measured_passes": p, "seconds_per_pass": s / p,
             "estimated_seconds_per_pass": model.predict(n, d, k)} for n, d, k, p, s in measured]


# ----------------------------------------------------------------------------- explain_search
def _fmt_s(x: float) -> str:
    if x < 1:
        return f"{x * 1000:.3g} ms"
    if x < 120:
        return f"{x:.3g} s"
    if x < 7200:
        return f"{x / 60:.3g} min"
    return f"{x / 3600:.3g} h"


def explain_plan(model: str, search: dict, options: dict, *, n_groups: int, n_rows: int, largest: int,
                 d: int, cost_model) -> List[Dict[str, Any]]:
    """The rows of explain_search for given group statistics (pure: no database)."""
    from ..fitting import plan_group, validate_request

    family, spec, opts = validate_request(model, search, options)
    vf = opts["validation_fraction"]
    rows: List[Dict[str, Any]] = []

    def add(item, value, detail=None):
        rows.append({"item": item, "value": None if value is None else str(value), "detail": detail})

    from ..learners import chosen_families

    families = chosen_families(spec.space)
    add("model", family.name if families is None else "choice: " + ", ".join(
        dict.fromkeys([family.name] + [str(f) for f in families])),
        f"metric {opts['metric'] or family.default_metric} on a {vf:g} validation holdout"
        + ("" if families is None else f"; the search chooses the family: the estimates below price every "
                                       f"configuration as {family.name}'s (other families' epochs, rounds and "
                                       f"passes cost what they cost, which can be far more)"))
    add("procedure", spec.method, {
        "grid": "every grid point, trained until it converges or hits max_iter",
        "random": "n_trials configurations sampled with a seeded generator",
        "tpe": "n_trials configurations proposed by Optuna's TPE from the results so far",
        "successive_halving": "one bracket: keep the best 1/eta at every rung",
        "hyperband": "all Hyperband brackets run concurrently (Li et al.)",
        "asha": "asynchronous successive halving, promotions decided as results arrive",
        "pbt": f"population based training: {spec.population} members; every {spec.perturbation_interval} epoch(s) "
               f"the worst {spec.quantile:g} continue a best member's state with perturbed parameters"}[spec.method])
    es = spec.early_stopping
    add("early_stopping", "bandit" if es else "none",
        (f"TuPAQ Alg. 3: every {spec.partial_epochs * spec.epoch_iters} iterations keep configurations whose "
         f"loss is within a factor 1 + {es.epsilon:g} of the best so far") if es else None)
    mean_n = n_rows / n_groups if n_groups else 0
    n_train_mean = max(1, int(round(mean_n * (1 - vf))))
    n_train_max = max(1, int(round(largest * (1 - vf))))
    big = plan_group(spec, family, n_train_max, d, cost_model)
    mean = plan_group(spec, family, n_train_mean, d, cost_model)
    b = big["budget"]
    add("configurations", b["n_configs"], b["note"])
    add("budget_epochs", b["epochs"], f"epoch blocks of {spec.epoch_iters} solver iterations summed over "
        f"configurations (at most {b['epochs_per_config']} per configuration; max_iter {big['max_iter']})")
    add("budget_passes", big["passes"], f"data passes per group with k = {big['slots']} configurations per pass "
        f"({big['config_passes']} configuration-passes); an upper bound")
    add("batch_size", big["slots"], big["why"])
    add("groups", n_groups, None)
    add("rows", n_rows, f"mean {mean_n:.1f} rows per group; {1 - vf:g} of each group trains")
    add("largest_group_rows", largest, None)
    add("features", d, None)
    runs = len(cost_model.runs)
    add("cost_model", "calibrated" if runs else "priors",
        (f"refitted on the {runs} newest runs of groupml.cost_runs: "
         + ", ".join(f"{t} {v:.3g}" for t, v in cost_model.coefficients.items()))
        if runs else "groupml.cost_runs is empty: run SELECT * FROM groupml.calibrate_cost_model();")
    total = mean["seconds"] * n_groups
    add("estimated_seconds", f"{total:.6g}", f"{_fmt_s(total)} for all groups, one after another on one "
        f"backend ({_fmt_s(mean['seconds_per_pass'])} per pass for a mean group)")
    add("estimated_seconds_largest_group", f"{big['seconds']:.6g}",
        f"{_fmt_s(big['seconds'])}: {big['passes']} passes at {_fmt_s(big['seconds_per_pass'])} per pass")
    return rows


@sql_entry
def explain_search(source, features, label, model, search, group_by, options):
    from ..db import backend_session
    from ..fitting import validate_request

    owner = "explain_search"
    session = backend_session()
    if model is None:
        raise InvalidParameterError(f"The 'model' value of {owner} must be a model family name; got null",
                                    hint=families_hint())
    search_obj = parse_object(search, "search", owner)
    options_obj = parse_object(options, "options", owner)
    validate_request(model, search_obj, options_obj, f"{owner} options")
    if source is None:
        raise InvalidParameterError(f"The 'source' value of {owner} must be a table or view; got null",
                                    hint="Pass the table name, e.g. 'clicks'.")
    oid = source_oid(session, source, owner)
    with session.pinned_search_path():
        return _explain_search(session, oid, features, label, model, search_obj, options_obj, group_by)


def _explain_search(session, oid, features, label, model, search_obj, options_obj, group_by):
    owner = "explain_search"
    source, cols, group_by, features = check_training_source(session, oid, group_by, features, label, owner)
    # rows with a NULL feature or label are skipped by training, so the plan does not count them
    usable = ("pg_catalog.count(*) FILTER (WHERE "
              + " AND ".join(f"{quote_ident(c)} IS NOT NULL" for c in list(features) + [label]) + ")")
    if group_by:
        keys = ", ".join(quote_ident(g) for g in group_by)
        sql = (f"SELECT pg_catalog.count(*) AS groups, coalesce(pg_catalog.sum(c), 0) AS n_rows, "
               f"coalesce(pg_catalog.max(c), 0) AS largest "
               f"FROM (SELECT {usable} AS c FROM {source} GROUP BY {keys}) s")
    else:
        sql = (f"SELECT CASE WHEN pg_catalog.count(*) OPERATOR(pg_catalog.>) 0 THEN 1 ELSE 0 END AS groups, "
               f"{usable} AS n_rows, {usable} AS largest FROM {source}")
    with reading_source(session, source, owner):   # the source's views may name their tables bare
        stats = session.query(sql)[0]
    cost_model = load_cost_model(session, model)
    return explain_plan(model, search_obj, options_obj, n_groups=int(stats["groups"]),
                        n_rows=int(stats["n_rows"]), largest=int(stats["largest"]), d=len(features),
                        cost_model=cost_model)


# ----------------------------------------------------------------------------- trial_info
_TRIAL_FIELDS = {"trial_id": (int,), "score": (int, float), "epochs": (int,), "iterations": (int,),
                 "status": (str,), "stop_reason": (str,), "passes": (int,), "seconds": (int, float)}


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a text"}
#: trial_info's integer columns (the others are bigint)
_TRIAL_INT_BITS = {"trial_id": 32, "epochs": 32, "iterations": 32}


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (not Python's class names)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return "null" if value is None else "a value"


def _check_trials(trials: Any) -> None:
    """A fit's trials as learn_over_groups writes them: an array of objects whose fields have
    their types (or are null); anything else -- a fit built by hand -- is a clear 22023."""
    def bad(why: str):
        return InvalidParameterError(f"The 'fit' value of trial_info has malformed trials: {why}",
                                     hint="Pass a fit returned by learn_over_groups (or read groupml.trials).")

    if not isinstance(trials, list):
        raise bad(f"expected a JSON array; got {_json_kind(trials)}")
    for i, t in enumerate(trials):
        if not isinstance(t, dict):
            raise bad(f"trial {i} is not an object")
        for key, types in _TRIAL_FIELDS.items():
            v = t.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, types)):
                raise bad(f"'{key}' of trial {i} must be {' or '.join(_TYPE_WORDS[x] for x in types)}; got "
                          f"{shown(json.dumps(v))}")
            # the columns' own ranges: PL/Python refused them on return (22003, no hint)
            if v is None or isinstance(v, (bool, str)):
                continue
            if float in types and abs(v) > 1.7976931348623157e308:
                raise bad(f"'{key}' of trial {i} must be a finite float8; got "
                          f"{short_int(v) if isinstance(v, int) else shown(v)}")
            bits = _TRIAL_INT_BITS.get(key, 64)
            if float not in types and not -2 ** (bits - 1) <= v < 2 ** (bits - 1):
                raise bad(f"'{key}' of trial {i} must fit in {'an integer' if bits == 32 else 'a bigint'}; got "
                          f"{short_int(v)}")
        losses = t.get("epoch_losses")
        if losses is not None and (not isinstance(losses, list)
                                   or not all(x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))
                                              for x in losses)):
            raise bad(f"'epoch_losses' of trial {i} must be an array of numbers")


def trial_rows(fit: Optional[dict]) -> List[Dict[str, Any]]:
    """Rows of groupml.trial_info for a fit (a dict of the composite type's fields)."""
    if fit is None:
        return []
    trials = fit.get("trials")
    if isinstance(trials, str):
        trials = json.loads(trials)
    if trials is None or trials == []:
        return []
    _check_trials(trials)             # '{}' was taken for no trials, '"x"' named Python's str
    params = fit.get("params")
    if isinstance(params, str):
        params = json.loads(params)
    marked = any("is_best" in t for t in trials)
    best_id = None
    if not marked and params is not None:
        same = [t["trial_id"] for t in trials if t.get("params") == params and t.get("score") == fit.get("score")
                and t.get("trial_id") is not None]
        best_id = min(same) if same else None
    out = []
    for t in trials:
        out.append({
            "trial_id": t.get("trial_id"), "params": json.dumps(t.get("params")), "score": t.get("score"),
            "epochs": t.get("epochs"), "iterations": t.get("iterations"), "status": t.get("status"),
            "stop_reason": t.get("stop_reason"), "epoch_losses": t.get("epoch_losses") or [],
            "passes": t.get("passes"), "seconds": t.get("seconds"),
            "is_best": bool(t.get("is_best")) if marked else t.get("trial_id") == best_id,
        })
    return out


@sql_entry
def trial_info(fit):
    return trial_rows(fit)
