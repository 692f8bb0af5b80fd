"""predict / predict_proba and their batch forms.

Deserialized models are cached per backend in a small LRU keyed by the model bytes,
so scoring a table row by row decodes each model once.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..errors import ArrayLengthError, DataError, InvalidParameterError
from . import sql_entry

CACHE_SIZE = 64
_cache: "OrderedDict[bytes, object]" = OrderedDict()


def load_cached(data: bytes):
    from ..learners import load_model

    model = _cache.get(data)
    if model is None:
        model = load_model(data)
        _cache[data] = model
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    else:
        _cache.move_to_end(data)
    return model


def _model_of(fit, fn: str):
    model = fit.get("model") if isinstance(fit, dict) else None
    if model is None:
        status = fit.get("status") if isinstance(fit, dict) else None
        raise InvalidParameterError(
            f"The 'fit' value of {fn} must hold a trained model; got a fit with status {status!r} and no model",
            hint="Groups whose status is not 'ok' have no model; filter with WHERE (fit).status = 'ok'.")
    return load_cached(bytes(model))


def _matrix(model, rows, fn: str) -> np.ndarray:
    try:
        X = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"The 'features' value of {fn} must contain numbers only; got a NULL element",
                        hint="Replace NULL features (e.g. with coalesce) before predicting.")
    if not np.isfinite(X).all():
        raise DataError(f"The 'features' value of {fn} must not contain NULL, NaN or infinite values",
                        hint="Replace missing features (e.g. with coalesce) before predicting.")
    if X.ndim == 1:
        X = X.reshape(1, -1)
    if X.ndim != 2:
        raise DataError(f"The 'features' value of {fn} must be a two-dimensional array; got {X.ndim} dimensions",
                        hint="Pass ARRAY[ARRAY[...], ARRAY[...]] with one sub-array per row.")
    if X.shape[1] != model.n_features:
        raise ArrayLengthError(
            f"The model expects {model.n_features} features; found {X.shape[1]}",
            hint="Build the features array from the same columns, in the same order, as for training.")
    return X


def _one_row(model, features, fn: str) -> np.ndarray:
    X = _matrix(model, features, fn)
    if X.shape[0] != 1:        # a two-dimensional array: predicting its first row alone would hide the rest
        raise ArrayLengthError(f"The 'features' value of {fn} must be one row; got a two-dimensional array of "
                               f"{X.shape[0]} rows",
                               hint=f"Pass one row as a one-dimensional array, or use groupml.{fn}_batch for many "
                                    f"rows at once.")
    return X


@sql_entry
def predict(fit, features):
    model = _model_of(fit, "predict")
    return float(model.predict(_one_row(model, features, "predict"))[0])


@sql_entry
def predict_proba(fit, features):
    model = _model_of(fit, "predict_proba")
    return float(model.predict_proba(_one_row(model, features, "predict_proba"))[0])


@sql_entry
def predict_batch(fit, features):
    model = _model_of(fit, "predict_batch")
    if len(features) == 0:
        return []
    return model.predict(_matrix(model, features, "predict_batch")).astype(float).tolist()


@sql_entry
def predict_proba_batch(fit, features):
    model = _model_of(fit, "predict_proba_batch")
    if len(features) == 0:
        return []
    return model.predict_proba(_matrix(model, features, "predict_proba_batch")).astype(float).tolist()
