"""A search that chooses the model family too (TuPAQ's ChoiceP over families)."""

import json

import numpy as np
import pytest

from groupml.errors import InvalidParameterError, SearchSpecError
from groupml.fitting import fit_group, validate_request
from groupml.learners import holdout_mask, make_trainer
from groupml.learners._choice import FamilyChoiceTrainer


def interaction(n=3000, seed=0):
    """A label a linear model cannot learn (x1 * x2) and trees can."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, ((X[:, 0] * X[:, 1] + 0.3 * X[:, 2]) > 0).astype(float)


SPEC = {"method": "random", "n_trials": 8, "seed": 3, "space": {"model": {"choice": [
    {"model": "logistic", "l2": {"loguniform": [1e-4, 1]}},
    {"model": "lightgbm", "num_leaves": {"int": [7, 31]}, "num_boost_round": [40]}]}}}


def test_the_search_picks_the_family_that_fits_and_each_model_equals_training_it_alone():
    X, y = interaction()
    r = fit_group(X, y, "logistic", SPEC, {})
    assert r.status == "ok" and r.family == "lightgbm" and r.metric == "accuracy"
    families = [t["params"]["model"] for t in r.trials]
    assert set(families) == {"logistic", "lightgbm"} and len(families) == 8
    best_linear = max(t["score"] for t in r.trials if t["params"]["model"] == "logistic")
    assert r.score > best_linear + 0.15                 # trees learn the interaction
    # every trial's score is what its family's own trainer gives for its params on the split
    val = holdout_mask(X, y, 0.2, 0)
    for t in r.trials:
        params = {k: v for k, v in t["params"].items() if k != "model"}
        alone = make_trainer(t["params"]["model"], X[~val], y[~val], X[val], y[val], metric="accuracy")
        alone.add(0, params)
        while not alone.converged(0):
            alone.run(10)
        assert alone.metrics(0)["accuracy"] == pytest.approx(t["score"], abs=1e-12), t
    # the fit is the chosen family's: its model bytes load and predict as that family
    from groupml.learners import load_model
    model = load_model(r.model)
    assert model.family == "lightgbm" and model.predict(X[:5]).shape == (5,)


def test_a_family_search_is_deterministic_under_its_seed_also_with_tpe():
    X, y = interaction(n=1500, seed=1)
    tpe = dict(SPEC, method="tpe", n_trials=6)
    runs = [fit_group(X, y, "logistic", tpe, {"seed": 2}) for _ in range(2)]
    assert [t["params"] for t in runs[0].trials] == [t["params"] for t in runs[1].trials]
    assert runs[0].family == runs[1].family and runs[0].score == runs[1].score


@pytest.mark.parametrize("search, options, error, text", [
    # a regressor in a classification search
    ({"model": ["logistic", "linear"]}, {}, SearchSpecError,
     "The 'model' dimension of search may only name classification families like 'logistic'; got 'linear'"),
    ({"model": ["logistic", "forest"]}, {}, SearchSpecError,
     "The 'model' dimension of search must name model families; got 'forest'"),
    # one metric selects every family: svm has no logloss
    ({"model": ["logistic", "svm"]}, {"metric": "logloss"}, InvalidParameterError,
     "The metric 'logloss' cannot select model 'svm' of this search"),
    # a parameter outside the model dimension applies to every family: checked before training
    ({"model": ["logistic", "mlp"], "l2": [0.01]}, {}, SearchSpecError,
     "Unknown parameter 'l2' for model 'mlp'"),
    ({"method": "tpe", "n_trials": 4, "space": {"model": {"choice": ["logistic", "mlp"]},
                                                 "l2": {"loguniform": [1e-3, 1]}}}, {}, SearchSpecError,
     "Unknown parameter 'l2' for model 'mlp'"),
    ({"model": [{"l2": [0.1]}, "svm"]}, {}, SearchSpecError,
     "Every sub-space of the 'model' dimension of search must name its model"),
    ({"method": "random", "n_trials": 2, "space": {"model": {"uniform": [0, 1]}}}, {}, SearchSpecError, None),
    # one configuration written twice across families' spellings
    ({"model": [{"model": "svm", "l2": [0.1]}, {"model": "svm", "l2": [0.1]}]}, {}, SearchSpecError,
     "lists one configuration twice"),
])
def test_bad_family_searches_are_refused_before_training(search, options, error, text):
    with pytest.raises(error) as info:
        validate_request("logistic", search, options)
    assert text is None or text in info.value.message, info.value.message
    assert info.value.hint


def test_without_a_model_dimension_the_family_is_the_calls():
    # the family's own parameter check stays as it was ('model' is no parameter of logistic's)
    with pytest.raises(SearchSpecError) as info:
        validate_request("logistic", {"num_leaves": [7]}, {})
    assert "Unknown parameter 'num_leaves' in search; allowed parameters are" in info.value.message
    family, spec, opts = validate_request("logistic", {"model": ["svm"], "l2": [0.1, 1.0]}, {})
    assert family.name == "logistic" and opts["metric"] == "accuracy"



def test_the_trainer_counts_the_passes_of_every_family():
    # a family-choice search's passes are the sum of its families' passes, not the busiest one's
    X, y = interaction(n=800)
    t = FamilyChoiceTrainer("logistic", X[:600], y[:600], X[600:], y[600:], metric="accuracy")
    t.add(1, {"l2": 0.1})
    t.add(2, {"model": "svm", "l2": 0.1})
    t.run(5)
    alone = []
    for family in ("logistic", "svm"):
        one = make_trainer(family, X[:600], y[:600], X[600:], y[600:], metric="accuracy")
        one.add(1, {"l2": 0.1})
        one.run(5)
        alone.append(one.passes)
    assert min(alone) > 1 and t.passes == sum(alone)


def test_the_trainer_routes_configurations_and_refuses_unknown_ones():
    X, y = interaction(n=800)
    t = FamilyChoiceTrainer("logistic", X[:600], y[:600], X[600:], y[600:], metric="accuracy")
    t.add(1, {"l2": 0.1})
    t.add(2, {"model": "svm", "l2": 0.1})
    assert [t.family_of(i) for i in (1, 2)] == ["logistic", "svm"] and t.active() == [1, 2]
    t.run(5)
    assert t.passes > 0 and t.params(2)["model"] == "svm" and json.dumps(t.metrics(1))
    with pytest.raises(InvalidParameterError, match="Trial 3 is not in this trainer"):
        t.score(3)
