"""Validation metrics of the GLM learners.

Every function takes the 0/1 (or real) labels and the model's *decision values*
(margins ``z``; for logistic regression ``p = sigmoid(z)``).  :data:`LOSS_OF`
turns a metric into the loss the search minimises (lower is better).
"""

from __future__ import annotations

import math
from typing import Callable, Dict

import numpy as np


def rankdata(a) -> np.ndarray:
    """Ranks 1..n with ties averaged (scipy.stats.rankdata's 'average'), in numpy only.

    scipy.stats costs about a second to import, which every new backend would pay.
    """
    a = np.asarray(a)
    sorter = np.argsort(a, kind="mergesort")
    inv = np.empty(sorter.size, dtype=np.intp)
    inv[sorter] = np.arange(sorter.size, dtype=np.intp)
    s = a[sorter]
    obs = np.r_[True, s[1:] != s[:-1]]
    dense = obs.cumsum()[inv]
    count = np.r_[np.nonzero(obs)[0], len(obs)]
    return 0.5 * (count[dense] + count[dense - 1] + 1)


def accuracy(y: np.ndarray, z: np.ndarray) -> float:
    """Share of rows whose predicted label (z > 0) equals the 0/1 label."""
    if y.shape[0] == 0:
        return math.nan
    return float(np.mean((z > 0) == (y > 0.5)))


def auc(y: np.ndarray, z: np.ndarray) -> float:
    """Area under the ROC curve from ranks (ties get their average rank).

    NaN when the labels hold a single class.
    """
    pos = y > 0.5
    n1 = int(np.count_nonzero(pos))
    n0 = y.shape[0] - n1
    if n1 == 0 or n0 == 0:
        return math.nan
    ranks = rankdata(z)  # 'average' method
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def logloss(y: np.ndarray, z: np.ndarray) -> float:
    """Mean negative log-likelihood of a logistic model, computed stably from z."""
    if y.shape[0] == 0:
        return math.nan
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def mse(y: np.ndarray, z: np.ndarray) -> float:
    if y.shape[0] == 0:
        return math.nan
    return float(np.mean(np.square(z - y)))


def rmse(y: np.ndarray, z: np.ndarray) -> float:
    return math.sqrt(mse(y, z)) if y.shape[0] else math.nan


def mae(y: np.ndarray, z: np.ndarray) -> float:
    if y.shape[0] == 0:
        return math.nan
    return float(np.mean(np.abs(z - y)))


def r2(y: np.ndarray, z: np.ndarray) -> float:
    """Coefficient of determination; NaN when the labels are constant (or empty)."""
    if y.shape[0] == 0:
        return math.nan
    ss_tot = float(np.sum(np.square(y - y.mean())))
    if ss_tot == 0.0:
        return math.nan
    return 1.0 - float(np.sum(np.square(y - z))) / ss_tot


METRICS: Dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": accuracy,
    "auc": auc,
    "logloss": logloss,
    "rmse": rmse,
    "mse": mse,
    "mae": mae,
    "r2": r2,
}

# metric value -> loss (lower is better)
LOSS_OF: Dict[str, Callable[[float], float]] = {
    "accuracy": lambda v: 1.0 - v,
    "auc": lambda v: 1.0 - v,
    "logloss": lambda v: v,
    "rmse": lambda v: v,
    "mse": lambda v: v,
    "mae": lambda v: v,
    "r2": lambda v: 1.0 - v,
}


def validation_loss(metric: str, y: np.ndarray, z: np.ndarray) -> float:
    """The loss the search minimises: ``metric`` of margins ``z`` against labels ``y``, as a loss."""
    with np.errstate(all="ignore"):   # a diverged config's margins score as nan/inf, silently
        return float(LOSS_OF[metric](METRICS[metric](y, z)))


def validation_metrics(report_metrics, metric: str, y: np.ndarray, z: np.ndarray) -> Dict[str, float]:
    """Every metric a family reports (``report_metrics``), plus the selected ``metric``."""
    names = list(report_metrics)
    if metric not in names:
        names.append(metric)
    with np.errstate(all="ignore"):
        return {name: float(METRICS[name](y, z)) for name in names}
