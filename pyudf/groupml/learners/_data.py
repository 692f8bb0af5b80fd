"""Input checks shared by every trainer (GLM, MLP, LightGBM): one place for their rules."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..errors import ArrayLengthError, DataError, DatatypeMismatchError, InvalidParameterError
from ..validation import check_choice


def as_data(X, y, what: str) -> Tuple[np.ndarray, np.ndarray]:
    """X as a C-contiguous float64 matrix and y as a float64 vector of the same length."""
    try:
        X = np.ascontiguousarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise DatatypeMismatchError(f"The {what} must be numeric",
                                    hint="Pass float8 features and a numeric label.") from None
    if X.ndim != 2:
        raise DatatypeMismatchError(f"The {what} features must be a 2-D matrix; got {X.ndim} "
                                    "dimensions", hint="Pass X with shape (rows, features).")
    if X.shape[0] != y.shape[0]:
        raise ArrayLengthError(f"The {what} has {X.shape[0]} feature rows but {y.shape[0]} labels",
                               hint="X and y must have one entry per row.")
    if not np.isfinite(X).all():
        raise DataError(f"The {what} features contain NaN or infinite values",
                        hint="Skip rows with NULL or NaN features before training.")
    return X, y


def train_val(fam, X_train, y_train, X_val, y_val, *, need_features: bool = False):
    """Checked (X, y, X_val, y_val); without validation data the training rows score."""
    X, y = as_data(X_train, y_train, "training data")
    if X.shape[0] == 0:
        raise DataError("The training data has no rows",
                        hint="A group needs at least one training row.")
    if need_features and X.shape[1] == 0:
        raise DataError("The training data has no feature columns",
                        hint="Pass at least one feature.")
    y = fam.prepare_labels(y, "the training data")
    if X_val is None:
        return X, y, X, y
    Xv, yv = as_data(X_val, y_val, "validation data")
    if Xv.shape[1] != X.shape[1]:
        raise ArrayLengthError(f"The validation data has {Xv.shape[1]} features; the "
                               f"training data has {X.shape[1]}",
                               hint="Use the same feature columns for both.")
    return X, y, Xv, fam.prepare_labels(yv, "the validation data")


def choose_metric(fam, metric: Optional[str]) -> str:
    """The selection metric: the family's default, or a checked user choice."""
    if metric is None:
        metric = fam.default_metric
    return check_choice(metric, "metric", fam.owner, fam.metric_names,
                        hint=f"Model '{fam.name}' is scored with {', '.join(fam.metric_names)}.")


def check_iterations(iterations) -> int:
    """The argument of Trainer.run: a whole number >= 1."""
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise InvalidParameterError(f"The 'iterations' value of run must be an integer >= 1; "
                                    f"got {iterations}")
    return iterations
