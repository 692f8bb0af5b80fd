"""Hyperparameters of the non-GLM learners: the PyTorch MLP and LightGBM.

Pure Python (no torch or lightgbm import): these objects validate parameters and
labels before any heavy library is loaded, so a bad search spec fails fast.

Each learner comes as a binary classifier and a regressor, like ``logistic`` and
``linear`` among the GLMs:

* ``mlp`` / ``mlp_regressor`` -- the *sequential* access pattern (mini-batch SGD/Adam);
* ``lightgbm`` / ``lightgbm_regressor`` -- the *sampling* access pattern (GBDT).

They expose the same attributes as :class:`GLMFamily` that callers use
(``name``, ``kind``, ``owner``, ``defaults``, ``param_names``, ``metric_names``,
``report_metrics``, ``default_metric``, ``validate_params``, ``prepare_labels``).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

import numpy as np

from ..errors import DataError, SearchSpecError
from ..validation import check_choice, check_number, fail
from ._families import MAX_ITERATIONS

#: Most leaves over all of a LightGBM model's trees (num_boost_round x num_leaves): about
#: 0.4 GB of booster memory and model text at the bound (a million rounds grew a backend
#: until LightGBM aborted it on std::bad_alloc, which restarted the server).
MAX_TOTAL_LEAVES = 4_000_000

CLASSIFICATION_METRICS = ("logloss", "accuracy", "auc")
REGRESSION_METRICS = ("rmse", "mse", "mae", "r2")
MAX_LAYERS = 16
MAX_WIDTH = 65536
#: Weights between hidden layers (widths multiplied pairwise, summed): an in-database MLP of at
#: most 10 million of them (40 MB in float32, about four times that with gradients and Adam).
MAX_HIDDEN_WEIGHTS = 10_000_000
#: Hidden units times batch_size: the activations of one mini-batch (about five float32 copies
#: of them live at once: pre- and post-activation values and their gradients), ~160 MB here.
MAX_BATCH_UNITS = 8_000_000


class LearnerFamily:
    """Base of the non-GLM families; subclasses set name, kind, defaults and checks."""

    name = ""
    kind = "classification"
    pattern = ""                       # Kingpin access pattern: 'sequential' | 'sampling'
    budget_param = ""                  # the parameter bounding a config's iterations
    base_defaults: Dict[str, Any] = {}
    #: parameters a copy of a configuration's training state may change (population based
    #: training forks); empty: the family's trainers cannot fork
    fork_params: Tuple[str, ...] = ()

    @property
    def owner(self) -> str:
        return f"model '{self.name}'"

    @property
    def defaults(self) -> Dict[str, Any]:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.base_defaults.items()}

    @property
    def param_names(self) -> Tuple[str, ...]:
        return tuple(sorted(self.base_defaults))

    @property
    def metric_names(self) -> Tuple[str, ...]:
        return CLASSIFICATION_METRICS if self.kind == "classification" else REGRESSION_METRICS

    @property
    def report_metrics(self) -> Tuple[str, ...]:
        return ("accuracy", "auc", "logloss") if self.kind == "classification" else ("rmse", "mae", "r2")

    @property
    def default_metric(self) -> str:
        return "logloss" if self.kind == "classification" else "rmse"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def validate_params(self, params: Mapping[str, Any] | None) -> Dict[str, Any]:
        """Validate user hyperparameters; return a new dict with defaults filled."""
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            raise SearchSpecError(f"The parameters of {self.owner} must be an object; got "
                                  f"{type(params).__name__}",
                                  hint='Give parameters as a JSON object, e.g. {"lr": 0.01}.')
        allowed = self.param_names
        for key in params:
            if key not in allowed:
                raise SearchSpecError(
                    f"Unknown parameter '{key}' for {self.owner}; allowed parameters are "
                    f"{', '.join(allowed)}",
                    hint="Check the spelling; see SELECT groupml.help('models') for each "
                         "model's parameters.")
        out = self.defaults
        out.update(params)
        self._validate(out)
        return out

    def _validate(self, out: Dict[str, Any]) -> None:
        raise NotImplementedError

    def unread_params(self, valid: Mapping[str, Any]) -> Tuple[str, ...]:
        """Parameters of validated ``valid`` that training does not read, given the others."""
        return ()

    def prepare_labels(self, y, what: str) -> np.ndarray:
        """Return the float64 label vector; raise DataError on non-finite or non-0/1 labels."""
        y = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(y)):
            bad = y[~np.isfinite(y)][0]
            raise DataError(f"The labels of {what} must be finite numbers; got {bad}",
                            hint="Filter out rows with NULL or NaN labels.")
        if self.kind == "classification":
            bad = (y != 0.0) & (y != 1.0)
            if np.any(bad):
                value = y[bad][0]
                shown = int(value) if float(value).is_integer() else value
                raise DataError(
                    f"The labels of {what} for model '{self.name}' must be 0 or 1; got {shown}",
                    hint="Binary models need labels coded 0/1, e.g. (label = 'yes')::int.")
        return y


# ---------------------------------------------------------------------- MLP
class MLPFamily(LearnerFamily):
    """Multi-layer perceptron trained by mini-batch SGD or Adam (PyTorch, CPU)."""

    name = "mlp"
    kind = "classification"
    pattern = "sequential"
    budget_param = "epochs"
    # the optimizer's settings and the mini-batch size: a fork keeps the network and its state
    fork_params = ("lr", "momentum", "weight_decay", "batch_size")
    base_defaults: Dict[str, Any] = {
        "layers": [64, 32],
        "activation": "relu",
        "dropout": 0.0,
        "batch_size": 64,
        "optimizer": "adam",
        "lr": 0.001,
        "momentum": 0.0,
        "weight_decay": 0.0,
        "epochs": 20,
        "seed": 0,
    }

    def _validate(self, out):
        owner = self.owner
        layers = out["layers"]
        if isinstance(layers, str):          # "64,32": search specs hold scalars only
            text = layers.replace(" ", "")
            layers = text.split(",") if text else []
            try:
                layers = [int(h) for h in layers]
            except ValueError:
                fail("layers", owner, "a list of hidden layer sizes such as [64, 32] or "
                     "'64,32'", out["layers"],
                     hint="Give the hidden layer widths, e.g. [64, 32]; [] is a linear model.")
        elif isinstance(layers, int) and not isinstance(layers, bool):
            layers = [layers]
        if not isinstance(layers, (list, tuple)) or len(layers) > MAX_LAYERS:
            fail("layers", owner, f"a list of at most {MAX_LAYERS} hidden layer sizes", layers,
                 hint="Give the hidden layer widths, e.g. [64, 32] (or '64,32' in a search); "
                      "[] is a linear model.")
        out["layers"] = [check_number(h, "layers", owner, ge=1, le=MAX_WIDTH, integer=True,
                                      hint=f"Every hidden layer has 1 to {MAX_WIDTH} units, e.g. [64, 32].")
                         for h in layers]
        hidden = sum(a * b for a, b in zip(out["layers"][:-1], out["layers"][1:]))
        if hidden > MAX_HIDDEN_WEIGHTS:
            fail("layers", owner, f"hidden layers with at most {MAX_HIDDEN_WEIGHTS:,} weights between them",
                 out["layers"], hint=f"{hidden:,} weights would not fit a backend's memory; use narrower layers.")
        check_choice(out["activation"], "activation", owner, ("relu", "tanh", "gelu"))
        out["dropout"] = check_number(out["dropout"], "dropout", owner, ge=0, lt=1,
                                      hint="dropout is the probability of zeroing a hidden unit "
                                           "while training; 0 disables it.")
        out["batch_size"] = check_number(out["batch_size"], "batch_size", owner, ge=1,
                                         integer=True)
        units = out["batch_size"] * sum(out["layers"])
        if units > MAX_BATCH_UNITS:
            fail("batch_size", owner, f"<= {max(1, MAX_BATCH_UNITS // max(1, sum(out['layers'])))} with "
                 f"{sum(out['layers'])} hidden units (batch_size x hidden units = {units}, the activations of a "
                 f"mini-batch, must stay <= {MAX_BATCH_UNITS})", out["batch_size"],
                 hint="Use a smaller batch_size or narrower layers.")
        check_choice(out["optimizer"], "optimizer", owner, ("sgd", "adam"))
        out["lr"] = check_number(out["lr"], "lr", owner, gt=0,
                                 hint="lr is the optimizer's step size, e.g. 0.001 for adam.")
        out["momentum"] = check_number(out["momentum"], "momentum", owner, ge=0, lt=1,
                                       hint="momentum applies to optimizer 'sgd' only.")
        out["weight_decay"] = check_number(out["weight_decay"], "weight_decay", owner, ge=0,
                                           hint="weight_decay is the L2 penalty of the "
                                                "optimizer; 0 disables it.")
        out["epochs"] = check_number(out["epochs"], "epochs", owner, ge=1, le=MAX_ITERATIONS, integer=True,
                                     hint="epochs is the number of passes over the training rows.")
        out["seed"] = check_number(out["seed"], "seed", owner, ge=0, le=2 ** 63 - 1,
                                   integer=True)

    def unread_params(self, valid: Mapping[str, Any]) -> Tuple[str, ...]:
        return () if valid.get("optimizer") == "sgd" else ("momentum",)    # Adam has no momentum parameter


class MLPRegressorFamily(MLPFamily):
    name = "mlp_regressor"
    kind = "regression"


# ---------------------------------------------------------------------- LightGBM
class LightGBMFamily(LearnerFamily):
    """Gradient-boosted trees (LightGBM), deterministic, fixed thread count."""

    name = "lightgbm"
    kind = "classification"
    pattern = "sampling"
    budget_param = "num_boost_round"
    base_defaults: Dict[str, Any] = {
        "num_leaves": 31,
        "learning_rate": 0.1,
        "num_boost_round": 100,
        "min_data_in_leaf": 20,
        "feature_fraction": 1.0,
        "bagging_fraction": 1.0,
        "lambda_l1": 0.0,
        "lambda_l2": 0.0,
        "max_depth": -1,
        "max_bin": 255,
        "seed": 0,
    }

    def _validate(self, out):
        owner = self.owner
        out["num_leaves"] = check_number(out["num_leaves"], "num_leaves", owner, ge=2,
                                         le=131072, integer=True)
        out["learning_rate"] = check_number(out["learning_rate"], "learning_rate", owner, gt=0,
                                            hint="learning_rate shrinks each tree, e.g. 0.1.")
        out["num_boost_round"] = check_number(out["num_boost_round"], "num_boost_round", owner,
                                              ge=1, le=MAX_ITERATIONS, integer=True,
                                              hint="num_boost_round is the number of trees.")
        leaves = out["num_boost_round"] * out["num_leaves"]
        if leaves > MAX_TOTAL_LEAVES:
            fail("num_boost_round", owner, f"<= {MAX_TOTAL_LEAVES // out['num_leaves']} with num_leaves "
                 f"{out['num_leaves']} (the trees' leaves, num_boost_round x num_leaves = {leaves}, must stay <= "
                 f"{MAX_TOTAL_LEAVES}: they bound the model's memory)", out["num_boost_round"],
                 hint="Fewer rounds with a larger learning_rate, or fewer leaves.")
        out["min_data_in_leaf"] = check_number(out["min_data_in_leaf"], "min_data_in_leaf",
                                               owner, ge=1, le=2 ** 31 - 1, integer=True)
        out["feature_fraction"] = check_number(out["feature_fraction"], "feature_fraction",
                                               owner, gt=0, le=1)
        out["bagging_fraction"] = check_number(out["bagging_fraction"], "bagging_fraction",
                                               owner, gt=0, le=1,
                                               hint="bagging_fraction < 1 samples rows for "
                                                    "every tree; 1 uses all rows.")
        out["lambda_l1"] = check_number(out["lambda_l1"], "lambda_l1", owner, ge=0)
        out["lambda_l2"] = check_number(out["lambda_l2"], "lambda_l2", owner, ge=0)
        depth = check_number(out["max_depth"], "max_depth", owner, ge=-1, le=2 ** 31 - 1, integer=True,
                             hint="max_depth is -1 (no limit) or a depth >= 1.")
        if depth == 0:
            fail("max_depth", owner, "-1 (no limit) or >= 1", depth,
                 hint="max_depth is -1 (no limit) or a depth >= 1.")
        out["max_depth"] = depth
        out["max_bin"] = check_number(out["max_bin"], "max_bin", owner, ge=2, le=65535,
                                      integer=True)
        out["seed"] = check_number(out["seed"], "seed", owner, ge=0, le=2 ** 31 - 1,
                                   integer=True)


class LightGBMRegressorFamily(LightGBMFamily):
    name = "lightgbm_regressor"
    kind = "regression"


EXTRA_FAMILIES: Dict[str, LearnerFamily] = {
    f.name: f for f in (MLPFamily(), MLPRegressorFamily(), LightGBMFamily(),
                        LightGBMRegressorFamily())
}
