"""fit_group: split, batched search, selection, edge cases (pure Python)."""

import numpy as np
import pytest

from groupml.errors import DataError, InvalidParameterError, SearchSpecError, UndefinedObjectError
from groupml.fitting import fit_group, validate_request
from groupml.learners import GLMTrainer, holdout_mask


def data(n=600, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0).astype(float)
    return X, y


GRID = {"l2": [1e-4, 1e-2, 1.0], "class_weight": [None, "balanced"]}


def test_selects_the_best_trial_and_reports_all():
    X, y = data()
    r = fit_group(X, y, "logistic", GRID, {})
    assert r.status == "ok" and r.metric == "accuracy"
    assert len(r.trials) == 6
    assert r.score == max(t["score"] for t in r.trials)
    assert r.n_train + r.n_validation == 600 and r.n_skipped == 0
    # the selected model is the one a lone trainer gives for the chosen params on the same split
    val = holdout_mask(X, y, 0.2, 0)
    alone = GLMTrainer("logistic", X[~val], y[~val], X[val], y[val])
    alone.add(0, r.params)
    while not alone.converged(0):
        alone.run(10)
    assert alone.metrics(0)["accuracy"] == pytest.approx(r.score, abs=1e-12)


def test_row_order_does_not_matter():
    X, y = data(seed=1)
    perm = np.random.default_rng(5).permutation(len(y))
    a = fit_group(X, y, "logistic", GRID, {"seed": 3})
    b = fit_group(X[perm], y[perm], "logistic", GRID, {"seed": 3})
    assert a.params == b.params and a.n_validation == b.n_validation
    assert a.score == pytest.approx(b.score, abs=1e-12)


def test_non_finite_rows_are_skipped_and_counted():
    X, y = data(n=300)
    X[0, 1] = np.nan
    X[1, 0] = np.inf
    y[2] = np.nan
    r = fit_group(X, y, "logistic", {}, {}, n_skipped=5)
    assert r.status == "ok" and r.n_skipped == 8 and r.n_train + r.n_validation == 297


def test_too_small_and_single_class():
    X, y = data(n=2)
    assert fit_group(X, y, "logistic", {}, {}).status == "too_small"
    X, _ = data(n=50)
    r = fit_group(X, np.ones(50), "logistic", {}, {})
    assert r.status == "single_class" and r.model is None
    assert "label 1" in r.message
    r = fit_group(X, np.zeros(0)[:0] if False else np.full(50, np.nan), "logistic", {}, {})
    assert r.status == "no_rows" and r.n_skipped == 50


def test_labels_must_be_binary_for_classifiers():
    X, _ = data(n=40)
    with pytest.raises(DataError):
        fit_group(X, np.arange(40, dtype=float) % 3, "logistic", {}, {})


def test_sql_row_has_every_fit_field_and_json_text():
    X, y = data()
    row = fit_group(X, y, "svm", {"l2": [0.01]}, {"metric": "auc"}).as_sql()
    assert set(row) == {"status", "family", "params", "metric", "score", "metrics", "n_train", "n_validation",
                        "n_skipped", "n_features", "trials", "message", "model"}
    assert isinstance(row["params"], str) and isinstance(row["trials"], str)
    assert row["metric"] == "auc" and isinstance(row["model"], bytes)


@pytest.mark.parametrize("model,search,options,cls,msg", [
    ("forest", {}, {}, UndefinedObjectError, "Unknown model family 'forest'"),
    ("logistic", {"lrr": [1]}, {}, SearchSpecError, "Unknown parameter 'lrr' in search"),
    ("logistic", {"l2": [-1]}, {}, InvalidParameterError, "The 'l2' value of model 'logistic' must be >= 0; got -1"),
    ("logistic", {}, {"validation_fraction": 0}, InvalidParameterError,
     "The 'validation_fraction' value of learn_over_groups options must be > 0; got 0"),
    ("logistic", {}, {"progress": "yes"}, InvalidParameterError,
     "The 'progress' value of learn_over_groups options must be true or false; got 'yes'"),
])
def test_request_validation(model, search, options, cls, msg):
    with pytest.raises(cls) as info:
        validate_request(model, search, options)
    assert info.value.message.startswith(msg)
    assert info.value.hint
