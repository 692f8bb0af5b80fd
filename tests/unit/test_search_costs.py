"""Search budgets, the planner's batch size and estimate, trial cost records, and the
cost model's accuracy on held-out measured runs of the batched trainer."""

import json
import math
import statistics

import numpy as np
import pytest

from groupml.fitting import default_cost_model, fit_group, plan_group, validate_request
from groupml.learners import get_family
from groupml.planner import CostModel
from groupml.search import parse_search, search_budget
from groupml.udf.search import explain_plan, trial_rows

SPACE = {"l2": {"loguniform": [1e-6, 1]}}


def _data(n=600, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) > 0).astype(float)
    return X, y


def test_budget_grid_random_tpe():
    b = search_budget(parse_search({"l2": [0, 1, 2], "class_weight": [None, "balanced"]}), max_iter=100)
    assert (b.method, b.n_configs, b.in_flight, b.epochs_per_config, b.epochs) == ("grid", 6, 6, 10, 60)
    b = search_budget(parse_search({"method": "tpe", "n_trials": 7, "epoch_iters": 20, "max_epochs": 50,
                                    "space": SPACE}), max_iter=100)
    assert (b.n_configs, b.epochs_per_config, b.epochs) == (7, 5, 35)   # ceil(100 / 20) < 50
    assert b.in_flight == 4                                             # TPE: max(4, ceil(7 / 4))
    assert search_budget(parse_search({"method": "tpe", "n_trials": 40, "space": SPACE})).in_flight == 10
    assert "TPE" in b.note and b.early_stopping is None
    b = search_budget(parse_search({"method": "random", "space": SPACE,
                                    "early_stopping": {"epsilon": 0.2, "partial_iters": 25}}))
    assert b.early_stopping.startswith("bandit (epsilon 0.2, check every 3 epoch block(s) = 30 iterations)")


def test_budget_with_a_huge_learner_max_iter():
    # exact integer arithmetic: max_iter / epoch_iters as a float would overflow
    b = search_budget(parse_search({"l2": [0, 1], "max_epochs": 7}), max_iter=10 ** 400)
    assert (b.epochs_per_config, b.epochs) == (7, 14)


def test_budget_counts_a_partial_last_block():
    # max_iter 25 in blocks of 10 iterations is ceil(25 / 10) = 3 blocks per configuration
    b = search_budget(parse_search({"l2": [0, 1], "epoch_iters": 10, "max_epochs": 10}), max_iter=25)
    assert (b.epochs_per_config, b.epochs) == (3, 6)


def test_budget_hyperband_r81_eta3():
    b = search_budget(parse_search({"method": "hyperband", "max_epochs": 81, "eta": 3, "space": SPACE}),
                      max_iter=10 ** 9)
    # Li et al. table for R = 81, eta = 3: n_i per bracket 81 27 9 3 1 | 34 11 3 1 | 15 5 1 | 8 2 | 5
    assert b.n_configs == (81 + 27 + 9 + 3 + 1) + (34 + 11 + 3 + 1) + (15 + 5 + 1) + (8 + 2) + 5
    assert b.in_flight == 81 + 34 + 15 + 8 + 5
    assert b.epochs == (81 * 1 + 27 * 3 + 9 * 9 + 3 * 27 + 81) + (34 * 3 + 11 * 9 + 3 * 27 + 81) + \
        (15 * 9 + 5 * 27 + 81) + (8 * 27 + 2 * 81) + 5 * 81
    sh = search_budget(parse_search({"method": "successive_halving", "n_trials": 27, "max_epochs": 9,
                                     "space": SPACE}))
    assert (sh.n_configs, sh.in_flight, sh.epochs) == (27 + 9 + 3, 27, 27 * 1 + 9 * 3 + 3 * 9)
    asha = search_budget(parse_search({"method": "asha", "n_trials": 10, "max_epochs": 9, "space": SPACE}))
    assert (asha.n_configs, asha.epochs) == (10, 90)
    # a learner's max_iter stops every configuration at ceil(max_iter / epoch_iters) blocks,
    # whatever rung it reaches: the budget said 1902 blocks where at most 10 per config train
    capped = search_budget(parse_search({"method": "hyperband", "max_epochs": 81, "eta": 3, "epoch_iters": 10,
                                         "space": SPACE}), max_iter=100)
    assert capped.epochs_per_config == 10
    assert capped.epochs == sum(n * min(r, 10) for n, r in (
        (81, 1), (27, 3), (9, 9), (3, 27), (1, 81), (34, 3), (11, 9), (3, 27), (1, 81), (15, 9), (5, 27), (1, 81),
        (8, 27), (2, 81), (5, 81)))
    assert "max_iter stops every configuration after 10 epoch blocks" in capped.note


def test_plan_group_batch_size_and_estimate():
    fam = get_family("logistic")
    spec = validate_request("logistic", {"l2": [0, 0.1, 1, 10]}, {})[1]
    plan = plan_group(spec, fam, 10000, 20)
    assert plan["slots"] == 4 and "every configuration" in plan["why"]
    model = default_cost_model()
    assert plan["seconds"] == pytest.approx(plan["passes"] * model.predict(10000, 20, 4))
    spec2 = validate_request("logistic", {"l2": [0, 0.1, 1, 10], "slots": 2}, {})[1]
    assert plan_group(spec2, fam, 10000, 20)["slots"] == 2
    # a cost model whose per-config cost is all fixed overhead still batches everything
    flat = CostModel({"fixed": 1.0, "compute": 0.0, "memory": 0.0})
    assert plan_group(spec, fam, 10000, 20, flat)["slots"] == 4
    # max_iter in the space bounds the epochs of grid search
    spec3 = validate_request("logistic", {"l2": [0, 1], "max_iter": 30}, {})[1]
    assert plan_group(spec3, fam, 100, 3)["budget"]["epochs"] == 2 * 3


def test_plan_group_sizes_the_batch_for_the_configurations_in_flight():
    # k is chosen to give the configurations in flight together one pass, not all proposals:
    # Hyperband R = 9, eta = 3 has 9 + 5 + 3 = 17 rung-0 configurations in flight (22 in all)
    fam = get_family("logistic")
    spec = validate_request("logistic", {"method": "hyperband", "max_epochs": 9, "eta": 3, "space": SPACE}, {})[1]
    plan = plan_group(spec, fam, 10000, 20)
    assert (plan["budget"]["in_flight"], plan["budget"]["n_configs"]) == (17, 22)
    assert plan["slots"] == 17


def test_fit_records_cost_per_trial_and_best_flag():
    X, y = _data()
    res = fit_group(X, y, "logistic", {"l2": [1e-4, 1e-2, 1, 100]}, {})
    assert res.status == "ok" and res.slots == 4
    assert res.seconds > 0 and res.estimated_seconds > 0 and res.passes > 0
    assert 1 <= res.mean_batch <= 4
    assert sum(t["is_best"] for t in res.trials) == 1
    for t in res.trials:
        assert t["passes"] >= t["epochs"] >= 1 and t["seconds"] >= 0 and t["iterations"] >= 1
        assert len(t["epoch_losses"]) == t["epochs"]
    assert sum(t["seconds"] for t in res.trials) == pytest.approx(res.seconds, rel=1e-3, abs=1e-5)
    rows = trial_rows(res.as_sql())
    assert [r["is_best"] for r in rows] == [t["is_best"] for t in res.trials]
    assert json.loads(rows[0]["params"])["l2"] == 1e-4
    # fits written before is_best existed: the best is found by params and score
    legacy = res.as_sql()
    legacy["trials"] = json.dumps([{k: v for k, v in t.items() if k != "is_best"} for t in res.trials])
    assert [r["is_best"] for r in trial_rows(legacy)] == [t["is_best"] for t in res.trials]
    assert trial_rows(None) == [] and trial_rows({"trials": None}) == []


def test_fit_with_slots_one_gives_same_models():
    X, y = _data(seed=3)
    spec = {"l2": [1e-3, 1e-1, 10]}
    a = fit_group(X, y, "logistic", spec, {})
    b = fit_group(X, y, "logistic", dict(spec, slots=1), {})
    assert a.params == b.params and a.score == b.score
    assert b.slots == 1 and b.mean_batch == pytest.approx(1.0)
    assert b.passes > a.passes


def test_explain_plan_rows():
    model = default_cost_model()
    rows = explain_plan("logistic", {"method": "tpe", "n_trials": 40, "space": SPACE,
                                     "early_stopping": {"method": "bandit"}}, {},
                        n_groups=10, n_rows=100000, largest=40000, d=8, cost_model=model)
    got = {r["item"]: r["value"] for r in rows}
    assert got["procedure"] == "tpe" and got["early_stopping"] == "bandit"
    assert got["configurations"] == "40" and got["batch_size"] == "10"   # TPE keeps 1/4 in flight
    assert got["groups"] == "10" and got["largest_group_rows"] == "40000" and got["cost_model"] == "priors"
    assert 0 < float(got["estimated_seconds_largest_group"]) < float(got["estimated_seconds"])


def _seconds_per_pass(sizes, seed=0):
    """Seconds per pass of every size, as a machine with a fixed per-flop, per-row and per-call
    cost would take them, each with up to 30% measurement noise (seeded): the fit's input
    without the timing of whichever machine runs the test (the measured accuracy of the
    calibrated model on real passes is bench/bench_calibration.py's)."""
    rng = np.random.default_rng(seed)
    return {(n, d, k): (2.5e-10 * n * d * k + 4e-9 * n * d + 1.5e-8 * n * k + 2e-5) * rng.uniform(0.7, 1.3)
            for n, d, k in sizes}


def test_cost_model_within_2x_on_held_out_runs():
    """Calibrate on runs of several sizes, predict other sizes: the median ratio over held-out
    runs is within 2x (each run within 4x), for several draws of the measurement noise."""
    train = [(n, d, k) for n in (10000, 100000) for d in (10, 80) for k in (1, 8)] + [(40000, 30, 3)]
    held_out = [(50000, 40, 4), (20000, 60, 2), (75000, 20, 6), (30000, 50, 12)]
    for seed in range(5):
        seconds = _seconds_per_pass(train + held_out, seed)
        model = default_cost_model()
        model.add_runs([{"n": n, "d": d, "k": k, "workers": 1, "seconds": seconds[(n, d, k)]}
                        for n, d, k in train])
        ratios = [model.predict(n, d, k) / seconds[(n, d, k)] for n, d, k in held_out]
        assert 0.5 <= statistics.median(ratios) <= 2.0, (seed, ratios)
        assert all(0.25 <= r <= 4.0 for r in ratios), (seed, ratios)


class _FakeSession:
    """Captures INSERTs into groupml.cost_runs and serves them back to load_cost_model."""

    def __init__(self):
        self.rows = []

    def query(self, sql, args=(), types=()):
        if sql.startswith("INSERT INTO groupml.cost_runs"):
            n, d, k, w, p, s, fam, src = args
            self.rows.append({"n": n, "d": d, "k": k, "workers": w, "passes": p, "seconds": s, "family": fam,
                              "source": src})
            return []
        # args: the created_at cutoff (every row here is older), then the family when asked
        rows = self.rows if len(args) < 2 else [r for r in self.rows if r["family"] == args[1]]
        return list(reversed(rows))


def test_record_cost_run_and_load_cost_model():
    from groupml.executor.costs import load_cost_model
    from groupml.udf.search import record_cost_run, record_fit_cost

    s = _FakeSession()
    assert load_cost_model(s).runs == []                      # empty table: priors
    record_cost_run(s, n=1000, d=5, k=2, workers=1, passes=0, seconds=1.0, source="x")   # ignored
    record_cost_run(s, n=1000, d=5, k=2, workers=1, passes=3, seconds=0.0, source="x")   # ignored
    assert s.rows == []
    for n, d, k, sec in ((1000, 5, 1, 0.003), (10000, 5, 1, 0.02), (10000, 20, 4, 0.3), (5000, 50, 8, 0.4)):
        record_cost_run(s, n=n, d=d, k=k, passes=10, seconds=sec, source="t", family="logistic")
    assert s.rows[0] == {"n": 1000, "d": 5, "k": 1, "workers": 1, "passes": 10, "seconds": 0.003,
                         "family": "logistic", "source": "t"}
    model = load_cost_model(s, "logistic")
    assert len(model.runs) == 4 and model.runs[0]["seconds"] == pytest.approx(0.0003)   # per pass
    assert model.predict(10000, 20, 4) == pytest.approx(0.03, rel=0.5)
    X, y = _data()
    res = fit_group(X, y, "logistic", {"l2": [0.1, 1]}, {})
    record_fit_cost(s, res, source="train_groups")
    last = s.rows[-1]
    assert (last["n"], last["d"], last["passes"], last["family"]) == (res.n_train, 5, res.passes, "logistic")
    assert last["k"] in (1, 2) and last["seconds"] == pytest.approx(res.seconds)


def test_load_cost_model_skips_rows_it_cannot_use():
    # a row written by hand (NaN or infinite seconds; the table's CHECK now refuses both) used
    # to fail every role's planning with "The 'seconds' value of cost model run must be finite"
    from groupml.executor.costs import load_cost_model

    s = _FakeSession()
    good = [(1000, 5, 1, 0.003), (10000, 5, 1, 0.02), (10000, 20, 4, 0.3), (5000, 50, 8, 0.4)]
    for n, d, k, sec in good[:2] + [(1000, 2, 1, float("nan")), (1000, 2, 1, float("inf"))] + good[2:]:
        s.rows.append({"n": n, "d": d, "k": k, "workers": 1, "passes": 10, "seconds": sec, "family": "logistic",
                       "source": "t"})
    model = load_cost_model(s, "logistic")
    assert [(r["n"], r["d"], r["k"]) for r in model.runs] == [(n, d, k) for n, d, k, _ in good]
    assert math.isfinite(model.predict(10000, 20, 4))
