"""predict / predict_proba and their batch forms.

Deserialized models are cached per backend in a small LRU, so scoring a table row by row
decodes each model once. PL/Python hands every call a new bytes object, so a dict keyed by
the bytes would hash the whole model (tens of KB for LightGBM) on every row; the cache is
keyed by (length, the bytes before the body -- the header, which holds the body's SHA-256)
and a hit is confirmed by comparing the bytes with the cached ones (a memory compare, several
times faster than hashing them): a value that differs anywhere is never served another's model.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Tuple

import numpy as np

from ..errors import ArrayLengthError, DataError, InvalidParameterError, NumericOverflowError
from . import sql_entry

#: Models kept decoded per backend, and the model bytes they may hold in all. A table scored
#: row by row meets its groups' models in row order: with 100 per-group LightGBM models and 64
#: places, a third of the rows decoded a model again (12.3k rows/s; 30k with every model kept).
CACHE_SIZE = 256
CACHE_BYTES = 256 << 20
#: Bytes of a model value that key the cache: its length and this prefix (magic, kind and the
#: container header with the body's digest fit in it for groupml's models)
KEY_PREFIX = 2048
_cache: "OrderedDict[tuple, Tuple[bytes, object, int]]" = OrderedDict()   # value: (bytes, model, charged)
_cache_bytes = 0


def load_cached(data: bytes):
    from ..learners import load_model

    key = (len(data), data[:KEY_PREFIX])
    hit = _cache.get(key)
    if hit is not None and hit[0] == data:
        _cache.move_to_end(key)
        return hit[1]
    global _cache_bytes
    model = load_model(data)
    old = _cache.pop(key, None)
    if old is not None:
        _cache_bytes -= old[2]
    # charged for what it holds decoded: a small compressed value may unpack to far more
    size = len(data) + int(getattr(model, "memory_bytes", lambda: 0)())
    _cache[key] = (data, model, size)
    _cache_bytes += size
    while len(_cache) > CACHE_SIZE or (_cache_bytes > CACHE_BYTES and len(_cache) > 1):
        _cache_bytes -= _cache.popitem(last=False)[1][2]
    return model


def _model_of(fit, fn: str):
    model = fit.get("model") if isinstance(fit, dict) else None
    if model is None:
        status = fit.get("status") if isinstance(fit, dict) else None
        shown = "NULL" if status is None else repr(status)
        raise InvalidParameterError(
            f"The 'fit' value of {fn} must hold a trained model; got a fit with status {shown} and no model",
            hint="Groups whose status is not 'ok' have no model; filter with WHERE (fit).status = 'ok'.")
    return load_cached(bytes(model))


_WIDTH_HINT = "Build the features array from the same columns, in the same order, as for training."


def _matrix(model, rows, fn: str, *, whose: str = "The model", width_hint: str = _WIDTH_HINT) -> np.ndarray:
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
        raise ArrayLengthError(f"{whose} expects {model.n_features} features; found {X.shape[1]}", hint=width_hint)
    return X


def one_row(model, features, fn: str, *, whose: str = "The model", width_hint: str = _WIDTH_HINT,
            row_hint: str = "") -> np.ndarray:
    """``features`` (one row, as an array of one or a 1 x d array) as a 1 x d matrix for
    ``model``; the ERRORs of :func:`_matrix`, and one for several rows."""
    X = _matrix(model, features, fn, whose=whose, width_hint=width_hint)
    if X.shape[0] != 1:        # a two-dimensional array: predicting its first row alone would hide the rest
        raise ArrayLengthError(f"The 'features' value of {fn} must be one row; got a two-dimensional array of "
                               f"{X.shape[0]} rows",
                               hint=row_hint or f"Pass one row as a one-dimensional array, or use "
                                                f"groupml.{fn}_batch for many rows at once.")
    return X


def finite_scores(scores: np.ndarray, fn: str, start: int = 0) -> np.ndarray:
    """``scores`` (a model's margins or values) if every one is finite; else 22003 naming the
    first row whose score is not. An infinite score is refused like a NaN, a classifier's too:
    it comes from an overflow on the way, after which even its sign means nothing (1e308 * w -
    1e308 * w + b is NaN with one BLAS kernel and +inf with another, whose fused multiply-add
    keeps the second product exact, while the true margin is b)."""
    bad = ~np.isfinite(scores)
    if bad.any():
        row = start + int(np.argmax(bad)) + 1
        raise NumericOverflowError(
            f"The features of row {row} given to {fn} are too large for the model: its score is not a finite "
            f"number", hint="Give features on the scale the model was trained on (values near 1e308, or above "
                            "1e30 for an MLP, overflow); clip or rescale them.")
    return scores


def labels(model, X, fn: str, start: int = 0) -> np.ndarray:
    """``model.predict(X)``: the class of each finite margin (a classifier), or the value (a
    regressor); an ERROR where a score is not finite (:func:`finite_scores`)."""
    z = finite_scores(model.decision_function(X), fn, start)
    return z if model.regression else (z > 0).astype(np.int64)


def probabilities(model, X, fn: str, start: int = 0) -> np.ndarray:
    """``model.predict_proba(X)``, from finite margins only (:func:`finite_scores`): the
    probability of an infinite margin would be a confident 1 or 0."""
    return model.proba_of(finite_scores(model.decision_function(X), fn, start))


@sql_entry
def predict(fit, features):
    model = _model_of(fit, "predict")
    return float(labels(model, one_row(model, features, "predict"), "predict")[0])


@sql_entry
def predict_proba(fit, features):
    model = _model_of(fit, "predict_proba")
    return float(probabilities(model, one_row(model, features, "predict_proba"), "predict_proba")[0])


#: Rows scored between two cancel checks of the batch forms (a million rows through an 81 MB
#: LightGBM model took minutes in one call that a cancel could not interrupt).
BATCH_CHUNK_ROWS = 4096


def _in_chunks(score, model, X, fn: str) -> list:
    """``score(model, chunk, fn, first row)`` over row chunks of ``X``, checking for a cancel
    between them."""
    from ..db import cancel_check_here

    check = cancel_check_here()
    out = []
    for s in range(0, X.shape[0], BATCH_CHUNK_ROWS):
        if s and check is not None:
            check()
        out.extend(score(model, X[s:s + BATCH_CHUNK_ROWS], fn, s).astype(float).tolist())
    return out


@sql_entry
def predict_batch(fit, features):
    model = _model_of(fit, "predict_batch")
    if len(features) == 0:
        return []
    return _in_chunks(labels, model, _matrix(model, features, "predict_batch"), "predict_batch")


@sql_entry
def predict_proba_batch(fit, features):
    model = _model_of(fit, "predict_proba_batch")
    if len(features) == 0:
        return []
    return _in_chunks(probabilities, model, _matrix(model, features, "predict_proba_batch"), "predict_proba_batch")
