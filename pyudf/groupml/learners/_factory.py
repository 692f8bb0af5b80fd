"""One entry point for every learner: family lookup and the matching engine.Trainer.

``FAMILIES``/``get_family`` keep naming the batched GLM families (the GLM trainer's
own lookup); :data:`LEARNER_FAMILIES` and :func:`get_learner_family` know every model
a user can ask for, and :func:`make_trainer` builds the trainer of its access pattern:

=====================  ============  ==========================================
family                 pattern       trainer
=====================  ============  ==========================================
logistic, linear, svm  algebraic     :class:`GLMTrainer` (configs batched, W d x k)
mlp, mlp_regressor     sequential    :class:`MLPTrainer` (PyTorch, CPU)
lightgbm,              sampling      :class:`LightGBMTrainer`
lightgbm_regressor
=====================  ============  ==========================================

torch and lightgbm are imported only when their trainer or model is used.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from ..errors import InvalidParameterError, UndefinedObjectError
from ..validation import shown
from ._extfamilies import EXTRA_FAMILIES, LearnerFamily
from ._families import FAMILIES, GLMFamily

LEARNER_FAMILIES: Dict[str, Any] = {**FAMILIES, **EXTRA_FAMILIES}


def access_pattern(family) -> str:
    """'algebraic', 'sequential' or 'sampling' (Kingpin section 2.2)."""
    fam = get_learner_family(family)
    return "algebraic" if isinstance(fam, GLMFamily) else fam.pattern


def get_learner_family(name: Any, owner: Optional[str] = None):
    """The family object of any learner; unknown -> UndefinedObjectError. ``owner``: whose
    'model' value it is (messages name it)."""
    if isinstance(name, (GLMFamily, LearnerFamily)):
        return name
    if name is None:
        raise InvalidParameterError(f"The 'model' value{f' of {owner}' if owner else ''} must name a model family; "
                                    f"got null",
                                    hint=f"Known model families are {', '.join(sorted(LEARNER_FAMILIES))}.")
    fam = LEARNER_FAMILIES.get(name) if isinstance(name, str) else None
    if fam is None:
        raise UndefinedObjectError(
            f"Unknown model family {shown(name)}",
            hint=f"Known model families are {', '.join(sorted(LEARNER_FAMILIES))}.")
    return fam


def make_trainer(family, X_train, y_train, X_val=None, y_val=None, *,
                 metric: Optional[str] = None, interrupt_check: Optional[Callable[[], None]] = None):
    """The engine.Trainer for ``family`` over one train/validation split, ``interrupt_check``
    set (a backend's cancel check: also called while a first import of torch loads)."""
    fam = get_learner_family(family)
    if isinstance(fam, GLMFamily):
        from ._glm import GLMTrainer
        trainer = GLMTrainer(fam, X_train, y_train, X_val, y_val, metric=metric)
    elif fam.pattern == "sequential":
        from ._mlp import MLPTrainer, optimizer_ready
        optimizer_ready(interrupt_check)
        trainer = MLPTrainer(fam, X_train, y_train, X_val, y_val, metric=metric)
    else:
        from ._lgbm import LightGBMTrainer
        trainer = LightGBMTrainer(fam, X_train, y_train, X_val, y_val, metric=metric)
    if interrupt_check is not None:
        trainer.interrupt_check = interrupt_check
    return trainer


def model_identity(family, valid: Dict[str, Any]) -> Dict[str, Any]:
    """Validated params with those training does not read (``family.unread_params``: a step
    size under L-BFGS, momentum under Adam) put back to the family's defaults: two
    configurations train the same model exactly when their identities are equal."""
    fam = get_learner_family(family)
    unread = fam.unread_params(valid)
    if not unread:
        return dict(valid)
    defaults = fam.defaults
    return {k: (defaults[k] if k in unread else v) for k, v in valid.items()}
