"""Learners: batched GLM solvers, validation metrics, safe model format, holdout.

Public API (everything else in this package is private)::

    FAMILIES, get_family(name)                  # 'logistic', 'linear', 'svm'
    GLMTrainer(family, X_train, y_train, X_val, y_val, *, metric=None)   # engine.Trainer
    fit_many(family, X, y, params_list, *, X_val=None, y_val=None, metric=None)
    GLMModel, load_model(data), register_loader(kind, loader)
    holdout_mask(X, y, fraction, seed=0)
    METRICS, LOSS_OF
"""

from ._families import FAMILIES, GLMFamily, get_family
from ._glm import GLMTrainer, fit_many
from ._holdout import holdout_mask, row_hash
from ._metrics import LOSS_OF, METRICS
from ._model import GLMModel, load_model, register_loader

__all__ = [
    "FAMILIES", "GLMFamily", "get_family", "GLMTrainer", "fit_many", "holdout_mask", "row_hash",
    "LOSS_OF", "METRICS", "GLMModel", "load_model", "register_loader",
]
