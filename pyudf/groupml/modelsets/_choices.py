"""Checks of the model-set arguments every entry point shares."""

from __future__ import annotations

from ..errors import InvalidParameterError, NullValueError
from ..validation import shown

MISSING_CHOICES = ("error", "null")


def check_set_name(name, owner: str) -> str:
    if name is None:
        raise NullValueError(f"The 'model_set' value of {owner} must be a model set's name; got null",
                             hint="Pass the name given to groupml.publish or train_groups(model_set => ...).")
    if not isinstance(name, str) or not name.strip():
        raise InvalidParameterError(f"The 'model_set' value of {owner} must be a non-empty name; got {shown(name)}",
                                    hint="Name the set, e.g. 'churn_by_country'.")
    return name


def check_on_missing(value, owner: str) -> str:
    if value not in MISSING_CHOICES:
        raise InvalidParameterError(
            f"The 'on_missing' value of {owner} must be one of {', '.join(MISSING_CHOICES)}; got {shown(value)}",
            hint="'error' refuses a row whose group has no model in the set's active version; 'null' gives it "
                 "a NULL prediction.")
    return value
