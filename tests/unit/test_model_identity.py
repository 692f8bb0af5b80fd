"""Parameters training does not read: two configurations that differ only in them are one
model (grid duplicates, tenancy candidate keys)."""

import pytest

from groupml import fitting
from groupml.errors import SearchSpecError
from groupml.learners import get_learner_family, model_identity
from groupml.tenancy import candidate_key


def _plan(model, search):
    return fitting.plan_search(get_learner_family(model), search)


def test_unread_parameters_are_reset_to_the_defaults():
    fam = get_learner_family("logistic")
    lbfgs = model_identity(fam, fam.validate_params({"solver": "lbfgs", "lr": 0.5, "seed": 3}))
    assert lbfgs == fam.validate_params({"solver": "lbfgs"})
    gd = model_identity(fam, fam.validate_params({"solver": "gd", "lr": 0.5, "batch_size": 7}))
    assert gd["lr"] == 0.5 and gd["batch_size"] == fam.defaults["batch_size"]
    sgd = fam.validate_params({"solver": "sgd", "lr": 0.5, "batch_size": 7, "seed": 3})
    assert model_identity(fam, sgd) == sgd                       # sgd reads all three
    mlp = get_learner_family("mlp")
    adam = mlp.validate_params({"momentum": 0.9})
    assert model_identity(mlp, adam)["momentum"] == 0.0
    assert model_identity(mlp, mlp.validate_params({"optimizer": "sgd", "momentum": 0.9}))["momentum"] == 0.9



def test_full_batch_gd_configs_differing_only_in_seed_are_one_model():
    # full-batch gd draws no random numbers, so its seed is not part of the model
    import numpy as np

    from groupml.learners import GLMTrainer

    fam = get_learner_family("logistic")
    a = fam.validate_params({"solver": "gd", "lr": 0.5, "seed": 1})
    b = fam.validate_params({"solver": "gd", "lr": 0.5, "seed": 2})
    assert model_identity(fam, a) == model_identity(fam, b)
    assert model_identity(fam, a)["seed"] == fam.defaults["seed"]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] > 0).astype(float)
    tr = GLMTrainer("logistic", X, y, X, y)
    tr.add(1, a)
    tr.add(2, b)
    tr.run(5)
    np.testing.assert_array_equal(tr.model(1).coef, tr.model(2).coef)      # and it trains the same


@pytest.mark.parametrize("model, search, first, second", [
    ("logistic", {"lr": [0.1, 0.5], "solver": "lbfgs"}, '{"lr": 0.1, "solver": "lbfgs"}',
     '{"lr": 0.5, "solver": "lbfgs"}'),
    ("logistic", {"solver": ["lbfgs", "gd"], "lr": [0.1, 1]}, '{"lr": 0.1, "solver": "lbfgs"}',
     '{"lr": 1, "solver": "lbfgs"}'),
    ("mlp", {"momentum": [0, 0.5], "epochs": 1}, '{"epochs": 1, "momentum": 0}', '{"epochs": 1, "momentum": 0.5}'),
])
def test_a_grid_over_an_unread_parameter_is_refused(model, search, first, second):
    with pytest.raises(SearchSpecError) as err:
        _plan(model, search)
    assert err.value.message == (f"The grid of search lists one configuration twice: {first} and {second} "
                                 f"are the same model")
    assert "lr under solver lbfgs, momentum under optimizer adam" in err.value.hint


def test_grids_where_every_point_is_its_own_model_are_accepted():
    spec = _plan("logistic", {"solver": [{"solver": "lbfgs"}, {"solver": "gd", "lr": [0.1, 1]}]})
    assert spec.method == "grid"
    _plan("mlp", {"optimizer": "sgd", "momentum": [0, 0.5, 0.9], "epochs": 1})
    _plan("logistic", {"solver": "gd", "lr": [0.1, 0.5]})
    _plan("logistic", {"space": {"solver": "sgd", "seed": [1, 2]}})


def test_tenancy_keys_ignore_unread_parameters():
    assert candidate_key("logistic", {"solver": "lbfgs", "lr": 0.3}) == candidate_key("logistic", {}) \
        == "logistic:{}"
    assert candidate_key("logistic", {"solver": "gd", "lr": 0.3}) == 'logistic:{"lr":0.3,"solver":"gd"}'
    assert candidate_key("mlp", {"momentum": 0.5}) == candidate_key("mlp", {})
    assert candidate_key("mlp", {"optimizer": "sgd", "momentum": 0.5}) == \
        'mlp:{"momentum":0.5,"optimizer":"sgd"}'

