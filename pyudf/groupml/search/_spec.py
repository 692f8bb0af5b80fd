"""Parse and validate the jsonb search specification (schema in docs/search.md)."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from ..errors import SearchSpecError
from ..validation import (check_choice, check_keys, check_number, clipped, fail, finite_float, short_int,
                          shown)
from . import _space
from ._brackets import hyperband_brackets
from ._space import Categorical, Fixed, IntRange, LogUniform, Space, Uniform

METHODS = ("grid", "random", "tpe", "successive_halving", "hyperband", "asha", "pbt")
PBT_KEYS = ("population", "perturbation_interval", "quantile", "resample_probability")
RESERVED = ("method", "space", "n_trials", "seed", "early_stopping", "epoch_iters",
            "max_epochs", "min_epochs", "eta", "slots") + PBT_KEYS
DIST_KEYS = ("uniform", "loguniform", "int", "choice")
MAX_GRID = 10000
# Upper bounds no search needs; they keep budgets, seeds and sampled values within what the
# planner's floats, numpy and jsonb hold. MAX_EPOCHS is also fitting.UNLIMITED_EPOCHS, the
# max_epochs that checkpointed grid/random/tpe specs without max_epochs carry.
MAX_TRIALS = 100_000
MAX_TPE_SLOTS = 1000
MAX_EPOCHS = 1 << 30
MAX_EPOCH_ITERS = 1_000_000
MAX_SEED = 2 ** 63 - 1
MAX_EPSILON = 1000
MAX_POPULATION = 256              # PBT trains its whole population in one batch (the planner's MAX_SLOTS)
INT_LIMIT = 2 ** 63               # {"int": [lo, hi]}: -INT_LIMIT <= lo <= hi < INT_LIMIT (numpy int64)
SCHEMA_HINT = "See SELECT groupml.help('search') for the search schema."


@dataclass(frozen=True)
class EarlyStopping:
    """TuPAQ's bandit action elimination (docs/search.md, 'Early stopping')."""

    method: str = "bandit"
    epsilon: float = 0.5
    partial_iters: int = 10


@dataclass(frozen=True)
class SearchSpec:
    method: str
    space: Space
    n_trials: int = 20
    seed: int = 0
    early_stopping: Optional[EarlyStopping] = None
    epoch_iters: int = 10
    max_epochs: int = 10
    min_epochs: int = 1
    eta: int = 3
    slots: Optional[int] = None
    # population based training (method 'pbt' only)
    population: int = 8
    perturbation_interval: int = 1
    quantile: float = 0.25
    resample_probability: float = 0.25

    @property
    def grid_size(self) -> Optional[int]:
        """Points of the grid, or None when the space has distributions."""
        return None if _space.has_distributions(self.space) else _space.grid_size(self.space)

    @property
    def partial_epochs(self) -> Optional[int]:
        """Epoch blocks after which the bandit check happens (ceil(partial_iters / epoch_iters))."""
        if self.early_stopping is None:
            return None
        return max(1, -(-self.early_stopping.partial_iters // self.epoch_iters))

    def to_dict(self) -> Dict[str, Any]:
        """Canonical JSON form; ``parse_search(spec.to_dict()) == spec``. A space without
        dimensions (the default search ``{}``) has no "space" key: ``"space": {}`` is refused."""
        es = self.early_stopping
        out = {
            "method": self.method, "space": _space.to_json(self.space), "n_trials": self.n_trials,
            "seed": self.seed,
            "early_stopping": None if es is None else {
                "method": es.method, "epsilon": es.epsilon, "partial_iters": es.partial_iters},
            "epoch_iters": self.epoch_iters, "max_epochs": self.max_epochs,
            "min_epochs": self.min_epochs, "eta": self.eta, "slots": self.slots,
        }
        if self.method == "pbt":
            out.update(population=self.population, perturbation_interval=self.perturbation_interval,
                       quantile=self.quantile, resample_probability=self.resample_probability)
        if not self.space:
            del out["space"]
        return out


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, bool, Real))


def _is_finite(value: Any) -> bool:
    """False for NaN and infinities (not JSON); integers of any size are exact JSON."""
    return not isinstance(value, Real) or isinstance(value, Integral) or finite_float(value) is not None


class _Json:
    """Shows a value as JSON in messages (the user wrote JSON)."""

    def __init__(self, value: Any):
        self.value = value

    def __str__(self) -> str:
        try:
            return _json_text(self.value)
        except (TypeError, ValueError):
            return repr(self.value)


def _json_text(value: Any) -> str:
    """``json.dumps`` with huge integers shortened (``short_int``: 1e+400, not 401 digits)."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_json_text(v) for v in value) + "]"
    if isinstance(value, int) and not isinstance(value, bool):
        return short_int(value)
    return json.dumps(value)


def _show(value: Any) -> Any:
    return _Json(value)


class _Parser:
    def __init__(self, owner: str, param_names: Optional[Iterable[str]]):
        self.owner = owner
        self.param_names = None if param_names is None else sorted(param_names)

    def check_name(self, name: Any) -> str:
        if not isinstance(name, str) or not name:
            raise SearchSpecError(f"Parameter names in {self.owner} must be non-empty strings; got {_show(name)}",
                                  hint=SCHEMA_HINT)
        if self.param_names is not None and name not in self.param_names:
            close = difflib.get_close_matches(name, self.param_names, n=1)
            hint = f"Did you mean '{close[0]}'?" if close else SCHEMA_HINT
            raise SearchSpecError(
                f"Unknown parameter '{clipped(name)}' in {self.owner}; allowed parameters are "
                f"{', '.join(self.param_names)}", hint=hint)
        return name

    def space(self, raw: Any, path: str) -> Space:
        if not isinstance(raw, Mapping) or not raw:
            fail("space" if not path else path.rstrip("."), self.owner, "a non-empty object of parameter dimensions",
                 _show(raw) if isinstance(raw, Mapping) else raw, cls=SearchSpecError,
                 hint='Example: {"lr": [0.01, 0.1, 1], "l2": {"loguniform": [1e-6, 1]}}')
        return tuple(self.dimension(name, value, path) for name, value in raw.items())

    def _range(self, name: str, kind: str, value: Any) -> Tuple[Any, Any]:
        integer = kind == "int"
        rule = ("a range [lo, hi] of two integers" if integer else "a range [lo, hi] of two numbers")
        if (not isinstance(value, (list, tuple)) or len(value) != 2
                or any(isinstance(v, bool) or not isinstance(v, Real) for v in value)):
            fail(name, self.owner, f"{rule} for {kind}", _show(value), cls=SearchSpecError,
                 hint=f'Write it as {{"{kind}": [lo, hi]}}.')
        if any(finite_float(v) is None and not (integer and isinstance(v, Integral)) for v in value):
            fail(name, self.owner, f"a range [lo, hi] of two finite numbers for {kind}", _show(value),
                 cls=SearchSpecError, hint="Both bounds must be finite numbers below 1.8e308 in magnitude.")
        if integer and any(not isinstance(v, Integral) and not float(v).is_integer() for v in value):
            fail(name, self.owner, f"{rule} for {kind}", _show(value), cls=SearchSpecError,
                 hint=f'Write it as {{"{kind}": [lo, hi]}}.')
        lo, hi = (int(v) for v in value) if integer else (float(v) for v in value)
        if lo > hi:
            fail(name, self.owner, f"a range [lo, hi] with lo <= hi for {kind}", _show(value),
                 cls=SearchSpecError, hint="Swap the bounds.")
        if integer and (lo < -INT_LIMIT or hi >= INT_LIMIT):
            fail(name, self.owner, "a range [lo, hi] with -2^63 <= lo <= hi < 2^63 for int", _show(value),
                 cls=SearchSpecError, hint="Integer ranges are drawn as 64-bit integers.")
        if kind == "uniform" and finite_float(hi - lo) is None:
            fail(name, self.owner, "a range [lo, hi] whose width hi - lo is finite for uniform", _show(value),
                 cls=SearchSpecError, hint="Narrow the range: hi - lo must stay below 1.8e308.")
        if kind == "loguniform" and lo <= 0:
            fail(name, self.owner, "a range [lo, hi] with 0 < lo <= hi for loguniform", _show(value),
                 cls=SearchSpecError, hint='Use "uniform" for ranges that include 0 or negatives.')
        return lo, hi

    def _items(self, name: str, items: Any, path: str) -> Tuple[Any, ...]:
        if not isinstance(items, (list, tuple)) or not items:
            fail(name, self.owner, "a non-empty list", _show(items), cls=SearchSpecError,
                 hint=f"Give at least one value for '{name}'.")
        out = []
        scalar_seen = False
        for i, item in enumerate(items):
            if isinstance(item, Mapping):
                out.append(self.space(item, f"{path}{name}[{i}]."))
            elif _is_scalar(item):
                if not _is_finite(item):
                    fail(name, self.owner, "a list of finite values (no NaN or infinity)", _show(items),
                         cls=SearchSpecError, hint="NaN and infinity are not JSON numbers; give finite values.")
                scalar_seen = True
                out.append(item)
            else:
                fail(name, self.owner, "a list of scalars or objects (sub-spaces)", _show(items),
                     cls=SearchSpecError, hint=SCHEMA_HINT)
        if scalar_seen:
            self._leaf(name, path)
            seen = set()
            for item in out:
                key = (isinstance(item, bool), item) if _is_scalar(item) else None
                if key is not None and key in seen:
                    fail(name, self.owner, "a list of distinct values", _show(items), cls=SearchSpecError,
                         hint=f"{shown(item)} is listed twice; list each value once.")
                seen.add(key)
        return tuple(out)

    def _leaf(self, name: str, path: str) -> None:
        self.check_name(name)

    def dimension(self, name: Any, value: Any, path: str):
        if not isinstance(name, str) or not name:
            self.check_name(name)
        if isinstance(value, (list, tuple)):
            return Categorical(name, self._items(name, value, path), grid=True)
        if isinstance(value, Mapping):
            if len(value) != 1 or next(iter(value)) not in DIST_KEYS:
                fail(name, self.owner,
                     'a list, a scalar, or one of {"uniform": [lo, hi]}, {"loguniform": [lo, hi]}, '
                     '{"int": [lo, hi]}, {"choice": [...]}', _show(value), cls=SearchSpecError,
                     hint=SCHEMA_HINT)
            kind, arg = next(iter(value.items()))
            if kind == "choice":
                return Categorical(name, self._items(name, arg, path), grid=False)
            lo, hi = self._range(name, kind, arg)
            self._leaf(name, path)
            return {"uniform": Uniform, "loguniform": LogUniform, "int": IntRange}[kind](name, lo, hi)
        if _is_scalar(value):
            if not _is_finite(value):
                fail(name, self.owner, "finite (not NaN or infinity)", _show(value), cls=SearchSpecError,
                     hint="NaN and infinity are not JSON numbers; give a finite value.")
            self._leaf(name, path)
            return Fixed(name, value)
        fail(name, self.owner, "a list, a scalar or a distribution object", _show(value),
             cls=SearchSpecError, hint=SCHEMA_HINT)


def _int(spec: Mapping, key: str, owner: str, default: Any, *, ge: int, hint: str,
         le: Optional[int] = None, nullable: bool = False):
    """An integer key; JSON null only where it means something (slots: the planner chooses)."""
    value = spec.get(key, default)
    if value is None and nullable:
        return None
    return check_number(value, key, owner, ge=ge, le=le, integer=True, cls=SearchSpecError, hint=hint)


def _early_stopping(raw: Any, owner: str) -> Optional[EarlyStopping]:
    if raw is None or raw is False:
        return None
    sub = f"{owner} early_stopping"
    if not isinstance(raw, Mapping):
        fail("early_stopping", owner, 'null or an object like {"method": "bandit", "epsilon": 0.5, '
             '"partial_iters": 10}', _show(raw), cls=SearchSpecError, hint=SCHEMA_HINT)
    check_keys(raw, sub, ("method", "epsilon", "partial_iters"), hint=SCHEMA_HINT)
    method = check_choice(raw.get("method", "bandit"), "method", sub, ("bandit",), cls=SearchSpecError,
                          hint="Only TuPAQ's bandit action elimination is available.")
    eps = check_number(raw.get("epsilon", 0.5), "epsilon", sub, ge=0, le=MAX_EPSILON, cls=SearchSpecError,
                       hint="epsilon is the slack: 0.5 keeps configs whose loss is within 50% of the best.")
    partial = check_number(raw.get("partial_iters", 10), "partial_iters", sub, ge=1, integer=True,
                           cls=SearchSpecError, hint="Solver iterations before the bandit check.")
    return EarlyStopping(method=method, epsilon=eps, partial_iters=partial)


def parse_saved_search(saved: Mapping[str, Any]) -> "SearchSpec":
    """A spec stored by :meth:`SearchSpec.to_dict` in a procedure's saved state. Before
    2026-11-23 the default search (no dimensions) was stored with ``"space": {}``, which
    :func:`parse_search` refuses from users; such states still resume."""
    if isinstance(saved, Mapping) and saved.get("space") == {} and saved.get("method") == "grid":
        saved = {k: v for k, v in saved.items() if k != "space"}
    return parse_search(saved)


def parse_search(spec: Any, *, param_names: Optional[Iterable[str]] = None,
                 owner: str = "search") -> SearchSpec:
    """Validate a search spec (a dict from jsonb) and return a frozen :class:`SearchSpec`.

    ``param_names`` (e.g. the learner's hyperparameters) turns unknown parameter names
    into errors. Raises :class:`groupml.errors.SearchSpecError` with a HINT.
    """
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        fail("spec", owner, "a JSON object", _show(spec), cls=SearchSpecError, hint=SCHEMA_HINT)
    parser = _Parser(owner, param_names)
    if "space" in spec:
        check_keys(spec, owner, RESERVED,
                   hint='With "space" present, put every parameter inside "space".')
        space = parser.space(spec["space"], "")
    else:
        dims = {k: v for k, v in spec.items() if k not in RESERVED}
        # No dimensions at all (e.g. '{}'): one configuration, the learner's defaults.
        space = parser.space(dims, "") if dims else ()

    has_dist = _space.has_distributions(space)
    method = spec.get("method")
    if method is None:
        method = "random" if has_dist else "grid"
    check_choice(method, "method", owner, METHODS, cls=SearchSpecError,
                 hint="grid enumerates lists; random/tpe sample n_trials configs; "
                      "successive_halving/hyperband/asha also stop weak configs early; pbt trains a population "
                      "that copies and perturbs its best members.")
    if not space and method != "grid":
        fail("space", owner, f"a non-empty object of parameter dimensions for method '{method}'", _show({}),
             cls=SearchSpecError,
             hint=f'Without dimensions \'{method}\' would train copies of one configuration; give the '
                  f'parameters to search, e.g. "space": {{"l2": {{"loguniform": [1e-6, 1]}}}}, or leave '
                  f'out "method" (grid) to train the learner\'s defaults once.')
    if method == "grid" and has_dist:
        dist = next(d.name for d in _walk(space) if isinstance(d, (Uniform, LogUniform, IntRange))
                    or (isinstance(d, Categorical) and not d.grid))
        fail("method", owner, f"one of 'random', 'tpe', 'successive_halving', 'hyperband', 'asha', 'pbt' when the "
             f"space has distributions (parameter '{dist}')", method, cls=SearchSpecError,
             hint=f"Use \"method\": \"random\" or \"tpe\" with \"n_trials\", or give '{dist}' as a list of values.")
    if method == "grid":
        size = _space.grid_size(space)
        if size > MAX_GRID:
            fail("space", owner, f"a grid of at most {MAX_GRID} points", size, cls=SearchSpecError,
                 hint='Use "method": "random" or "tpe" with "n_trials" to sample a large space.')

    n_trials = check_number(spec.get("n_trials", 20), "n_trials", owner, gt=0, le=MAX_TRIALS, integer=True,
                            cls=SearchSpecError, hint="n_trials is the number of configurations to try.")
    seed = check_number(spec.get("seed", 0), "seed", owner, ge=0, le=MAX_SEED, integer=True,
                        cls=SearchSpecError, hint="Use a non-negative 64-bit integer seed.")
    epoch_iters = _int(spec, "epoch_iters", owner, 1 if method == "pbt" else 10, ge=1, le=MAX_EPOCH_ITERS,
                       hint="epoch_iters is the number of solver iterations per block.")
    if method == "pbt" and epoch_iters != 1:
        fail("epoch_iters", owner, "1 for method 'pbt' (a block is one epoch; perturbation_interval counts them)",
             epoch_iters, cls=SearchSpecError, hint="Leave out epoch_iters; set perturbation_interval instead.")
    max_epochs = _int(spec, "max_epochs", owner, 10, ge=1, le=MAX_EPOCHS,
                      hint="max_epochs is the largest number of blocks one configuration may train.")
    min_epochs = _int(spec, "min_epochs", owner, 1, ge=1,
                      hint="min_epochs is the smallest block budget (first rung) of halving methods.")
    if min_epochs > max_epochs:
        fail("min_epochs", owner, f"<= max_epochs ({max_epochs})", min_epochs, cls=SearchSpecError,
             hint="Lower min_epochs or raise max_epochs.")
    eta = _int(spec, "eta", owner, 3, ge=2, le=1000, hint="eta is the halving rate; 3 keeps the best third.")
    slots = _int(spec, "slots", owner, None, ge=1, le=MAX_TRIALS, nullable=True,
                 hint="slots is the number of configurations trained together per data pass.")
    if method == "tpe" and slots is not None and slots > MAX_TPE_SLOTS:
        # every TPE proposal scans the study's trials: 12,000 at once took 32 s without a cancel point
        fail("slots", owner, f"<= {MAX_TPE_SLOTS} for method 'tpe'", slots, cls=SearchSpecError,
             hint="TPE learns from finished trials, so few in flight is its point; use random for wide batches.")
    if method == "hyperband":
        # Li et al.'s brackets start ceil((s_max + 1) / (s + 1) * eta**s) configurations each:
        # huge for a large max_epochs / min_epochs ratio (2.2e9 at 2**30 with eta 2), which
        # planning alone would not survive
        total = sum(rungs[0][0] for rungs in hyperband_brackets(max_epochs, eta, min_epochs))
        if total > MAX_TRIALS:
            fail("max_epochs", owner, f"small enough that Hyperband's brackets start at most {MAX_TRIALS} "
                 f"configurations (eta {eta}, min_epochs {min_epochs}); they would start {total}", max_epochs,
                 cls=SearchSpecError, hint="Lower max_epochs, or raise min_epochs or eta.")
    early_stopping = _early_stopping(spec.get("early_stopping"), owner)
    pbt = _pbt(spec, owner, method, space, max_epochs=max_epochs, slots=slots, early_stopping=early_stopping)
    return SearchSpec(method=method, space=space, n_trials=n_trials, seed=seed, early_stopping=early_stopping,
                      epoch_iters=epoch_iters, max_epochs=max_epochs, min_epochs=min_epochs, eta=eta,
                      slots=slots, **pbt)


def _pbt(spec: Mapping, owner: str, method: str, space: Space, *, max_epochs: int, slots: Optional[int],
         early_stopping: Optional[EarlyStopping]) -> Dict[str, Any]:
    """The population based training keys (only with method 'pbt')."""
    if method != "pbt":
        given = [k for k in PBT_KEYS if k in spec]
        if given:
            fail(given[0], owner, "given only with method 'pbt'", _show(spec[given[0]]), cls=SearchSpecError,
                 hint=f"{', '.join(PBT_KEYS)} set population based training; add \"method\": \"pbt\" or drop "
                      f"them.")
        return {}
    population = _int(spec, "population", owner, 8, ge=2, le=MAX_POPULATION,
                      hint="population is the number of configurations PBT trains together.")
    interval = _int(spec, "perturbation_interval", owner, 1, ge=1,
                    hint="perturbation_interval is the number of epoch blocks between exploit/explore steps.")
    if interval >= max_epochs:
        fail("perturbation_interval", owner, f"< max_epochs ({max_epochs})", interval, cls=SearchSpecError,
             hint="With perturbation_interval >= max_epochs no member is ever exploited; lower it or raise "
                  "max_epochs.")
    quantile = check_number(spec.get("quantile", 0.25), "quantile", owner, gt=0, le=0.5, cls=SearchSpecError,
                            hint="quantile is the fraction of the population replaced (bottom) and copied (top) "
                                 "at each perturbation, e.g. 0.25.")
    resample = check_number(spec.get("resample_probability", 0.25), "resample_probability", owner, ge=0, le=1,
                            cls=SearchSpecError,
                            hint="resample_probability is the chance that explore draws a parameter afresh "
                                 "from the space instead of perturbing it.")
    if slots is not None and slots < population:
        fail("slots", owner, f">= population ({population}) for method 'pbt'", slots, cls=SearchSpecError,
             hint="PBT trains its whole population together; leave out slots or raise it.")
    if early_stopping is not None:
        fail("early_stopping", owner, "null for method 'pbt'", "an object", cls=SearchSpecError,
             hint="PBT replaces weak members itself; drop early_stopping.")
    nested = next((d.name for d in space if isinstance(d, Categorical)
                   and any(_space.is_subspace(it) for it in d.items)), None)
    if nested is not None:
        fail(nested, owner, "a list or choice of plain values for method 'pbt' (no sub-spaces)", "a sub-space",
             cls=SearchSpecError, hint="PBT perturbs values one dimension at a time; give a flat space.")
    return {"population": population, "perturbation_interval": interval, "quantile": float(quantile),
            "resample_probability": float(resample)}


def _walk(space: Space):
    for dim in space:
        yield dim
        if isinstance(dim, Categorical):
            for item in dim.items:
                if _space.is_subspace(item):
                    yield from _walk(item)
