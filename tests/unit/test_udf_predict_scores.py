"""Scores that are not finite (groupml.udf.predict.finite_scores and its callers), and the
cancel check scoring uses where no statement can run (groupml.db.pending_interrupt_check)."""

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from groupml import db
from groupml.errors import FeatureNotSupportedError, NumericOverflowError, PassedOnError
from groupml.learners import EXTRA_FAMILIES, GLMModel
from groupml.udf import predict as P


class Margins:
    """A model whose margins are given (the scoring functions see only decision_function)."""

    regression = False

    def __init__(self, z, regression=False):
        self.z, self.regression = np.asarray(z, dtype=np.float64), regression

    def decision_function(self, X):
        return self.z

    def proba_of(self, z):
        return 1.0 / (1.0 + np.exp(-z))


def _overflow(fn, *args):
    with pytest.raises(NumericOverflowError) as info:
        fn(*args)
    return info.value


def test_an_infinite_or_nan_score_is_22003_naming_the_row():
    big = np.float64(1e308)
    with np.errstate(over="ignore", invalid="ignore"):
        inf = big * 619.0                     # +inf
        nan = inf - inf                       # NaN
    assert np.isposinf(inf) and np.isnan(nan)
    for z, row in (([0.5, inf, 1.0], 2), ([nan], 1), ([-inf, 2.0], 1), ([1.0, 2.0, nan], 3)):
        err = _overflow(P.finite_scores, np.array(z), "predict_batch")
        assert err.sqlstate == "22003"
        assert err.message == (f"The features of row {row} given to predict_batch are too large for the model: "
                               f"its score is not a finite number")
        assert err.hint.startswith("Give features on the scale the model was trained on")
    # rows of a later chunk are numbered from the call's first row
    assert "row 4098 " in _overflow(P.finite_scores, np.array([1.0, nan]), "predict_batch", 4096).message
    z = np.array([-1e300, 0.0, 1e300])
    assert P.finite_scores(z, "predict") is z


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_classifier_gives_no_class_or_probability_for_a_non_finite_margin(bad):
    # an infinite margin would otherwise give class 1 / 0 and probability 1 / 0
    model = Margins([1.0, bad])
    for score in (P.labels, P.probabilities):
        assert "row 2 " in _overflow(score, model, None, "f").message
    reg = Margins([3.0, bad], regression=True)
    assert "row 2 " in _overflow(P.labels, reg, None, "predict").message
    assert P.labels(Margins([-2.0, 3.0]), None, "predict").tolist() == [0, 1]
    assert P.probabilities(Margins([0.0]), None, "predict_proba").tolist() == [0.5]


def test_a_linear_model_whose_product_overflows_is_refused_on_every_path():
    # one product overflows to +inf whatever the BLAS kernel; the pair to +inf or NaN by kernel
    for coef, x in (([619.0, 619.0, 1.0], [1e308, 0.0, 0.0]), ([619.0, 619.0, 1.0], [1e308, -1e308, 0.0])):
        for fam in ("logistic", "svm", "linear"):
            model = GLMModel(fam, coef, -4.18, {})
            X = np.array([[1.0, 2.0, 3.0], x])
            with np.errstate(over="ignore", invalid="ignore"):
                assert "row 2 " in _overflow(P.labels, model, X, "predict_batch").message
                if fam == "logistic":
                    assert "row 2 " in _overflow(P.probabilities, model, X, "predict_proba_batch").message
    # a model without probabilities says so for scores that are fine
    with pytest.raises(FeatureNotSupportedError):
        P.probabilities(GLMModel("svm", [1.0], 0.0, {}), np.array([[1.0]]), "predict_proba")


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_an_mlp_score_is_refused_when_a_value_inside_overflowed(activation):
    # relu(-inf) = 0 and tanh(+-inf) = +-1: an overflow in a hidden layer could leave a finite,
    # meaningless output; the model marks such rows NaN, so scoring refuses them
    from groupml.learners._mlp import MLPModel, build_net, decision_values, torch_module

    torch = torch_module()
    fam = EXTRA_FAMILIES["mlp"]
    params = fam.validate_params({"layers": [2], "activation": activation})
    net = build_net(params, 2)
    with torch.no_grad():
        net.hidden[0].weight.fill_(1e30)
        net.hidden[0].bias.zero_()
        net.out.weight.fill_(1.0)
        net.out.bias.fill_(-0.5)
    model = MLPModel("mlp", params, 2, net)
    # -1e10 is finite in float32, 1e30 * -1e10 is not: both pre-activations are -inf, which
    # relu makes 0 and tanh -1, so the output alone is finite; 1e300 overflows float32 itself
    X = np.array([[0.5, -0.25], [-1e10, -1e10], [1e300, 0.0]])
    assert np.isfinite(decision_values(net, X[:2], False)).all()
    z = model.decision_function(X)
    assert np.isfinite(z[0]) and np.isnan(z[1]) and np.isnan(z[2])
    assert "row 2 " in _overflow(P.labels, model, X, "predict_batch").message
    assert "row 2 " in _overflow(P.probabilities, model, X, "predict_proba_batch").message
    assert P.labels(model, X[:1], "predict").shape == (1,)


def _flags(**set_):
    names = ("InterruptPending", "QueryCancelPending", "ProcDiePending", "InterruptHoldoffCount",
             "QueryCancelHoldoffCount", "CritSectionCount")
    return {n: SimpleNamespace(value=int(set_.get(n, 0))) for n in names}


def test_the_statement_free_cancel_check_reads_the_servers_flags():
    db.pending_interrupt_check(_flags())()                                       # nothing pending
    db.pending_interrupt_check(_flags(QueryCancelPending=1))()                   # not yet signalled
    with pytest.raises(PassedOnError) as info:
        db.pending_interrupt_check(_flags(InterruptPending=1, QueryCancelPending=1))()
    assert info.value.sqlstate == "57014" and info.value.hint
    with pytest.raises(PassedOnError) as info:
        db.pending_interrupt_check(_flags(InterruptPending=1, ProcDiePending=1, QueryCancelPending=1))()
    assert info.value.sqlstate == "57P01" and info.value.hint
    # where the server would not act on them yet, neither does the check
    db.pending_interrupt_check(_flags(InterruptPending=1, QueryCancelPending=1, QueryCancelHoldoffCount=1))()
    db.pending_interrupt_check(_flags(InterruptPending=1, ProcDiePending=1, InterruptHoldoffCount=1))()
    db.pending_interrupt_check(_flags(InterruptPending=1, QueryCancelPending=1, CritSectionCount=1))()


def test_outside_a_server_there_is_no_parallel_mode_and_no_cancel_check():
    assert "plpy" not in sys.modules
    assert db.in_parallel_mode() is False
    assert db.cancel_check_here() is None
