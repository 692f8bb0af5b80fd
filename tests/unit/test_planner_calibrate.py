"""Unit costs calibrated from executed task records (groupml.planner.calibrate_unit_costs)."""

import json
import math

import numpy as np
import pytest

from groupml.errors import InvalidParameterError
from groupml.executor.plan import make_plan
from groupml.planner import (Calibration, UnitCosts, Workload, backend_work_ratio, calibrate_unit_costs, estimate_dp,
                             estimate_grouped, estimate_gtp, estimate_mtp)

# the unit times the synthetic workers below run at (seconds)
TRUE = {"fixed": 6e-4, "row": 4e-8, "load": 9e-7, "warm": 0.4}


def glm_records(seed=0, runs=3, noise=0.02, passes=12, sizes=(9000, 5000, 3000, 2000, 1200, 800), **true):
    """GLM pass tasks of ``runs`` runs on 2 workers: groups alternate between the workers, the
    largest is split over both (two shards); configs drop out as passes go (3 -> 1)."""
    c = dict(TRUE, **true)
    rng = np.random.default_rng(seed)
    tasks = []
    for run in range(1, runs + 1):
        clock = [0.0, 0.0]
        seen = set()
        for p in range(passes):
            trials = [0, 1, 2][: 3 - min(2, p // 4)]
            for gi, n in enumerate(sizes):
                shards = [(0, 0, n // 2), (1, n // 2, n - n // 2)] if gi == 0 else [(gi % 2, 0, n)]
                for s, (w, start, rows) in enumerate(shards):
                    sec = c["fixed"] + c["row"] * rows * len(trials)
                    if (w, gi, start) not in seen:
                        seen.add((w, gi, start))
                        sec += c["load"] * rows
                    if clock[w] == 0.0:
                        sec += c["warm"]
                    sec *= 1 + noise * rng.standard_normal()
                    tasks.append({"run_id": run, "group_key": json.dumps({"g": gi}), "kind": "pass", "pass": p,
                                  "worker": w, "shard": s, "row_start": start, "n_rows": rows, "trials": trials,
                                  "started": clock[w] + 0.01, "finished": clock[w] + 0.01 + sec})
                    clock[w] += 0.01 + sec
    return tasks


def test_recovers_glm_unit_costs():
    cal = calibrate_unit_costs(glm_records(), pattern="algebraic", d=5)
    c = cal.costs
    assert cal.calibrated and cal.n_dropped == 0 and cal.n_runs == 3
    assert c.compute_per_row == pytest.approx(TRUE["row"], rel=0.1)
    assert c.load_per_row == pytest.approx(TRUE["load"], rel=0.1)
    assert c.task_startup == pytest.approx(TRUE["fixed"], rel=0.1)
    assert c.worker_startup == pytest.approx(TRUE["warm"], rel=0.1)
    # a pass task's fixed cost is shared by its configs (mean configs per pass task here)
    kbar = np.mean([len(t["trials"]) for t in glm_records()])
    assert c.update == pytest.approx(c.task_startup / kbar)
    assert c.model_transfer == pytest.approx(c.task_startup / (2 * kbar))
    for f in ("compute_per_row", "load_per_row", "task_startup", "worker_startup", "update", "sync_per_step"):
        assert cal.sources[f].startswith("measured"), f
    # never measured by GLM passes: the defaults, and said so
    assert cal.sources["epoch_barrier"] == "default" and c.epoch_barrier == UnitCosts().epoch_barrier
    text = cal.summary()
    assert "calibrated from" in text and "compute_per_row" in text and "default values for" in text
    assert json.loads(json.dumps(cal.to_dict()))["costs"]["worker_startup"] == pytest.approx(c.worker_startup)


def test_too_few_tasks_fall_back_to_the_base():
    base = UnitCosts(compute_per_row=3e-7)
    few = glm_records()[:5]
    cal = calibrate_unit_costs(few, pattern="algebraic", base=base, base_sources={"compute_per_row": "cost model"})
    assert not cal.calibrated and cal.n_tasks == 5
    assert cal.costs.to_dict() == base.to_dict()
    assert cal.sources["compute_per_row"] == "cost model" and cal.sources["update"] == "default"
    assert "not calibrated" in cal.summary()
    empty = calibrate_unit_costs([], pattern="sampling")
    assert not empty.calibrated and empty.n_runs == 0 and "no earlier run" in empty.summary()


def test_per_field_fallback_when_a_term_is_not_observable():
    # one unsplit group on one worker, same rows and configs every pass: the per-row cost
    # cannot be told apart from the fixed cost, there is a single first touch and a single
    # first task -- only task_startup (and what derives from it) is measured
    rng = np.random.default_rng(2)
    rows, k = 5000, 3
    total = TRUE["fixed"] + TRUE["row"] * rows * k
    tasks, clock = [], 0.0
    for p in range(30):
        sec = total * (1 + 0.01 * rng.standard_normal())
        tasks.append({"run_id": 1, "group_key": "{}", "kind": "pass", "pass": p, "worker": 0, "row_start": 0,
                      "n_rows": rows, "trials": [0, 1, 2], "started": clock, "finished": clock + sec})
        clock += sec
    cal = calibrate_unit_costs(tasks, pattern="algebraic")
    assert cal.sources["task_startup"].startswith("measured")
    assert cal.sources["worker_startup"] == "default" and cal.costs.worker_startup == 0.0
    assert cal.sources["load_per_row"].startswith("default")          # one first touch: not measured
    assert cal.costs.load_per_row <= UnitCosts().load_per_row
    # the default per-row cost (1e-6 s) alone would be ~12x these passes: it is capped at half
    # of their measured time, the fixed cost gets the other half
    assert cal.sources["compute_per_row"].startswith("default, capped")
    assert cal.costs.compute_per_row == pytest.approx(0.5 * total / (rows * k), rel=0.05)
    assert cal.costs.task_startup == pytest.approx(0.5 * total, rel=0.05)
    # with a default that fits under the measured time, the fixed cost is what remains
    base = UnitCosts(compute_per_row=1e-8, load_per_row=0.0)
    cal = calibrate_unit_costs(tasks, pattern="algebraic", base=base)
    assert cal.sources["compute_per_row"] == "default" and cal.costs.compute_per_row == 1e-8
    assert cal.costs.task_startup == pytest.approx(total - 1e-8 * rows * k, rel=0.05)


def test_a_per_row_cost_the_tasks_do_not_resolve_is_not_measured_as_zero():
    # tasks whose time is a fixed cost plus noise, whatever their rows and configs: NNLS puts
    # the per-row cost at 0, which would price every row as free -- the fallback stands
    # instead (capped at half the tasks' time), and the source says why
    tasks = glm_records(seed=5, noise=0.2, row=0.0, load=0.0, warm=0.0)
    cal = calibrate_unit_costs(tasks, pattern="algebraic")
    assert cal.calibrated and cal.coefficients and "work" not in cal.coefficients
    src = cal.sources["compute_per_row"]
    assert src.startswith("default") and src.endswith("(the measured tasks do not resolve a per-row cost)")
    assert 0 < cal.costs.compute_per_row <= UnitCosts().compute_per_row
    assert cal.sources["task_startup"].startswith("measured") and cal.costs.task_startup > 0
    # a small fallback is kept as it is
    small = calibrate_unit_costs(tasks, pattern="algebraic", base=UnitCosts(compute_per_row=1e-9))
    assert small.costs.compute_per_row == 1e-9
    assert small.sources["compute_per_row"] == "default (the measured tasks do not resolve a per-row cost)"
    assert small.costs.task_startup == pytest.approx(TRUE["fixed"], rel=0.15)
    # a per-row cost the tasks do show is still measured
    shown = calibrate_unit_costs(glm_records(seed=5, noise=0.2, load=0.0, warm=0.0), pattern="algebraic")
    assert shown.sources["compute_per_row"].startswith("measured") and shown.costs.compute_per_row > 0


def test_garbage_records_are_ignored():
    clean = glm_records()
    bad = [dict(clean[0], finished=clean[0]["started"] - 1.0),              # negative duration
           dict(clean[1], finished=clean[1]["started"]),                      # zero duration
           dict(clean[2], started=float("nan")),
           dict(clean[3], n_rows=0),
           dict(clean[4], n_rows=-5),
           dict(clean[5], trials="abc"),
           {k: v for k, v in clean[6].items() if k != "finished"},
           dict(clean[7], started="soon"),
           dict(clean[8], trials=[]),                                         # a pass over no config
           dict(clean[9], finished=math.inf)]
    ref = calibrate_unit_costs(clean, pattern="algebraic")
    cal = calibrate_unit_costs(clean + bad, pattern="algebraic")
    assert cal.n_dropped == len(bad) and cal.n_tasks == len(clean)
    for f, v in ref.costs.to_dict().items():
        assert getattr(cal.costs, f) == pytest.approx(v, rel=1e-9), f


def test_outliers_are_trimmed():
    tasks = glm_records(seed=3)
    rng = np.random.default_rng(7)
    hit = rng.choice(len(tasks), size=len(tasks) // 30, replace=False)
    for i in hit:                                        # e.g. a pause of the worker backend
        t = tasks[i]
        t["finished"] = t["started"] + 40 * (t["finished"] - t["started"])
    cal = calibrate_unit_costs(tasks, pattern="algebraic")
    assert cal.n_outliers >= len(hit) * 0.8
    assert cal.costs.compute_per_row == pytest.approx(TRUE["row"], rel=0.15)
    assert cal.costs.task_startup == pytest.approx(TRUE["fixed"], rel=0.15)


def test_features_of_other_runs_scale_the_row_cost():
    # runs over d = 10 features; the planned call has d = 5: a row costs half as much
    runs = [{"run_id": r, "d": 10} for r in (1, 2, 3)]
    cal = calibrate_unit_costs(glm_records(), runs=runs, pattern="algebraic", d=5)
    assert cal.costs.compute_per_row == pytest.approx(TRUE["row"] / 2, rel=0.1)


def mlp_records(fixed_fit=0.03, fixed_visit=0.035, row=3e-5, step=2e-4, warm=5.0, batch=64):
    """MLP tasks: unsplit groups as 'fit' tasks (2 configs x 3 epochs), one split group's
    configs hopping between two shards ('visit'); trials give epochs and batch sizes."""
    tasks, trials = [], []
    for run in (1, 2):
        clock = [0.0, 0.0]

        def add(kind, w, gkey, p, start, rows, tids, sec):
            if clock[w] == 0.0:
                sec += warm
            tasks.append({"run_id": run, "group_key": gkey, "kind": kind, "pass": p, "worker": w, "shard": 0,
                          "row_start": start, "n_rows": rows, "trials": tids, "started": clock[w],
                          "finished": clock[w] + sec})
            clock[w] += sec + 0.001

        for gi, n in enumerate([3000, 2400, 1800, 1500, 1100, 900, 700, 500]):
            gkey = json.dumps({"g": gi})
            for tid in (0, 1):
                trials.append({"run_id": run, "group_key": gkey, "trial_id": tid, "iterations": 3,
                               "params": {"batch_size": batch}})
            upd = 2 * 3 * math.ceil(n / batch)
            add("fit", gi % 2, gkey, 0, 0, n, [], fixed_fit + row * n * 6 + step * upd)
        n = 4000
        gkey = '{"g": "split"}'
        for tid in (0, 1):
            trials.append({"run_id": run, "group_key": gkey, "trial_id": tid, "iterations": 3,
                           "params": {"batch_size": batch}})
        for epoch in range(3):
            for tid in (0, 1):
                for w, (start, rows) in enumerate([(0, 2500), (2500, 1500)]):
                    add("visit", w, gkey, epoch, start, rows, [tid],
                        fixed_visit + row * rows + step * math.ceil(rows / batch))
    return tasks, trials


def test_recovers_mlp_unit_costs_from_fit_and_visit_tasks():
    tasks, trials = mlp_records()
    cal = calibrate_unit_costs(tasks, trials, pattern="sequential")
    c = cal.costs
    assert cal.kinds == {"fit": 16, "visit": 24}
    # the per-batch step cost is (nearly) proportional to the rows: folded into the row cost
    assert c.compute_per_row == pytest.approx(3e-5 + 2e-4 / 64, rel=0.1)
    assert c.update == 0.0 and "included" in cal.sources["update"]
    assert c.task_startup == pytest.approx(0.03, rel=0.2)
    assert c.model_transfer == pytest.approx(0.005, abs=0.004)       # a hop's fixed cost beyond a task's
    assert c.worker_startup == pytest.approx(5.0, rel=0.05)
    # without trial records the fit tasks' work is unknown: they are left out
    blind = calibrate_unit_costs(tasks, [], pattern="sequential")
    assert blind.kinds == {"visit": 24} and blind.n_dropped == 16



def test_straggler_wait_comes_from_split_passes_only():
    # sync_per_step is the spread between the shards of a split pass; a whole group's single
    # task has no spread and must not pull the median to 0
    tasks = glm_records()
    ends = {}
    for t in tasks:
        if t["group_key"] == json.dumps({"g": 0}):            # the one group split over both workers
            ends.setdefault((t["run_id"], t["pass"]), []).append(t["finished"])
    spread = [abs(a - b) for a, b in ends.values()]
    assert len(spread) == 3 * 12
    kbar = np.mean([len(t["trials"]) for t in tasks])        # 2 configs per pass task on average
    cal = calibrate_unit_costs(tasks, pattern="algebraic", d=5)
    assert cal.costs.sync_per_step == pytest.approx(float(np.median(spread)) / kbar)
    assert cal.costs.sync_per_step == pytest.approx(0.0326, rel=1e-2)


def _step_rounds(rounds, period=0.1):
    """DP step tasks of one MLP group on two workers, one round every ``period`` seconds."""
    return [{"run_id": run, "group_key": '{"g":"dp"}', "kind": "step", "pass": r, "worker": w,
             "row_start": 500 * w, "n_rows": 500, "trials": [0], "started": 100 + r * period,
             "finished": 100 + r * period + 0.05} for run in (1, 2) for r in rounds for w in (0, 1)]


def test_step_rounds_with_gaps_keep_the_default_sync_cost():
    # a round's period is measured to the very next round only; rounds 0, 2, 4, ... say nothing
    tasks, trials = mlp_records()
    full = calibrate_unit_costs(tasks + _step_rounds(range(14)), trials, pattern="sequential")
    assert full.costs.sync_per_step == pytest.approx(0.1) and full.sources["sync_per_step"].startswith("measured")
    gaps = calibrate_unit_costs(tasks + _step_rounds(range(0, 14, 2)), trials, pattern="sequential")
    assert gaps.costs.sync_per_step == UnitCosts().sync_per_step and gaps.sources["sync_per_step"] == "default"


def test_recovers_lightgbm_costs_and_work_ratio():
    rng = np.random.default_rng(1)
    tasks, trials = [], []
    executed = planned = 0
    for run in (1, 2, 3):
        clock = 0.0
        for gi, n in enumerate([5000, 3000, 2000, 1500, 1000, 700, 400]):
            gkey = json.dumps({"g": gi})
            its = [20, 2 + 9 * (gi % 3)]         # trees the search used per config
            executed, planned = executed + n * sum(its), planned + n * 2 * 20
            for tid, it in enumerate(its):
                trials.append({"run_id": run, "group_key": gkey, "trial_id": tid, "iterations": it,
                               "params": {"num_boost_round": 20}})
            sec = 0.02 + 2.5e-7 * n * sum(its) + 1e-3 * sum(its) + 4e-6 * n + (3.0 if gi == 0 else 0.0)
            sec *= 1 + 0.01 * rng.standard_normal()
            tasks.append({"run_id": run, "group_key": gkey, "kind": "fit", "pass": 0, "worker": 0,
                          "row_start": 0, "n_rows": n, "trials": [], "started": clock, "finished": clock + sec})
            clock += sec
    runs = [{"run_id": r, "n_configs": 2, "epochs": 20} for r in (1, 2, 3)]
    cal = calibrate_unit_costs(tasks, trials, runs, pattern="sampling", min_obs=3)
    assert cal.costs.compute_per_row == pytest.approx(2.5e-7, rel=0.1)
    assert cal.costs.update == pytest.approx(1e-3, rel=0.3)           # one boosting round's fixed cost
    assert cal.costs.load_per_row == pytest.approx(4e-6, rel=0.3)     # every fit task loads its group
    assert cal.costs.worker_startup == pytest.approx(3.0, rel=0.05)
    assert cal.work_ratio == pytest.approx(executed / planned)       # row-weighted
    assert cal.ratio_runs == 3 and "of the planned config-epochs" in cal.summary()


def test_work_ratio_scales_the_planned_epochs():
    tasks = glm_records()
    # every pass task lists its configs: 12 passes with 3,3,3,3,2,2,2,2,1,1,1,1 configs = 24
    runs = [{"run_id": r, "n_configs": 3, "epochs": 40} for r in (1, 2, 3)]
    cal = calibrate_unit_costs(tasks, runs=runs, pattern="algebraic")
    assert cal.work_ratio == pytest.approx(24 / 120)
    sizes = {0: 9000, 1: 5000, 2: 3000}
    plan = make_plan(sizes, 3, 40, 2, "auto", calibration=cal, blocks=4)
    assert plan.workload.epochs == 8 and plan.workload.blocks == 1
    assert plan.explanation.endswith(cal.summary())
    plain = make_plan(sizes, 3, 40, 2, "auto", costs=cal.costs, blocks=4)
    assert plain.workload.epochs == 40 and plain.makespan > plan.makespan
    # runs without a planned workload (other search, unfinished) give no ratio
    assert calibrate_unit_costs(tasks, runs=[{"run_id": 1}], pattern="algebraic").work_ratio is None



def test_runs_in_one_backend_give_the_work_ratio_through_their_trials():
    # 4 configs x 50 epochs planned per training row; the runs' trials ran 50, 80 and 60
    # configuration-passes per row (row-weighted over their groups): the median, 80/200
    records = [{"run_id": 1, "rows": 1000.0, "executed": 50_000.0}, {"run_id": 2, "rows": 500.0, "executed": 40_000.0},
               {"run_id": 3, "rows": 2000.0, "executed": 120_000.0}]
    ratio, runs = backend_work_ratio(records, 4, 50)
    assert runs == 3 and ratio == pytest.approx(60 / 200)
    # unusable records are left out; none left: no ratio
    bad = [{"run_id": 4, "rows": 0, "executed": 10.0}, {"run_id": 5, "rows": 10.0, "executed": None},
           {"run_id": 6, "rows": math.inf, "executed": 1.0}, {"run_id": 7, "rows": 10.0, "executed": -1.0}]
    assert backend_work_ratio(bad, 4, 50) == (None, 0)
    assert backend_work_ratio(bad + records[:1], 4, 50) == (pytest.approx(50 / 200), 1)
    with pytest.raises(InvalidParameterError):
        backend_work_ratio(records, 0, 50)


def test_work_ratio_rounds_the_planned_epochs_to_the_nearest():
    # scaled epochs are rounded, not truncated: 3 epochs x 0.9 = 2.7 plans 3
    cal = Calibration(UnitCosts(), {f: "default" for f in UnitCosts().to_dict()}, "algebraic")
    cal.work_ratio = 0.9
    plan = make_plan({0: 1000, 1: 500}, 4, 3, 2, "auto", calibration=cal)
    assert plan.workload.epochs == 3
    cal.work_ratio = 0.8                     # 2.4 -> 2
    assert make_plan({0: 1000, 1: 500}, 4, 3, 2, "auto", calibration=cal).workload.epochs == 2


def test_worker_startup_is_paid_once_by_every_worker_of_every_strategy():
    w = Workload({"a": 6, "b": 2, "c": 2}, n_configs=2, epochs=3)
    zero = dict(compute_per_row=1, memory_per_row=0, update=0, load_per_row=0, disk_per_row=0,
                sync_per_step=0, model_transfer=0, task_startup=0, epoch_barrier=0)
    for est in (estimate_gtp, estimate_mtp, estimate_dp, estimate_grouped):
        a = est(w, 3, UnitCosts(**zero))
        b = est(w, 3, UnitCosts(**zero, worker_startup=2.5))
        assert b.per_worker == pytest.approx([x + 2.5 for x in a.per_worker]), est.__name__
        assert b.breakdown["startup"] == pytest.approx(a.breakdown["startup"] + 3 * 2.5)


def test_bad_arguments():
    with pytest.raises(InvalidParameterError, match="pattern"):
        calibrate_unit_costs([], pattern="bagging")
    with pytest.raises(InvalidParameterError, match="min_tasks"):
        calibrate_unit_costs([], min_tasks=0)
    assert isinstance(calibrate_unit_costs([]), Calibration)


def test_the_library_load_is_charged_to_the_first_training_task_not_to_a_ports_task():
    # a split LightGBM group's workers first answer 'ports' (free listen ports), then run the
    # ranks: the warm-up (importing lightgbm) belongs to the first rank of each worker
    from groupml.planner._calibrate import _task_terms

    tinfo = {(1, "g", 0): {"iterations": 30, "passes": None, "batch_size": None, "rounds": 30}}
    tasks = [dict(run_id=1, group_key="g", kind=k, pass_=0, worker=w, row_start=r, n_rows=100, trials=[0],
                  started=st, finished=st + 0.01) for k, w, r, st in
             [("ports", 0, 0, 0.0), ("ports", 1, 100, 0.0), ("rank", 0, 0, 0.1), ("rank", 1, 100, 0.1)]]
    for t in tasks:
        t["pass"] = t.pop("pass_")
    terms = _task_terms(tasks, tinfo, "sampling", {})
    assert [x[3] for x in terms] == [0.0, 0.0, 1.0, 1.0]
