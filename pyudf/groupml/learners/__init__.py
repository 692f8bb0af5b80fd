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
    HopScheduler, hop_order, HOP_POLICIES           # the hopper's visit decisions (pure; Cerebro's Alg. 1 too)
    replica_holders, joining_partitions, visit_log_violations   # availability maps, checks of a visit log
    TrialAccessors, TrialRecord, find_trial      # converged/status/iterations/params of a trainer
    MODEL_KEY, chosen_families, mentions_model, check_family_choice, choice_param_names, split_params
                                                 # a search over model families
    train_lightgbm_distributed                   # LightGBM data-parallel over shards
    # for the grouped executor
    mlp, dpsgd, mlp_family, partial_stats, merge_stats   # MLP training states and DP steps
    glmsgd                                       # GLM mini-batch SGD states (model hopper visits)
    check_lgbm_text, extend_margins, free_ports, lgb_module, train_lightgbm_rank_isolated
    pack_container, unpack_container, as_data, validation_loss, validation_metrics
    mask_of_hash, row_hash_and_order
    merge_standardization                        # GLM column centres/scales from shard moments
"""

from ._families import FAMILIES, GLMFamily, get_family
from ._glm import GLMTrainer, fit_many, standardization as merge_standardization
from ._holdout import holdout_mask, row_hash
from ._metrics import LOSS_OF, METRICS
from ._model import GLMModel, load_model, register_loader
from ._extfamilies import EXTRA_FAMILIES, LearnerFamily
from ._factory import LEARNER_FAMILIES, access_pattern, get_learner_family, make_trainer, model_identity
from ._mlp import MLPModel, MLPTrainer
from ._lgbm import LightGBMModel, LightGBMTrainer, train_lightgbm, train_lightgbm_distributed
from ._hopper import (POLICIES as HOP_POLICIES, HopScheduler, hop_order, joining_partitions, replica_holders,
                      visit_log_violations)
from ._transformed import TransformedModel, wrap as wrap_transformed
from ._sharded import replay, run_mop, train_sharded, visit
from ._trials import TrialAccessors, TrialRecord, find_trial
from ._choice import (MODEL_KEY, check_family_choice, choice_param_names, chosen_families, mentions_model,
                      split_params)
# what the grouped executor builds on: the MLP's training state and synchronous data-parallel step
# as namespaces (torch is loaded by their functions, not on import), LightGBM's checks and ranks,
# the container format, data and metric helpers, the holdout hash
from . import _dpsgd as dpsgd
from . import _glmsgd as glmsgd
from . import _mlp as mlp
from ._container import pack as pack_container, unpack as unpack_container
from ._data import as_data
from ._holdout import mask_of_hash, row_hash_and_order
from ._lgbm import (check_in_child as check_lgbm_text, extend_margins, free_ports, lgb_module,
                    train_lightgbm_rank_isolated)
from ._metrics import validation_loss, validation_metrics
from ._mlp import _family as mlp_family, merge_stats, partial_stats

__all__ = [
    "FAMILIES", "GLMFamily", "get_family", "GLMTrainer", "fit_many", "holdout_mask", "row_hash",
    "LOSS_OF", "METRICS", "GLMModel", "load_model", "register_loader",
    "EXTRA_FAMILIES", "LearnerFamily", "LEARNER_FAMILIES", "access_pattern", "get_learner_family",
    "make_trainer", "model_identity", "MLPModel", "MLPTrainer", "LightGBMModel", "LightGBMTrainer", "train_lightgbm",
    "train_lightgbm_distributed", "replay", "run_mop", "train_sharded", "visit",
    "HopScheduler", "hop_order", "TransformedModel", "wrap_transformed", "HOP_POLICIES", "joining_partitions", "replica_holders", "visit_log_violations", "TrialAccessors", "TrialRecord", "find_trial",
    "MODEL_KEY", "check_family_choice", "choice_param_names", "chosen_families", "mentions_model", "split_params",
    "dpsgd", "glmsgd", "mlp", "pack_container", "unpack_container", "as_data", "mask_of_hash", "row_hash_and_order", "merge_standardization",
    "check_lgbm_text", "extend_margins", "free_ports", "lgb_module", "train_lightgbm_rank_isolated",
    "validation_loss", "validation_metrics", "mlp_family", "merge_stats", "partial_stats",
]
