"""A job's candidates (groupml.tenancy): the candidates jsonb expanded into configurations with
stable keys, and their estimated cost. Plain data in, decisions out: no database."""

import json

import pytest

from groupml.errors import InvalidParameterError, SearchSpecError, UndefinedObjectError
from groupml.tenancy import (FAMILY_COST, LGBM_ROUND_COST, MAX_CANDIDATES, MLP_STEP_COST, MLP_WEIGHT_COST,
                             TASK_METRIC, candidate_key, canonical_params, estimated_cost, expand_candidates)


# ---------------------------------------------------------------- expand_candidates
def test_names_params_and_grids_expand_into_keyed_configurations():
    task, cands = expand_candidates(["svm", {"model": "logistic", "params": {"l2": 0.1}},
                                     {"model": "logistic", "search": {"l2": [0, 0.01]}}])
    assert task == "classification"
    assert [c["family"] for c in cands] == ["svm", "logistic", "logistic", "logistic"]
    assert cands[0] == {"family": "svm", "params": {}, "key": "svm:{}"}
    assert cands[1]["params"] == {"l2": 0.1} and cands[1]["key"] == 'logistic:{"l2":0.1}'
    # every key is the candidate's family and canonical params, whatever form they came in
    for c in cands:
        assert c["key"] == candidate_key(c["family"], c["params"])
        assert c["params"] == canonical_params(c["family"], c["params"])
    assert len({c["key"] for c in cands}) == 4


def test_a_regression_job_and_the_metric_of_each_task():
    task, cands = expand_candidates([{"model": "linear", "search": {"l2": [0.0, 1.0]}}])
    assert task == "regression" and len(cands) == 2
    assert TASK_METRIC == {"classification": "accuracy", "regression": "r2"}


def test_null_params_are_the_defaults_and_one_configuration_written_twice_is_refused():
    assert expand_candidates([{"model": "svm", "params": None}])[1] == expand_candidates(["svm"])[1]
    with pytest.raises(InvalidParameterError) as e:
        # 1 and 1.0 are one value: the same configuration twice
        expand_candidates([{"model": "logistic", "params": {"l2": 1}}, {"model": "logistic", "params": {"l2": 1.0}}])
    assert e.value.message == ("The 'candidates' value of submit_job lists the configuration "
                               'logistic:{"l2":1.0} twice')


def test_a_random_search_gives_each_configuration_of_a_discrete_space_once():
    _, cands = expand_candidates([{"model": "logistic",
                                   "search": {"method": "random", "n_trials": 20, "seed": 3,
                                              "space": {"l2": [0.0, 0.5]}}}])
    assert sorted(c["key"] for c in cands) == ['logistic:{"l2":0.5}', 'logistic:{}']


@pytest.mark.parametrize("raw, cls, message", [
    ({"model": "svm"}, InvalidParameterError,
     'The \'candidates\' value of submit_job must be a JSON array; got {"model": "svm"}'),
    ([], InvalidParameterError, "The 'candidates' value of submit_job must list at least one model; got []"),
    ([3], InvalidParameterError, "The 'candidates[0]' value of submit_job must be a model name or an object; got 3"),
    ([{"params": {}}], InvalidParameterError, "The 'model' value of submit_job candidates[0] is missing"),
    ([{"model": "svm", "params": {}, "search": {}}], InvalidParameterError,
     "submit_job candidates[0] gives both 'params' and 'search'; give one of them"),
    ([{"model": "svm", "params": [1]}], InvalidParameterError,
     "The 'params' value of submit_job candidates[0] must be a JSON object; got [1]"),
    ([{"model": "svm", "search": [1]}], SearchSpecError,
     "The 'search' value of submit_job candidates[0] must be a JSON object; got [1]"),
    ([{"model": "svm", "search": {"method": "tpe", "n_trials": 4, "space": {"l2": {"uniform": [0.0, 1.0]}}}}],
     SearchSpecError, "The 'method' value of submit_job candidates[0] search must be 'grid' or 'random'; got 'tpe'"),
])
def test_bad_candidates_are_refused_with_the_value_and_the_rule(raw, cls, message):
    with pytest.raises(cls) as e:
        expand_candidates(raw)
    assert e.value.message == message
    assert e.value.hint


def test_the_owner_is_named_and_unknown_models_and_keys_are_refused():
    with pytest.raises(InvalidParameterError) as e:
        expand_candidates([], owner="_tenancy_add_candidates")
    assert "of _tenancy_add_candidates" in e.value.message
    with pytest.raises(UndefinedObjectError):
        expand_candidates(["no_such_model"])
    with pytest.raises(InvalidParameterError) as e:
        expand_candidates([{"model": "svm", "grid": {}}])
    assert "grid" in e.value.message


def test_classifiers_and_regressors_are_not_mixed():
    with pytest.raises(InvalidParameterError) as e:
        expand_candidates(["logistic", "linear"])
    assert e.value.message.startswith("The 'candidates' value of submit_job must be all classifiers (")
    assert e.value.message.endswith("; got a mix") and "logistic" in e.value.message
    assert e.value.hint == "Submit one job per task."


def test_at_most_max_candidates_configurations():
    grid = {"l2": [i / 1000 for i in range(MAX_CANDIDATES)]}
    assert len(expand_candidates([{"model": "logistic", "search": grid}])[1]) == MAX_CANDIDATES
    with pytest.raises(InvalidParameterError) as e:
        expand_candidates([{"model": "logistic", "search": grid}, {"model": "svm", "params": {"l2": 0.5}}])
    assert e.value.message == (f"The 'candidates' value of submit_job must expand into at most {MAX_CANDIDATES} "
                               f"configurations; got more")


def test_expansion_is_deterministic_and_json_serialisable():
    raw = [{"model": "mlp", "search": {"layers": ["8", "16,8"], "epochs": [2]}}, "lightgbm"]
    first, again = expand_candidates(raw), expand_candidates(json.loads(json.dumps(raw)))
    assert first == again
    json.dumps(first[1])
    assert [c["params"].get("layers") for c in first[1] if c["family"] == "mlp"] == [[8], [16, 8]]


# ---------------------------------------------------------------- estimated_cost
def test_the_cost_of_each_family_follows_its_formula():
    rows, d = 2000, 9
    assert estimated_cost("logistic", {"max_iter": 300}, rows, d) == pytest.approx(
        rows * (d + 1) * FAMILY_COST["logistic"] * 3)
    assert estimated_cost("linear", {"max_iter": 100}, rows, d) == pytest.approx(rows * (d + 1) * 0.5)
    # LightGBM: in proportion to the rounds and the leaves, at least 8 leaves
    lgb = estimated_cost("lightgbm", {"num_boost_round": 10, "num_leaves": 31}, rows, d)
    assert lgb == pytest.approx(rows * (d + 1) * 10 * LGBM_ROUND_COST)
    assert estimated_cost("lightgbm", {"num_boost_round": 10, "num_leaves": 4}, rows, d) == pytest.approx(lgb * 8 / 31)
    # MLP: weights x epochs, plus a cost per optimizer step
    mlp = estimated_cost("mlp", {"layers": [4], "epochs": 3, "batch_size": 100}, rows, d)
    weights = (d + 1) * 4 + (4 + 1) * 1
    assert mlp == pytest.approx(rows * 3 * (weights * MLP_WEIGHT_COST + MLP_STEP_COST / 100))


def test_a_cost_needs_at_least_one_row_and_validates_the_params():
    assert estimated_cost("svm", {}, 0, 3) == estimated_cost("svm", {}, 1, 3) > 0
    with pytest.raises(InvalidParameterError):
        estimated_cost("logistic", {"max_iter": 0}, 100, 3)
