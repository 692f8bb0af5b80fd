"""CALL groupml.retrain_model_set(...): train_groups again with a model set's run arguments,
publishing a version that becomes active only if its validation score passes the margin.
Its own module: it calls train_groups, which publishes into model sets."""

from __future__ import annotations

from ..db import backend_session
from . import modelsets, sql_entry
from .train import train_groups


@sql_entry
def retrain_model_set(model_set, margin, workers):
    """train_groups again with the active version's run's arguments (the newest version's
    when none is active), publishing into the set with a margin (:func:`modelsets.gate`)."""
    session = backend_session()
    owner = "retrain_model_set"
    name = modelsets.check_set_name(model_set, owner)
    margin = modelsets.check_margin(margin, owner)
    r = modelsets.retrain_arguments(session, name, owner)
    with modelsets.retraining(margin):
        train_groups(r["source"], list(r["group_by"]), list(r["features"]), r["label"], r["family"], r["search"],
                     r["options"], None, workers, "auto", name)
