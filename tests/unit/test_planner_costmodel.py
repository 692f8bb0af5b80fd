"""TuPAQ-style time-per-pass model: calibration, prediction, right-sizing."""

import json
import math

import numpy as np
import pytest

from groupml.errors import InvalidParameterError
from groupml.planner import TERMS, CostModel, choose_batch_size, choose_workers, term_values

TRUE = {"fixed": 0.02, "per_worker": 0.01, "compute": 3e-9, "memory": 2e-9, "elementwise": 4e-8, "network": 5e-7}


def true_seconds(n, d, k, w):
    return float(term_values(n, d, k, w) @ np.array([TRUE[t] for t in TERMS]))


def synthetic_runs(rng, count, noise=0.0, workers=(1, 2, 4, 8)):
    runs = []
    for _ in range(count):
        n = int(rng.choice([1_000, 10_000, 100_000, 1_000_000]))
        d = int(rng.choice([10, 100, 1000]))
        k = int(rng.choice([1, 2, 5, 10, 20]))
        w = int(rng.choice(workers))
        sec = true_seconds(n, d, k, w) * float(np.exp(rng.normal(0, noise))) if noise else \
            true_seconds(n, d, k, w)
        runs.append({"n": n, "d": d, "k": k, "workers": w, "seconds": sec})
    return runs


def test_recovers_known_coefficients_without_noise():
    rng = np.random.default_rng(1)
    m = CostModel().add_runs(synthetic_runs(rng, 60))
    for t in TERMS:       # the pull towards the priors moves a coefficient by less than 1e-4
        assert m.coefficients[t] == pytest.approx(TRUE[t], rel=1e-4), t
    assert m.fitted_terms == list(TERMS)


def test_runs_of_one_batch_size_keep_the_priors_say_on_k():
    # runs of one k and d make n*d*k, n*d and n*k one column up to a factor: the plain fit put
    # all the time into the k term, so k = 1 priced like k = 9 per configuration, the planner
    # took k = 1 and the next run's estimate was 3-7x low
    from groupml.fitting import default_cost_model
    def truth(n, d, k):                 # no fixed cost: every run's time is proportional to n
        return TRUE["compute"] * n * d * k + TRUE["memory"] * n * d + TRUE["elementwise"] * n * k

    runs = [{"n": n, "d": 20, "k": 9, "workers": 1, "seconds": truth(n, 20, 9)} for n in (20_000, 50_000, 100_000)]
    m = default_cost_model().add_runs(runs)
    assert choose_batch_size(m, 50_000, 20, 10, max_batch=10) == 10
    for k in (1, 5, 10):        # without the pull: k = 1 estimated 6.7x its true time
        assert 0.5 <= m.predict(50_000, 20, k) / truth(50_000, 20, k) <= 2.0, k


def test_noisy_calibration_predicts_held_out_runs_within_2x():
    rng = np.random.default_rng(2)
    train = synthetic_runs(rng, 80, noise=0.15)
    held = synthetic_runs(rng, 40)
    m = CostModel().add_runs(train)
    ratios = [m.predict(r["n"], r["d"], r["k"], r["workers"]) / r["seconds"] for r in held]
    assert all(0.5 <= q <= 2.0 for q in ratios)
    assert np.median(np.abs(np.log(ratios))) < math.log(1.25)
    # the dominant term is well identified (memory and elementwise trade off under noise)
    assert m.coefficients["compute"] == pytest.approx(TRUE["compute"], rel=0.3)
    assert all(v >= 0 for v in m.coefficients.values())


def test_refits_as_runs_accumulate():
    rng = np.random.default_rng(3)
    runs = synthetic_runs(rng, 60)
    m = CostModel()
    m.add_runs(runs[:2])
    early = dict(m.coefficients)
    m.add_runs(runs[2:])
    assert m.coefficients != early
    assert m.coefficients["compute"] == pytest.approx(TRUE["compute"], rel=1e-5)
    m2 = CostModel(max_runs=10).add_runs(runs)
    assert len(m2.runs) == 10 and m2.runs[-1] == runs[-1]


def test_single_worker_runs_keep_worker_priors():
    rng = np.random.default_rng(4)
    prior = {"per_worker": 0.01, "network": 5e-7}
    m = CostModel(prior).add_runs(synthetic_runs(rng, 40, workers=(1,)))
    assert m.fitted_terms == ["fixed", "compute", "memory", "elementwise"]
    assert m.coefficients["per_worker"] == 0.01 and m.coefficients["network"] == 5e-7
    for t in ("fixed", "compute", "memory", "elementwise"):
        assert m.coefficients[t] == pytest.approx(TRUE[t], rel=1e-4)


def test_state_roundtrip_is_json():
    rng = np.random.default_rng(5)
    m = CostModel().add_runs(synthetic_runs(rng, 20, noise=0.1))
    state = json.loads(json.dumps(m.state_dict()))
    back = CostModel.from_state(state)
    assert back.coefficients == m.coefficients and back.runs == m.runs
    assert back.predict(50_000, 20, 3, 2) == m.predict(50_000, 20, 3, 2)
    back.add_runs(synthetic_runs(rng, 5))  # resumes accumulating
    assert len(back.runs) == 25
    with pytest.raises(InvalidParameterError):
        CostModel.from_state({"version": 99, "terms": list(TERMS)})


def test_terms_and_eq2_optimum():
    m = CostModel({"fixed": 0, "per_worker": 1, "compute": 1, "memory": 0, "elementwise": 0, "network": 0})
    # t(w) = w + n*d*k / w with n*d*k = 100: least at w = sqrt(100 / 1) = 10
    assert m.continuous_optimal_workers(10, 10, 1) == pytest.approx(10.0)
    assert m.predict(10, 10, 1, 10) == pytest.approx(20.0)
    assert m.terms(10, 10, 1, 4) == {"fixed": 0.0, "per_worker": 4.0, "compute": 25.0,
                                     "memory": 0.0, "elementwise": 0.0, "network": 0.0}
    assert choose_workers(m, 10, 10, 1, max_workers=16, within=1.0) == 10
    # within 10% of the best (20 s): w=7 gives 7 + 100/7 = 21.3; w=6 gives 22.7
    assert choose_workers(m, 10, 10, 1, max_workers=16) == 7
    assert choose_workers(m, 10, 10, 1, max_workers=3) == 3


def test_network_term_is_zero_on_one_worker():
    # models are exchanged only between workers: d*k*(w - 1) values, none with w = 1
    m = CostModel({"fixed": 0, "per_worker": 0, "compute": 0, "memory": 0, "elementwise": 0, "network": 1})
    assert m.terms(100, 5, 3, 1)["network"] == 0.0
    assert m.predict(100, 5, 3, 1) == 0.0
    assert m.terms(100, 5, 3, 3)["network"] == pytest.approx(5 * 3 * 2)


@pytest.mark.parametrize("coefficients", [None, {"fixed": 0.01, "per_worker": 2e-3, "compute": 1e-9,
                                                 "memory": 5e-9, "elementwise": 4e-8, "network": 1e-6}])
@pytest.mark.parametrize("n, d, k", [(1_000_000, 10, 4), (200_000, 50, 1), (50_000, 3, 16)])
def test_eq2_optimum_is_the_argmin_of_the_models_own_time(coefficients, n, d, k):
    # every term divided by w counts, the elementwise one included
    from scipy.optimize import minimize_scalar

    m = CostModel(coefficients)
    c = np.array([m.coefficients[t] for t in TERMS])
    best = minimize_scalar(lambda w: term_values(n, d, k, w) @ c, bounds=(0.5, 200), method="bounded",
                           options={"xatol": 1e-7}).x
    w_opt = m.continuous_optimal_workers(n, d, k)
    assert w_opt == pytest.approx(best, rel=1e-4)
    # t is convex in w: predict's best whole worker count is next to the continuous optimum
    times = [m.predict(n, d, k, w) for w in range(1, 201)]
    assert int(np.argmin(times)) + 1 in (math.floor(w_opt), math.ceil(w_opt))


def test_choose_batch_size():
    fixed_only = CostModel({"fixed": 1, "per_worker": 0, "compute": 0, "memory": 0, "elementwise": 0, "network": 0})
    assert choose_batch_size(fixed_only, 1000, 10, 10) == 10          # one pass
    assert choose_batch_size(fixed_only, 1000, 10, 10, max_batch=4) == 4   # 4,4,2: 3 passes
    # memory: data 8*1000*10 = 80000 B; each config adds 8*(1000 + 20) = 8160 B
    assert choose_batch_size(fixed_only, 1000, 10, 10, memory_bytes=80_000 + 3 * 8160) == 3
    # when per-config compute dominates and batching saves nothing, the smallest k wins
    compute_only = CostModel({"fixed": 0, "per_worker": 0, "compute": 1, "memory": 0, "network": 0})
    assert choose_batch_size(compute_only, 1000, 10, 10) == 1
    m = CostModel({"fixed": 0.01, "per_worker": 0, "compute": 1e-9, "memory": 5e-9, "network": 0})
    k = choose_batch_size(m, 100_000, 100, 20)
    assert k == 20
    assert m.search_seconds(100_000, 100, 20, 20) < m.search_seconds(100_000, 100, 20, 1) / 4


def test_search_seconds_prices_the_last_batch_at_its_own_size():
    # 7 configs at k = 3: two passes of 3 and one of 1; t(k) = 1 + n*d*k = 1 + 100k
    m = CostModel({"fixed": 1, "per_worker": 0, "compute": 1, "memory": 0, "elementwise": 0, "network": 0})
    assert m.search_seconds(10, 10, 7, 3) == pytest.approx(2 * (1 + 300) + (1 + 100))
    assert m.search_seconds(10, 10, 6, 3) == pytest.approx(2 * (1 + 300))


def test_memory_bound_counts_weights_and_gradients_per_config():
    # each config adds its margins (n values) plus weights and gradients (2*d values):
    # data 8*100*1000 = 800000 B, each config 8*(100 + 2000) = 16800 B -> room for exactly 8;
    # 24 configs then take 3 passes of 8 (room for 12 would take 2)
    fixed_only = CostModel({"fixed": 1, "per_worker": 0, "compute": 0, "memory": 0, "elementwise": 0, "network": 0})
    assert choose_batch_size(fixed_only, 100, 1000, 24, memory_bytes=800_000 + 8 * 16_800) == 8
    # one byte less leaves room for 7: 4 passes, which k = 6 already achieves (smallest k on ties)
    assert choose_batch_size(fixed_only, 100, 1000, 24, memory_bytes=800_000 + 8 * 16_800 - 1) == 6


def test_run_validation_messages():
    m = CostModel()
    with pytest.raises(InvalidParameterError) as e:
        m.add_run(n=10, d=2, k=1, workers=1, seconds=-1)
    assert str(e.value) == "The 'seconds' value of cost model run must be > 0; got -1"
    with pytest.raises(InvalidParameterError) as e:
        m.add_run(n=10, d=2, k=1, workers=0, seconds=1)
    assert str(e.value) == "The 'workers' value of cost model run must be >= 1; got 0"
    with pytest.raises(InvalidParameterError) as e:
        m.add_run(n=10, d=2, k=1, workers=1)
    assert str(e.value) == "The 'seconds' value of cost model run is missing"
    with pytest.raises(InvalidParameterError) as e:
        m.add_run(n=10, d=2, k=1, workers=1, seconds=1, gpu=True)
    assert str(e.value).startswith("Unknown key 'gpu' in cost model run")
    assert m.runs == []
    with pytest.raises(InvalidParameterError) as e:
        choose_workers(m, 10, 10, 1, max_workers=0)
    assert str(e.value) == "The 'max_workers' value of cost model must be >= 1; got 0"


def test_right_size_takes_the_fewest_workers_within_the_margin():
    from groupml.planner import right_size
    times = {1: 10.0, 2: 5.3, 3: 5.0, 4: 4.9, 5: 5.2}
    assert right_size(times) == 2                      # 5.3 <= 1.1 * 4.9
    assert right_size(times, within=1.0) == 4
    assert right_size({1: 1.0}) == 1
    with pytest.raises(InvalidParameterError):
        right_size({})
    # choose_workers is the same rule over the TuPAQ model's pass times
    m = CostModel(TRUE)
    times = {w: m.predict(1_000_000, 100, 10, w) for w in range(1, 17)}
    assert choose_workers(m, 1_000_000, 100, 10, max_workers=16) == right_size(times)


def test_auto_workers_right_sizes_the_planned_makespans(monkeypatch):
    # workers => 0 takes the fewest workers whose planned makespan is within 10% of the best
    from types import SimpleNamespace

    from groupml.udf import train

    makespans = {1: 10.0, 2: 5.2, 3: 5.0, 4: 4.9}

    class Session:       # 4 enabled worker endpoints: the planner may use 1..4
        def query(self, sql, *args):
            return [{"n": 4}]

    def plan_for(inputs, workers, strategy, exec_options, pattern):
        return SimpleNamespace(strategy="grouped",
                               estimates={"grouped": SimpleNamespace(makespan=makespans[workers])})

    monkeypatch.setattr(train, "_plan_for", plan_for)
    chosen, why = train._auto_workers(Session(), {}, "auto", {}, "algebraic")
    assert chosen == 2                                   # 5.2 <= 1.1 * 4.9; the best is 4
    assert "chose 2 worker(s) of up to 4" in why
