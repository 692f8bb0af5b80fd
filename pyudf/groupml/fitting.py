"""Train and select one group's model: split, train every configuration together, pick.

Pure Python (no plpy): arrays and dicts in, a :class:`FitResult` out. Used by the
``learn_over_groups`` aggregate and by the catalog-writing ``train_groups``
procedure, so both select models the same way.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from .errors import InvalidParameterError
from .validation import check_bool, check_keys, check_number

OPTION_KEYS = ("validation_fraction", "metric", "seed", "progress")
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

    def as_sql(self) -> Dict[str, Any]:
        """The row of the SQL composite type groupml.fit (jsonb fields as JSON text)."""
        def js(v):
            return None if v is None else json.dumps(v, allow_nan=False, default=_json_default)
        return {
            "status": self.status, "family": self.family, "params": js(self.params),
            "metric": self.metric, "score": self.score, "metrics": js(_finite(self.metrics)),
            "n_train": self.n_train, "n_validation": self.n_validation, "n_skipped": self.n_skipped,
            "n_features": self.n_features, "trials": js(_finite(self.trials)), "message": self.message,
            "model": self.model,
        }


def _json_default(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    raise TypeError(f"not JSON serializable: {type(v).__name__}")


def _finite(obj):
    """JSON has no NaN: replace non-finite floats by null, recursively."""
    if isinstance(obj, float) or isinstance(obj, np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def empty_fit(message: str, n_skipped: int = 0, family: Optional[str] = None) -> Dict[str, Any]:
    return FitResult(status="no_rows", family=family, message=message, n_skipped=n_skipped).as_sql()


def parse_options(options: dict, family) -> dict:
    check_keys(options, OPTIONS_OWNER, OPTION_KEYS, cls=InvalidParameterError,
               hint="Options are validation_fraction, metric, seed and progress; see SELECT groupml.help('learn_over_groups').")
    out = {
        "validation_fraction": check_number(options.get("validation_fraction", 0.2), "validation_fraction",
                                            OPTIONS_OWNER, gt=0, lt=1,
                                            hint="Use a fraction such as 0.2 (20% of each group's rows)."),
        "seed": check_number(options.get("seed", 0), "seed", OPTIONS_OWNER, ge=0, integer=True),
        "metric": options.get("metric"),
        "progress": check_bool(options.get("progress", False), "progress", OPTIONS_OWNER),
    }
    if out["metric"] is not None:
        from .validation import check_choice
        check_choice(out["metric"], "metric", OPTIONS_OWNER, family.metric_names,
                     hint=f"Model '{family.name}' can be selected on {', '.join(family.metric_names)}.")
    return out


def plan_search(family, search: dict):
    """Parse and validate a search spec for a family; grid/random points are checked up front."""
    from .search import make_procedure, parse_search

    spec = parse_search(search, param_names=family.param_names)
    if spec.method in UNBOUNDED_METHODS and "max_epochs" not in search:
        # grid/random/tpe train each configuration until the learner converges or hits its
        # max_iter; only the halving methods and an explicit max_epochs cap blocks.
        spec = dataclasses.replace(spec, max_epochs=UNLIMITED_EPOCHS)
    if spec.method in ("grid", "random"):
        for trial in make_procedure(spec).ask(1 << 30):
            family.validate_params(trial.params)
    return spec


def validate_request(model: str, search: dict, options: dict):
    """Everything about a request that can be checked before any row is read."""
    from .learners import get_family

    family = get_family(model)
    spec = plan_search(family, search)
    opts = parse_options(options, family)
    return family, spec, opts


def fit_group(X: np.ndarray, y: np.ndarray, model: str, search: dict, options: dict, *,
              n_skipped: int = 0, on_epoch: Optional[Callable[[Any], None]] = None,
              interrupt_check: Optional[Callable[[], None]] = None) -> FitResult:
    """Split the group's rows, run the search with every config batched, return the selection.

    Rows are ordered by a hash of their content before training, so the result does not
    depend on the order the rows arrived in (which a GROUP BY does not guarantee).
    ``interrupt_check`` is called after every data pass (cancel), ``on_epoch`` after every block.
    """
    from .learners import GLMTrainer, holdout_mask, row_hash
    from .search import make_procedure, run_search

    family, spec, opts = validate_request(model, search, options)
    ok = np.isfinite(y) & np.isfinite(X).all(axis=1)
    if not ok.all():
        n_skipped += int((~ok).sum())
        X, y = X[ok], y[ok]
    n, d = X.shape
    base = dict(family=family.name, n_skipped=n_skipped, n_features=d)
    if n == 0:
        return FitResult(status="no_rows", message="every row had a NULL label or a NULL/NaN feature", **base)
    family.prepare_labels(y, "label")  # DataError for labels the family cannot use
    val = holdout_mask(X, y, opts["validation_fraction"], opts["seed"])
    n_val = int(val.sum())
    n_train = n - n_val
    base.update(n_train=n_train, n_validation=n_val)
    if n_train < 2 or n_val < 1:
        return FitResult(status="too_small", message=(
            f"the group has {n} usable rows: {n_train} for training and {n_val} for validation; "
            f"need at least 2 and 1"), **base)
    order = np.argsort(row_hash(X, y, opts["seed"]), kind="stable")
    tr, va = order[~val[order]], order[val[order]]
    Xtr, ytr, Xva, yva = X[tr], y[tr], X[va], y[va]
    if family.kind == "classification" and np.unique(ytr).size < 2:
        return FitResult(status="single_class", message=(
            f"every training row of the group has label {ytr[0]:g}; a classifier needs both classes"), **base)
    trainer = GLMTrainer(family.name, Xtr, ytr, Xva, yva, metric=opts["metric"])
    if interrupt_check is not None:
        trainer.interrupt_check = interrupt_check
    result = run_search(make_procedure(spec), trainer, slots=spec.slots or 1 << 30,
                        epoch_iters=spec.epoch_iters, on_epoch=on_epoch)
    metric = trainer.metric
    trials = []
    for t in result.trials:
        tm = trainer.metrics(t.trial_id) if t.epochs else {}
        trials.append({"trial_id": t.trial_id, "params": trainer.params(t.trial_id) if t.epochs else t.params,
                       "score": tm.get(metric), "epochs": t.epochs, "status": t.status,
                       "stop_reason": t.stop_reason, "epoch_losses": list(t.scores)})
    best = result.best
    if best is None:
        return FitResult(status="failed", message="no configuration produced a finite validation score",
                         trials=trials, **base)
    model_obj = trainer.model(best.trial_id)
    metrics = trainer.metrics(best.trial_id)
    return FitResult(status="ok", params=model_obj.params, metric=metric, score=metrics.get(metric),
                     metrics=metrics, trials=trials, model=model_obj.to_bytes(), passes=trainer.passes, **base)
