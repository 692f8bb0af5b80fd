"""A fork of an MLP training state (population based training): the parent's network and
optimizer moments with the child's optimizer settings; PBT through the one-backend path."""

import numpy as np
import pytest

from groupml.errors import InvalidParameterError, PrerequisiteStateError, SearchSpecError
from groupml.fitting import fit_group
from groupml.learners import MLPTrainer, mlp

PARAMS = {"layers": [8], "epochs": 6, "batch_size": 32, "lr": 0.01, "seed": 1}


def _data(n=600, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, (X[:, 0] - X[:, 1] + 0.3 * rng.normal(size=n) > 0).astype(float)


def _weights(run):
    return {k: v.detach().numpy().copy() for k, v in run.net.state_dict().items()}


def test_fork_state_keeps_the_network_and_moments_and_changes_the_optimizer():
    X, y = _data()
    t = MLPTrainer("mlp", X[:480], y[:480], X[480:], y[480:])
    t.add(0, PARAMS)
    t.run(2)
    state = t.run_state(0)
    child = mlp.run_from_bytes(mlp.fork_state(state, dict(PARAMS, lr=0.012, batch_size=64)))
    parent = mlp.run_from_bytes(state)
    assert child.params["lr"] == 0.012 and child.params["batch_size"] == 64
    assert all(g["lr"] == 0.012 for g in child.opt.param_groups)
    assert (child.epochs_done, child.visits) == (parent.epochs_done, parent.visits)
    pw, cw = _weights(parent), _weights(child)
    assert all(np.array_equal(pw[k], cw[k]) for k in pw)
    ps, cs = parent.opt.state_dict()["state"], child.opt.state_dict()["state"]
    assert all(np.array_equal(ps[i]["exp_avg"].numpy(), cs[i]["exp_avg"].numpy()) for i in ps)
    # a fork is deterministic: the same parent state and params train to the same weights
    a, b = (MLPTrainer("mlp", X[:480], y[:480], X[480:], y[480:]) for _ in range(2))
    for tr in (a, b):
        tr.restore(0, mlp.fork_state(state, dict(PARAMS, lr=0.012)))
        tr.run(1)
    wa, wb = _weights(a.model(0)), _weights(b.model(0))
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    # the network is the parent's: a fork may not change it
    with pytest.raises(InvalidParameterError, match="'layers' value of a fork"):
        mlp.fork_state(state, dict(PARAMS, layers=[4]))


def test_trainer_fork_starts_from_the_parent_at_its_epoch():
    X, y = _data()
    t = MLPTrainer("mlp", X[:480], y[:480], X[480:], y[480:])
    t.add(0, PARAMS)
    t.run(2)
    t.fork(1, dict(PARAMS, lr=0.008), 0, 2)
    assert t.iterations(1) == 2 and t.params(1)["lr"] == 0.008
    assert t.score(1) == t.score(0)
    with pytest.raises(PrerequisiteStateError, match="has trained 2 epochs, not the 1"):
        t.fork(2, PARAMS, 0, 1)


def test_pbt_runs_in_one_backend_and_records_lineage():
    X, y = _data()
    spec = {"method": "pbt", "population": 4, "perturbation_interval": 1, "max_epochs": 3, "seed": 5,
            "space": {"lr": {"loguniform": [0.001, 0.05]}, "layers": ["8"], "epochs": [3], "batch_size": [32]}}
    res = fit_group(X, y, "mlp", spec, {"seed": 0})
    assert res.status == "ok"
    forked = [t for t in res.trials if "parent_trial_id" in t]
    assert len(forked) == 2                   # one member replaced after epochs 1 and 2
    for t in forked:
        parent = next(p for p in res.trials if p["trial_id"] == t["parent_trial_id"])
        assert t["epochs"] == 3 and t["epoch_losses"][:t["forked_at_epoch"]] == \
            parent["epoch_losses"][:t["forked_at_epoch"]]
        assert t["params"]["layers"] == [8]
    assert res.params == next(t for t in res.trials if t["is_best"])["params"]


def test_pbt_refuses_models_and_dimensions_a_fork_cannot_copy():
    X, y = _data()
    with pytest.raises(SearchSpecError, match="must not be 'pbt' for model 'logistic'"):
        fit_group(X, y, "logistic", {"method": "pbt", "space": {"l2": {"loguniform": [1e-4, 1]}}}, {})
    with pytest.raises(SearchSpecError, match="'layers' value of search must be one value for method 'pbt'"):
        fit_group(X, y, "mlp", {"method": "pbt", "max_epochs": 3, "space": {"layers": ["8", "4"]}}, {})
    with pytest.raises(SearchSpecError, match="must not choose the model family for method 'pbt'"):
        fit_group(X, y, "mlp", {"method": "pbt", "max_epochs": 3,
                                "space": {"model": ["mlp"], "lr": {"loguniform": [0.001, 0.1]}}}, {})
