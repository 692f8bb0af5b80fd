"""Train and select one group's model: split, train every configuration together, pick.

Pure Python (no plpy): arrays and dicts in, a :class:`FitResult` out. Used by the
``learn_over_groups`` aggregate and by the catalog-writing ``train_groups``
procedure, so both select models the same way.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from .errors import InvalidParameterError, SearchSpecError
from .validation import check_bool, check_keys, check_number

OPTION_KEYS = ("validation_fraction", "metric", "seed", "progress", "threads")
MAX_THREADS = 4
OPTIONS_OWNER = "learn_over_groups options"
UNBOUNDED_METHODS = ("grid", "random", "tpe")
UNLIMITED_EPOCHS = 1 << 30


@dataclass
class FitResult:
    status: str
    family: Optional[str] = None
    params: Optional[dict] = None
    metric: Optional[str] = None
    score: Optional[float] = None
    metrics: Optional[dict] = None
    n_train: int = 0
    n_validation: int = 0
    n_skipped: int = 0
    n_features: Optional[int] = None
    trials: List[dict] = field(default_factory=list)
    message: Optional[str] = None
    model: Optional[bytes] = None
    passes: int = 0
    # cost of the search (not part of the SQL type groupml.fit; catalog writers store them):
    seconds: float = 0.0                       # measured wall time of the training passes
    estimated_seconds: Optional[float] = None  # the planner's estimate before training (upper bound)
    slots: Optional[int] = None                # batch size k the search ran with
    mean_batch: Optional[float] = None         # configurations per data pass, averaged over passes
    plan: Optional[dict] = None                # the planner's decision (see plan_group)

    def as_sql(self) -> Dict[str, Any]:
        """The row of the SQL composite type groupml.fit (jsonb fields as JSON text)."""
        def js(v):
            return None if v is None else json.dumps(v, allow_nan=False, default=json_default)
        return {
            "status": self.status, "family": self.family, "params": js(self.params),
            "metric": self.metric, "score": self.score, "metrics": js(finite(self.metrics)),
            "n_train": self.n_train, "n_validation": self.n_validation, "n_skipped": self.n_skipped,
            "n_features": self.n_features, "trials": js(finite(self.trials)), "message": self.message,
            "model": self.model,
        }


def json_default(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    raise TypeError(f"not JSON serializable: {type(v).__name__}")


def finite(obj):
    """JSON has no NaN: replace non-finite floats by null, recursively."""
    if isinstance(obj, float) or isinstance(obj, np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def empty_fit(message: str, n_skipped: int = 0, family: Optional[str] = None) -> Dict[str, Any]:
    return FitResult(status="no_rows", family=family, message=message, n_skipped=n_skipped).as_sql()


def default_threads() -> int:
    """Groups trained at the same time in one backend by default: min(CPUs, MAX_THREADS)."""
    import os

    return max(1, min(os.cpu_count() or 1, MAX_THREADS))


def parse_options(options: dict, family, owner: str = OPTIONS_OWNER) -> dict:
    """The fitting options (``owner``: whose options the messages name; train_groups checks
    its own keys first, :func:`groupml.udf.train._check_option_keys`)."""
    check_keys(options, owner, OPTION_KEYS, cls=InvalidParameterError,
               hint="Options are validation_fraction, metric, seed, progress and threads; see SELECT groupml.help('learn_over_groups').")
    out = {
        "validation_fraction": check_number(options.get("validation_fraction", 0.2), "validation_fraction",
                                            owner, gt=0, lt=1,
                                            hint="Use a fraction such as 0.2 (20% of each group's rows)."),
        "seed": check_number(options.get("seed", 0), "seed", owner, ge=0, le=2 ** 63 - 1, integer=True),
        "metric": options.get("metric"),
        "progress": check_bool(options.get("progress", False), "progress", owner),
        "threads": check_number(options.get("threads", default_threads()), "threads", owner, ge=1,
                                le=MAX_THREADS, integer=True,
                                hint=f"Groups trained at the same time in this backend (BLAS limited to one "
                                     f"thread each); default min(CPUs, {MAX_THREADS}); 1 trains them one after "
                                     f"another."),
    }
    if out["metric"] is not None:
        from .validation import check_choice
        check_choice(out["metric"], "metric", owner, family.metric_names,
                     hint=f"Model '{family.name}' can be selected on {', '.join(family.metric_names)}.")
    return out


def plan_search(family, search: dict, *, family_choice: bool = False):
    """Parse and validate a search spec for a family; grid/random points are checked up front.
    ``family_choice``: the space may choose the model family too (a ``model`` dimension,
    :mod:`groupml.learners._choice`); each configuration is then checked by its own family."""
    from .learners import check_family_choice, choice_param_names, chosen_families, mentions_model
    from .search import make_procedure, parse_search

    choosing = family_choice and mentions_model(search)
    spec = parse_search(search, param_names=choice_param_names(family) if choosing else family.param_names)
    families = None
    if choosing:
        names = chosen_families(spec.space)
        if names is not None:
            families = {f.name: f for f in check_family_choice(family, names, None, metric_checked=False)[0]}
    if spec.method in UNBOUNDED_METHODS and "max_epochs" not in search:
        # grid/random/tpe train each configuration until the learner converges or hits its
        # max_iter; only the halving methods and an explicit max_epochs cap blocks.
        spec = dataclasses.replace(spec, max_epochs=UNLIMITED_EPOCHS)
    if spec.method in ("grid", "random"):
        # in a grid, one configuration written two ways ([{"solver": "lbfgs"}, "lbfgs"], MLP
        # layers "4" and 4, a sub-space listed twice) would be trained and reported twice
        seen: Dict[str, Any] = {}
        for trial in make_procedure(spec).ask(1 << 30):
            valid = _validate_config(family, families, trial.params)
            if spec.method != "grid":
                continue
            key = json.dumps(_identity(family, families, valid), sort_keys=True, default=str)
            if key in seen:
                raise SearchSpecError(
                    f"The grid of search lists one configuration twice: {_json_short(seen[key])} and "
                    f"{_json_short(trial.params)} are the same model",
                    hint="List each configuration once: values a learner reads alike count as the same, and so "
                         "do values of a parameter its solver or optimizer does not use (lr under solver lbfgs, "
                         "momentum under optimizer adam); put such values in a sub-space of the solver that uses "
                         "them, e.g. {\"solver\": [{\"solver\": \"lbfgs\"}, {\"solver\": \"gd\", \"lr\": [0.1, 1]}]}.")
            seen[key] = trial.params
    else:
        if spec.method == "pbt":
            _check_pbt_space(family, spec, families)
        _check_sampled_space(family, spec, families)
    return spec


def _check_pbt_space(family, spec, families=None) -> None:
    """Population based training forks configurations: the model must be able to copy a
    training state, and only what a fork may change can vary (the rest is one value)."""
    from .search import Categorical, Fixed

    if families is not None:
        raise SearchSpecError("The 'model' value of search must not choose the model family for method 'pbt'; "
                              f"got a choice of {', '.join(sorted(families))}",
                              hint="Population based training forks one family's training states; call it with "
                                   "model 'mlp' or 'mlp_regressor' and no 'model' dimension.")

    forkable = tuple(getattr(family, "fork_params", ()))
    if not forkable:
        raise SearchSpecError(
            f"The 'method' value of search must not be 'pbt' for model '{family.name}': population based training "
            f"copies a configuration's training state mid-training, which only models mlp and mlp_regressor do; "
            f"got 'pbt'", hint="Use method 'asha' or 'hyperband' to stop weak configurations early.")
    for dim in spec.space:
        one_value = isinstance(dim, Fixed) or (isinstance(dim, Categorical) and len(dim.items) == 1)
        if not one_value and dim.name not in forkable:
            raise SearchSpecError(
                f"The '{dim.name}' value of search must be one value for method 'pbt': a fork continues its "
                f"parent's network, so only {', '.join(forkable)} may vary; got a range of values",
                hint=f"Give '{dim.name}' one value (e.g. \"{dim.name}\": [value]), or search it with another "
                     f"method.")


def _validate_config(family, families, params) -> Dict[str, Any]:
    """One configuration as its family validates it (its family: the ``model`` it names when
    the search chooses families, else ``family``), with its ``model`` when it names one."""
    if families is None:
        return family.validate_params(params)
    from .learners import MODEL_KEY, split_params

    name, own = split_params(params, family.name)
    return {MODEL_KEY: name, **families[name].validate_params(own)}


def _identity(family, families, valid) -> Dict[str, Any]:
    """What makes a validated configuration a distinct model (:func:`learners.model_identity`)."""
    from .learners import model_identity
    from .learners import MODEL_KEY

    if families is None:
        return model_identity(family, valid)
    own = {k: v for k, v in valid.items() if k != MODEL_KEY}
    return {MODEL_KEY: valid[MODEL_KEY], **model_identity(families[valid[MODEL_KEY]], own)}


def _json_short(params) -> str:
    text = json.dumps(params, sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def _check_sampled_space(family, spec, families=None, n_samples: int = 64) -> None:
    """TPE and the halving methods draw their configs as they go: check every range's ends and
    every plain choice against the learner up front (an ``l2`` range reaching below 0 fails
    here, not after part of the search trained), then a random sample of the space (nested
    choices). With a choice of ``families``, a dimension outside the ``model`` one applies to
    every family, so every one checks it."""
    from .learners import MODEL_KEY
    from .search import DISTRIBUTIONS, Categorical, is_subspace, make_procedure

    checkers = [family] if families is None else list(families.values())
    ends = {}
    for dim in spec.space:
        if families is not None and dim.name == MODEL_KEY:
            continue
        if isinstance(dim, DISTRIBUTIONS):
            ends[dim.name] = [dim.low, dim.high]
        elif isinstance(dim, Categorical):
            ends[dim.name] = [v for v in dim.items if not is_subspace(v)]
        else:
            ends[dim.name] = [dim.value]
    # each end is checked with the other dimensions at their first value: a parameter whose
    # rule depends on another one ('lr' needs a step-size solver) sees the space's choice
    base = {name: values[0] for name, values in ends.items() if values}
    for name, values in ends.items():
        for v in values:
            for fam in checkers:
                fam.validate_params(dict(base, **{name: v}))
    n = n_samples if families is None else 4 * n_samples
    probe = dataclasses.replace(spec, method="random", n_trials=n, early_stopping=None)
    for trial in make_procedure(probe).ask(n):
        _validate_config(family, families, trial.params)


MAX_SLOTS = 256


def default_cost_model():
    """The cost model of one backend before any run is recorded: the planner's priors with
    the worker terms at 0 (with one worker they cannot be told apart from the fixed cost,
    and CostModel keeps them at their prior when every calibration run has one worker)."""
    from .planner import CostModel

    return CostModel({"per_worker": 0.0, "network": 0.0})


def budget_cap(space_json, family) -> int:
    """Largest iteration budget a configuration of the space can have: the family's
    ``budget_param`` (max_iter, epochs, num_boost_round), else the learner's default."""
    key = getattr(family, "budget_param", "") or "max_iter"
    found = []

    def walk(obj, inside=False):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, inside or k == key)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v, inside)
        elif inside and isinstance(obj, (int, float)) and not isinstance(obj, bool):
            found.append(int(obj))

    walk(space_json)
    return max(found) if found else int(family.defaults[key])


def plan_group(spec, family, n_train: int, d: int, cost_model=None) -> dict:
    """The planner's decision for one group: batch size k (slots), its reason, the budget
    and the estimated seconds (TuPAQ eq. 1 cost model; an upper bound, since converged or
    stopped configurations free their slot early)."""
    from .planner import choose_batch_size
    from .search import search_budget

    model = cost_model if cost_model is not None else default_cost_model()
    max_iter = budget_cap(spec.to_dict().get("space", {}), family)
    budget = search_budget(spec, max_iter=max_iter)
    n = max(int(n_train), 1)
    if spec.slots is not None:
        k = int(spec.slots)
        why = f"slots = {k} given by the search spec"
    elif spec.method == "pbt":
        k = spec.population
        why = f"k = {k}: population based training trains its whole population together"
    else:
        top = min(budget.in_flight, MAX_SLOTS)
        k = choose_batch_size(model, n, d, budget.in_flight, max_batch=top)
        calibrated = "calibrated on %d measured runs" % len(model.runs) if model.runs else "uncalibrated priors"
        if k == top and top == budget.in_flight:
            why = (f"k = {k}: every configuration that can be in flight shares each data pass; the cost "
                   f"model ({calibrated}) prices one pass at {model.predict(n, d, 1):.3g}s for k = 1 and "
                   f"{model.predict(n, d, k):.3g}s for k = {k}")
        elif k == top:
            why = f"k = {k}: capped at {MAX_SLOTS} configurations per pass (cost model: {calibrated})"
        else:
            why = (f"k = {k} minimises the estimated time to give all {budget.in_flight} configurations a "
                   f"pass (cost model: {calibrated})")
        if spec.method == "tpe" and budget.in_flight < budget.n_configs:
            why += (f"; TPE keeps {budget.in_flight} of its {budget.n_configs} trials in flight so that it "
                    f"proposes from finished ones")
    k_eff = max(1, min(k, budget.in_flight))
    config_passes = budget.epochs * spec.epoch_iters
    passes = math.ceil(config_passes / k_eff)
    seconds = passes * model.predict(n, d, k_eff)
    return {"slots": k, "why": why, "passes": passes, "config_passes": config_passes,
            "seconds": seconds, "seconds_per_pass": model.predict(n, d, k_eff),
            "budget": budget.to_dict(), "max_iter": max_iter}


class _Metered:
    """A Trainer proxy that times every block and remembers which configs shared it."""

    def __init__(self, trainer):
        self._t = trainer
        self.seconds = 0.0
        self.config_passes = 0          # sum over passes of the configs in the pass
        self.trial_passes: Dict[int, int] = {}
        self.trial_seconds: Dict[int, float] = {}

    @property
    def passes(self):
        return self._t.passes

    def __getattr__(self, name):
        return getattr(self._t, name)

    def state(self) -> Dict[str, Any]:
        """The counters so far (JSON), for epoch checkpoints."""
        return {"seconds": self.seconds, "config_passes": self.config_passes,
                "trial_passes": sorted([int(t), int(n)] for t, n in self.trial_passes.items()),
                "trial_seconds": sorted([int(t), float(v)] for t, v in self.trial_seconds.items())}

    def load(self, state: Dict[str, Any]) -> None:
        self.seconds = float(state["seconds"])
        self.config_passes = int(state["config_passes"])
        self.trial_passes = {int(t): int(n) for t, n in state["trial_passes"]}
        self.trial_seconds = {int(t): float(v) for t, v in state["trial_seconds"]}

    def run(self, iterations):
        # a search over families runs a block per family: each one's passes and time are
        # charged to its own configurations only
        for part in self._t.parts() if hasattr(self._t, "parts") else [self._t]:
            self._run_part(part, iterations)

    def _run_part(self, part, iterations):
        active = [tid for tid in part.active() if not part.converged(tid)]
        p0, t0 = part.passes, time.perf_counter()
        part.run(iterations)
        dt, dp = time.perf_counter() - t0, part.passes - p0
        self.seconds += dt
        self.config_passes += dp * len(active)
        for tid in active:
            self.trial_passes[tid] = self.trial_passes.get(tid, 0) + dp
            self.trial_seconds[tid] = self.trial_seconds.get(tid, 0.0) + dt / len(active)


def validate_request(model: str, search: dict, options: dict, options_owner: str = OPTIONS_OWNER):
    """Everything about a request that can be checked before any row is read. The search may
    choose the model family too (``model`` in its space); then every family is selected on
    one metric, which ``opts["metric"]`` names."""
    from .learners import get_learner_family
    from .learners._choice import check_family_choice, chosen_families

    family = get_learner_family(model)
    spec = plan_search(family, search, family_choice=True)
    opts = parse_options(options, family, options_owner)
    names = chosen_families(spec.space)
    if names is not None:
        opts["metric"] = check_family_choice(family, names, opts["metric"])[1]
    return family, spec, opts


def _sorts_labels(family) -> bool:
    """True for the binary GLM families, whose trainer sorts its training rows by label."""
    from .learners import GLMFamily

    return isinstance(family, GLMFamily) and family.kind == "classification"


def fit_group(X: np.ndarray, y: np.ndarray, model: str, search: dict, options: dict, *,
              n_skipped: int = 0, on_epoch: Optional[Callable[[Any], None]] = None,
              interrupt_check: Optional[Callable[[], None]] = None, cost_model=None) -> FitResult:
    """Split the group's rows, run the search with every config batched, return the selection.

    Rows are ordered by a hash of their content before training, so the result does not
    depend on the order the rows arrived in (which a GROUP BY does not guarantee).
    ``interrupt_check`` is called after every data pass (cancel), ``on_epoch`` after every block.
    ``cost_model`` (a calibrated :class:`groupml.planner.CostModel`; priors when None) picks
    the batch size k when the spec gives no ``slots``.
    """
    from .learners import make_trainer
    from .learners._choice import FamilyChoiceTrainer, chosen_families
    from .learners._holdout import mask_of_hash, row_hash_and_order

    family, spec, opts = validate_request(model, search, options)
    # a finite row sum means every value of the row is finite (inf and NaN propagate); only
    # a table with some non-finite value takes the exact per-value test
    ok = np.isfinite(y) & np.isfinite(X.sum(axis=1))
    if not ok.all():
        ok &= np.isfinite(X).all(axis=1)
        n_skipped += int((~ok).sum())
        X, y = X[ok], y[ok]
    n, d = X.shape
    base = dict(family=family.name, n_skipped=n_skipped, n_features=d)
    if n == 0:
        return FitResult(status="no_rows", message="every row had a NULL, NaN or infinite label or feature", **base)
    family.prepare_labels(y, "the group's rows")  # DataError for labels the family cannot use
    h, order = row_hash_and_order(X, y, opts["seed"])
    val = mask_of_hash(h, opts["validation_fraction"])
    n_val = int(val.sum())
    n_train = n - n_val
    base.update(n_train=n_train, n_validation=n_val)
    if n_train < 2 or n_val < 1:
        return FitResult(status="too_small", message=(
            f"the group has {n} usable rows: {n_train} for training and {n_val} for validation; "
            f"need at least 2 and 1"), **base)
    tr, va = order[~val[order]], order[val[order]]
    if _sorts_labels(family) and chosen_families(spec.space) is None:
        # the GLM trainer keeps binary training rows sorted by label (stably): sort the row
        # numbers here, so that the rows are gathered once
        label1 = y[tr] > 0.5
        tr = np.concatenate((tr[~label1], tr[label1]))
    Xtr, ytr, Xva, yva = X[tr], y[tr], X[va], y[va]
    if family.kind == "classification" and ytr.min() == ytr.max():
        return FitResult(status="single_class", message=(
            f"every training row of the group has label {ytr[0]:g}; a classifier needs both classes"), **base)
    plan = plan_group(spec, family, n_train, d, cost_model)
    if chosen_families(spec.space) is not None:     # the search chooses the family too
        trainer = FamilyChoiceTrainer(family.name, Xtr, ytr, Xva, yva, metric=opts["metric"])
    else:
        trainer = make_trainer(family.name, Xtr, ytr, Xva, yva, metric=opts["metric"], interrupt_check=interrupt_check)
    return search_and_select(trainer, spec, plan, base, on_epoch=on_epoch, interrupt_check=interrupt_check)


def unpack_rows(raw: Optional[bytes], width: int, dtype: str = ">f8") -> np.ndarray:
    """Packed rows (big-endian float8 values, ``width`` per row, as the packed-row SQL of
    :mod:`groupml.sourcesql` builds them; ``dtype="=f8"``: native ones, as learn_over_groups'
    C buffers hold them) as an (n, width) float64 matrix."""
    arr = np.frombuffer(raw or b"", dtype=dtype)
    return (arr if arr.dtype == np.float64 and arr.dtype.isnative else arr.astype(np.float64)).reshape(-1, width)


def fit_packed(raw: Optional[bytes], n_rows: int, d: int, model: str, search: dict, options: dict,
               cost_model=None, *, interrupt_check: Optional[Callable[[], None]] = None,
               dtype: str = ">f8") -> FitResult:
    """:func:`fit_group` on one group's packed rows (``d`` features, then the label; ``dtype``
    as for :func:`unpack_rows`); rows the packing left out (a NULL value) count as skipped.
    Pure: train_groups and learn_over_groups run it in the backend or in a helper process
    (:mod:`groupml.procpool`)."""
    arr = unpack_rows(raw, d + 1, dtype)
    return fit_group(np.ascontiguousarray(arr[:, :d]), arr[:, d].copy(), model, search, options,
                     n_skipped=int(n_rows) - arr.shape[0], interrupt_check=interrupt_check, cost_model=cost_model)


def search_and_select(trainer, spec, plan: dict, base: dict, *, on_epoch=None,
                      interrupt_check: Optional[Callable[[], None]] = None,
                      checkpoint: Optional[Callable[[Any, Dict[str, Any]], None]] = None,
                      resume: Optional[Dict[str, Any]] = None,
                      requests: Optional[Callable[[], List[Dict[str, Any]]]] = None) -> FitResult:
    """Run the search on a Trainer (local, or one whose passes run on workers), record every
    trial with its cost, and return the selection as a FitResult (``base`` carries the
    group's counts).

    ``checkpoint(event, state)`` (optional) runs after every block, after ``on_epoch``:
    ``state`` = ``{"search": ..., "meter": ..., "trainer": trainer.checkpoint_state()}``,
    copied, so the trainer may go on while it is stored. ``resume`` = such a state: the
    trainer, the metering and the search procedure are restored and the search continues
    after that block; the result equals the uninterrupted search's. ``requests``: trials
    added and stopped from outside between blocks (:func:`groupml.search.run_search`).
    """
    from .search import SearchProcedure, make_procedure, run_search, search_state

    if interrupt_check is not None:
        trainer.interrupt_check = interrupt_check
    if hasattr(trainer, "warm_start"):      # GLMs: start large groups from a row sample's solution
        trainer.warm_start = True
    metered = _Metered(trainer)
    if resume is not None:
        trainer.load_checkpoint(resume["trainer"])
        metered.load(resume["meter"])
        procedure = SearchProcedure.from_state(resume["search"]["procedure"])
    else:
        procedure = make_procedure(spec)
    def with_checkpoint(e):
        if on_epoch is not None:
            on_epoch(e)
        checkpoint(e, {"search": search_state(e), "meter": metered.state(), "trainer": trainer.checkpoint_state()})

    result = run_search(procedure, metered, slots=plan["slots"], epoch_iters=spec.epoch_iters,
                        on_epoch=on_epoch if checkpoint is None else with_checkpoint,
                        resume=None if resume is None else resume["search"], requests=requests)
    metric = trainer.metric
    one = getattr(trainer, "selected_metric", None)      # the trial list needs one metric only
    trials = []
    for t in result.trials:
        if not t.epochs:
            score = None
        else:
            score = one(t.trial_id) if one is not None else trainer.metrics(t.trial_id).get(metric)
        trials.append({"trial_id": t.trial_id, "params": trainer.params(t.trial_id) if t.epochs else t.params,
                       "score": score, "epochs": t.epochs,
                       "iterations": trainer.iterations(t.trial_id) if t.epochs else 0,
                       "status": t.status, "stop_reason": t.stop_reason, "epoch_losses": list(t.scores),
                       "passes": metered.trial_passes.get(t.trial_id, 0),
                       "seconds": round(metered.trial_seconds.get(t.trial_id, 0.0), 6)})
        if t.parent_id is not None:       # population based training: where the trial forked
            trials[-1].update(parent_trial_id=t.parent_id, forked_at_epoch=t.forked_at)
    cost = dict(seconds=metered.seconds, estimated_seconds=plan["seconds"], slots=plan["slots"],
                mean_batch=(metered.config_passes / trainer.passes) if trainer.passes else None, plan=plan)
    best = result.best
    if best is None:
        return FitResult(status="failed", message="no configuration produced a finite validation score",
                         trials=trials, passes=trainer.passes, **cost, **base)
    for t in trials:
        t["is_best"] = t["trial_id"] == best.trial_id
    model_obj = trainer.model(best.trial_id)
    params = model_obj.params
    if hasattr(trainer, "family_of"):           # a search over families: the fit is the chosen one's
        base = dict(base, family=trainer.family_of(best.trial_id))
        params = {"model": base["family"], **params}      # as its trial lists them
    metrics = trainer.metrics(best.trial_id)
    chosen = next(t for t in trials if t["is_best"])
    return FitResult(status="ok", params=params, metric=metric, score=metrics.get(metric),
                     metrics=metrics, trials=trials, model=model_obj.to_bytes(), passes=trainer.passes,
                     message=solver_warning(base.get("family"), chosen, model_obj), **cost, **base)


#: Families whose solvers stop on ``tol`` (a gradient test): for them 'max_iter' means unfinished.
TOL_FAMILIES = ("logistic", "linear", "svm")


def solver_warning(family: Optional[str], trial: Dict[str, Any], model: Any = None) -> Optional[str]:
    """A warning for an ok fit whose selected GLM configuration did not really converge, as
    scikit-learn's ConvergenceWarning (the fit's ``message``; None when there is none).
    ``model`` (the selected GLMModel): a warm-started configuration may meet tol with 0
    iterations of its own at non-zero weights; only zero weights mean it learned nothing."""
    if family not in TOL_FAMILIES:
        return None
    if (trial.get("params") or {}).get("solver") == "sgd":
        return None     # sgd runs its max_iter epochs (a fixed step never meets tol): nothing to warn
    if trial["status"] in ("max_iter", "stalled"):
        return (f"warning: the selected configuration stopped ({trial['status']}) after {trial['iterations']} "
                f"iterations without reaching tol; its weights may be far from the optimum: raise max_iter "
                f"or loosen tol")
    if trial["status"] == "converged" and trial["iterations"] == 0 and (
            model is None or not np.any(getattr(model, "coef", 0.0))):
        return ("warning: the selected configuration met tol at zero weights (0 iterations), so it learned "
                "nothing: the gradient there is below tol; scale the labels up, or lower tol")
    return None
