"""GLMs trained by mini-batch SGD under model hopper parallelism: the SGD pass against a plain
numpy reference, the training state, the search a 'mop' run trains, and the GLM hopper over a
fake in-process pool (replayed bit for bit from its visit log)."""

import numpy as np
import pytest

from groupml.errors import InvalidParameterError, ModelFormatError
from groupml.executor.core import check_strategy, fit_with_trainer, validate_any
from groupml.executor.invariants import schedule_violations
from groupml.executor.patterns import ShardedGLMHopTrainer
from groupml.learners import fit_many, glmsgd, load_model, merge_stats, partial_stats, visit_log_violations
from groupml.learners._glmsgd import SGDState, sgd_pass

from test_executor_patterns import fake_group


def data(n=600, d=3, seed=0, regression=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1.0, 50.0, 0.01])[:d] + np.array([3.0, -200.0, 0.0])[:d]
    z = (X[:, 0] - 3.0) * 2.0 - (X[:, 1] + 200.0) / 25.0 + rng.normal(scale=0.3, size=n)
    return X, (z if regression else (z > 0).astype(float))


def stats_of(X, y):
    return merge_stats([partial_stats(X, y)], X.shape[1])


def reference_pass(family, params, v, X, y, shift, scale, seed_key, class_w=None):
    """Mini-batch SGD on explicitly standardized columns, written out row-wise in plain numpy."""
    lr, l2, l1, bs = params["lr"], params["l2"], params["l1"], params["batch_size"]
    icpt = params["fit_intercept"]
    Xs = (X - (shift if icpt else 0.0)) / scale
    v = v.copy()
    d = X.shape[1]
    perm = np.random.default_rng(list(seed_key)).permutation(X.shape[0])
    for start in range(0, X.shape[0], bs):
        rows = perm[start:start + bs]
        xb, yb = Xs[rows], y[rows]
        z = xb @ v[:d] + v[d]
        if family == "logistic":
            r = 1.0 / (1.0 + np.exp(-z)) - yb
        elif family == "linear":
            r = z - yb
        elif params.get("loss") == "hinge":
            t = 2 * yb - 1
            r = -t * (1 - t * z > 0)
        else:
            t = 2 * yb - 1
            r = -2 * t * np.maximum(0.0, 1 - t * z)
        if class_w is not None:
            r = r * np.where(yb > 0.5, class_w[1], class_w[0])
        g = np.concatenate([xb.T @ r / len(rows) + l2 * v[:d], [r.mean() if icpt else 0.0]])
        v -= lr * g
        if l1 > 0:
            v[:d] = np.sign(v[:d]) * np.maximum(np.abs(v[:d]) - lr * l1, 0.0)
    return v


@pytest.mark.parametrize("family, extra", [
    ("logistic", {}), ("logistic", {"l2": 0.05, "class_weight": "balanced"}), ("logistic", {"fit_intercept": False}),
    ("linear", {"l2": 0.01}), ("linear", {"l1": 0.02}), ("svm", {}), ("svm", {"loss": "hinge", "lr": 0.05}),
])
def test_sgd_pass_matches_a_numpy_reference(family, extra):
    X, y = data(regression=family == "linear")
    params = dict({"lr": 0.1, "batch_size": 32, "seed": 4}, **extra)
    st = SGDState(glmsgd.init_state(family, params, 3, stats_of(X, y)))
    st.theta = np.array([0.3, -0.2, 0.1, 0.05])
    key = (4, 2, 1, 7)
    got = sgd_pass(st, X, y, seed_key=key)
    want = reference_pass(family, st.params, st.theta, X, y, st.shift, st.scale, key, st.class_w)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert not np.array_equal(got, st.theta)


def test_class_weights_are_the_balanced_ones_of_the_group():
    X, y = data()
    st = SGDState(glmsgd.init_state("logistic", {"class_weight": "balanced"}, 3, stats_of(X, y)))
    n1 = y.sum()
    np.testing.assert_allclose(st.class_w, [len(y) / (2 * (len(y) - n1)), len(y) / (2 * n1)], rtol=1e-12)
    assert SGDState(glmsgd.init_state("logistic", {}, 3, stats_of(X, y))).class_w is None


def test_a_visit_is_pure_and_seeded_by_epoch_and_partition():
    X, y = data()
    s0 = glmsgd.init_state("logistic", {"lr": 0.2, "batch_size": 50}, 3, stats_of(X, y))
    a = glmsgd.visit(s0, X, y, epoch=0, shard_id=1)
    assert glmsgd.visit(s0, X, y, epoch=0, shard_id=1) == a            # same inputs, same bytes
    assert glmsgd.visit(s0, X, y, epoch=1, shard_id=1) != a            # another batch order
    assert glmsgd.visit(s0, X, y, epoch=0, shard_id=0) != a
    assert SGDState(a).epochs_done == 1 and SGDState(s0).epochs_done == 0
    other_seed = glmsgd.init_state("logistic", {"lr": 0.2, "batch_size": 50, "seed": 9}, 3, stats_of(X, y))
    assert SGDState(glmsgd.visit(other_seed, X, y, epoch=0, shard_id=1)).theta.tolist() != SGDState(a).theta.tolist()


def test_the_model_holds_the_weights_on_the_users_scale():
    X, y = data()
    state = glmsgd.init_state("logistic", {"lr": 0.1}, 3, stats_of(X, y))
    for e in range(3):
        state = glmsgd.visit(state, X, y, epoch=e, shard_id=0)
    st = SGDState(state)
    model = load_model(glmsgd.state_model(state).to_bytes())
    Xs = (X - st.shift) / st.scale
    np.testing.assert_allclose(model.decision_function(X), Xs @ st.theta[:3] + st.theta[3], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(glmsgd.state_margins(state, X), model.decision_function(X), rtol=1e-12)
    assert model.params["solver"] == "sgd" and model.family == "logistic"


def test_sgd_reaches_the_accuracy_of_lbfgs_on_separable_data():
    X, y = data(n=2000)
    Xv, yv = data(n=500, seed=1)
    state = glmsgd.init_state("logistic", {"lr": 0.5, "batch_size": 64}, 3, stats_of(X, y))
    for e in range(10):
        for s, part in enumerate(np.array_split(np.arange(len(y)), 2)):
            state = glmsgd.visit(state, X[part], y[part], epoch=e, shard_id=s)
    sgd_acc = float(np.mean((glmsgd.state_margins(state, Xv) > 0) == (yv > 0.5)))
    (lbfgs_model, _), = fit_many("logistic", X, y, [{}])
    lbfgs_acc = float(np.mean(lbfgs_model.predict(Xv) == yv))
    assert lbfgs_acc > 0.9 and sgd_acc >= lbfgs_acc - 0.03


def test_a_damaged_state_is_refused():
    X, y = data()
    state = glmsgd.init_state("linear", {}, 3, stats_of(X, y))
    with pytest.raises(ModelFormatError):
        SGDState(state[:-8])
    with pytest.raises(ModelFormatError):
        SGDState(b"\x00\x00\x00\x02{}")
    with pytest.raises(InvalidParameterError, match="'sgd'"):
        glmsgd.init_state("linear", {"solver": "lbfgs"}, 3, stats_of(X, y))


def test_mop_search_makes_sgd_explicit_and_refuses_what_sgd_cannot_honour():
    assert glmsgd.mop_search("logistic", {}) == {"solver": "sgd"}
    assert glmsgd.mop_search("logistic", {"space": {"lr": [0.1, 0.01]}, "method": "grid"}) == {
        "space": {"lr": [0.1, 0.01], "solver": "sgd"}, "method": "grid"}
    assert glmsgd.mop_search("svm", {"solver": ["auto"], "l2": [0.1]}) == {"solver": ["sgd"], "l2": [0.1]}
    for bad, what in [({"solver": "lbfgs"}, "'solver'"), ({"space": {"solver": ["sgd", "gd"]}}, "'gd'"),
                      ({"space": {"l2": [{"l2": 0.1, "solver": "lbfgs"}]}}, "'lbfgs'"),
                      ({"tol": [1e-3]}, "'tol'"), ({"space": {"epochs": [3]}}, "max_iter")]:
        with pytest.raises(InvalidParameterError, match=what) as err:
            glmsgd.mop_search("logistic", bad)
        assert err.value.hint
    # the rewritten searches validate as every configuration trained: lr is read by sgd
    _, spec, _ = validate_any("logistic", glmsgd.mop_search("logistic", {"lr": [0.1, 0.3]}), {})
    check_strategy("algebraic", "mop", "logistic")


@pytest.fixture
def glm_sharded(monkeypatch):
    X, y = data(n=900)
    cuts = [(0, 300), (300, 350), (650, 250)]
    pool, ctx = fake_group(monkeypatch, X, y, cuts)
    return X, y, cuts, pool, ctx


def test_the_glm_hopper_replays_bit_for_bit_and_keeps_the_invariants(glm_sharded):
    X, y, cuts, pool, ctx = glm_sharded
    Xv, yv = data(200, seed=1)
    search = glmsgd.mop_search("logistic", {"method": "grid", "epoch_iters": 1,
                                            "space": {"lr": [0.3, 0.03], "max_iter": [3], "batch_size": [40]}})
    fam, spec, opts = validate_any("logistic", search, {})
    tr = ShardedGLMHopTrainer(fam, ctx, Xv, yv, seed=3, policy="randomized")
    res = fit_with_trainer(tr, fam, spec, n_train=900, n_val=200, n_skipped=0, d=3, pattern="algebraic")
    assert res.status == "ok" and len(res.trials) == 2
    assert res.metrics["accuracy"] > 0.85
    visits = [e for e in pool.log if e["kind"] == "visit"]
    assert len(visits) == 2 * 3 * 3
    assert schedule_violations(pool.log, {"g": 900}, {}) == []
    v = [{"trial": e["trials"][0], "epoch": e["pass"], "shard": e["shard"], "worker": e["worker"],
          "start": e["started"], "end": e["finished"]} for e in visits]
    assert visit_log_violations(v, 3, {0: 3, 1: 3}) == []
    parts = [(X[s:s + n], y[s:s + n]) for s, n in cuts]
    stats = merge_stats([partial_stats(*p) for p in parts], 3)
    for tid in (0, 1):
        state = glmsgd.init_state("logistic", tr.params(tid), 3, stats)
        for e in visits:
            if e["trials"] == [tid]:
                state = glmsgd.visit(state, *parts[e["shard"]], epoch=e["pass"], shard_id=e["shard"])
        assert glmsgd.state_model(state).to_bytes() == tr.model(tid).to_bytes()
    assert load_model(res.model).params["solver"] == "sgd"


def test_a_glm_hop_run_resumed_from_any_block_equals_the_uninterrupted_one(glm_sharded):
    from groupml.executor.checkpoint import decode, encode
    from groupml.executor.patterns import _mop_trainer

    X, y, cuts, pool, ctx = glm_sharded
    Xv, yv = data(200, seed=1)
    search = glmsgd.mop_search("logistic", {"method": "grid", "epoch_iters": 1, "space": {
        "lr": [0.3, 0.03], "max_iter": [3], "batch_size": [40], "class_weight": [None, "balanced"]}})
    fam, spec, opts = validate_any("logistic", search, {})

    def fit(resume=None, checkpoint=None):
        tr = _mop_trainer(fam, ctx, Xv, yv, opts, lgbm_timeout_s=1, flexible=True, resume=resume)
        return fit_with_trainer(tr, fam, spec, n_train=900, n_val=200, n_skipped=0, d=3, pattern="algebraic",
                                checkpoint=checkpoint, resume=resume)

    saved = []
    full = fit(checkpoint=lambda e, state: saved.append(encode(state)))
    assert len(saved) == 3 and full.status == "ok"
    for blob in saved[:-1]:
        again = fit(resume=decode(blob))
        assert again.model == full.model and again.score == full.score and again.params == full.params
