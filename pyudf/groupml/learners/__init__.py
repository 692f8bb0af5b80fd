"""Learners: batched GLM solvers, validation metrics, safe model format, holdout.

Public API (everything else in this package is private)::

    FAMILIES, get_family(name)                  # 'logistic', 'linear', 'svm'
    GLMTrainer(family, X_train, y_train, X_val, y_val, *, metric=None)   # engine.Trainer
    fit_many(family, X, y, params_list, *, X_val=None, y_val=None, metric=None)
    GLMModel, load_model(data), register_loader(kind, loader)
    holdout_mask(X, y, fraction, seed=0)
    METRICS, LOSS_OF

    # every learner (docs/learners_mlp_lgbm.md); torch/lightgbm are imported lazily
    LEARNER_FAMILIES, get_learner_family(name), access_pattern(name)
    make_trainer(family, X_train, y_train, X_val=None, y_val=None, *, metric=None)
    model_identity(family, valid_params)        # params with those training ignores reset
    MLPTrainer, MLPModel, LightGBMTrainer, LightGBMModel
    train_sharded, replay, visit, run_mop        # sharded sequential training (MOP/GAP)
    HopScheduler, hop_order                      # the hopper's visit decisions (pure)
    train_lightgbm_distributed                   # LightGBM data-parallel over shards
"""

from ._families import FAMILIES, GLMFamily, get_family
from ._glm import GLMTrainer, fit_many
from ._holdout import holdout_mask, row_hash
from ._metrics import LOSS_OF, METRICS
from ._model import GLMModel, load_model, register_loader
from ._extfamilies import EXTRA_FAMILIES, LearnerFamily
from ._factory import LEARNER_FAMILIES, access_pattern, get_learner_family, make_trainer, model_identity
from ._mlp import MLPModel, MLPTrainer
from ._lgbm import LightGBMModel, LightGBMTrainer, train_lightgbm, train_lightgbm_distributed
from ._hopper import HopScheduler, hop_order
from ._transformed import TransformedModel
from ._sharded import replay, run_mop, train_sharded, visit

__all__ = [
    "FAMILIES", "GLMFamily", "get_family", "GLMTrainer", "fit_many", "holdout_mask", "row_hash",
    "LOSS_OF", "METRICS", "GLMModel", "load_model", "register_loader",
    "EXTRA_FAMILIES", "LearnerFamily", "LEARNER_FAMILIES", "access_pattern", "get_learner_family",
    "make_trainer", "model_identity", "MLPModel", "MLPTrainer", "LightGBMModel", "LightGBMTrainer", "train_lightgbm",
    "train_lightgbm_distributed", "replay", "run_mop", "train_sharded", "visit",
    "HopScheduler", "hop_order", "TransformedModel",
]
