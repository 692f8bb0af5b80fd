"""One backend or worker backends: the one-backend estimate and the choice, on plain data."""

import pytest

from groupml.errors import InvalidParameterError
from groupml.planner import (HostCosts, UnitCosts, Workload, best_one_backend, choose_backend, choose_strategy,
                             estimate_one_backend, executor_overhead, host_costs_from_timings,
                             run_overhead_from_runs)

COSTS = UnitCosts(compute_per_row=1e-6, update=0.0, load_per_row=1e-7, task_startup=0.01)
HOST = HostCosts(scan_per_value=1e-7, snapshot_per_value=2e-7, helper_startup=0.5, run_overhead=0.2)


def test_one_backend_by_hand():
    w = Workload({"a": 30000, "b": 10000, "c": 10000}, n_configs=2, epochs=5)
    one = estimate_one_backend(w, 2, COSTS, HOST, d=9)
    # scan 50000 rows x 10 values x 1e-7 = 0.05 s, overlapped with the helpers' 0.5 s start
    assert one.details == {"helpers": 2, "scan_seconds": pytest.approx(0.05)}
    # largest first over 2 helpers: a alone (30000 rows), b + c on the other (20000)
    assert one.per_worker == pytest.approx([2 * 5 * 1e-6 * 30000, 2 * 5 * 1e-6 * 20000])
    assert one.makespan == pytest.approx(0.5 + 0.3)
    alone = estimate_one_backend(w, 1, COSTS, HOST, d=9)
    assert alone.makespan == pytest.approx(0.05 + 0.5)       # no helper to start


def test_best_one_backend_starts_helpers_only_when_they_pay():
    small = Workload({"a": 3000, "b": 1000}, n_configs=2, epochs=5)
    assert best_one_backend(small, 2, COSTS, HOST, d=9).details["helpers"] == 1
    big = Workload({g: 100000 for g in range(8)}, n_configs=4, epochs=20)
    assert best_one_backend(big, 2, COSTS, HOST, d=9).details["helpers"] == 2
    assert best_one_backend(big, 1, COSTS, HOST, d=9).details["helpers"] == 1


def test_small_workload_picks_one_backend():
    """The shape of a small grouped GLM run: the snapshot and coordination outweigh what a
    second worker backend saves."""
    sizes = {g: 2000 - 40 * g for g in range(32)}
    fast = UnitCosts(compute_per_row=5e-8, update=0.0, load_per_row=1e-7, task_startup=0.01)   # a calibrated host
    w = Workload(sizes, n_configs=4, epochs=50)
    plan = choose_strategy(sizes, 4, 50, 2, fast)
    one = best_one_backend(w, 2, fast, HOST, d=10)
    got = choose_backend(one, plan, executor_overhead(sum(sizes.values()), 10, 2, HOST))
    assert got["backend"] is True
    assert got["one"] == one.makespan and got["workers"] > plan.makespan
    assert got["explanation"].startswith("one backend is cheapest")


def test_more_workers_than_cores_win_on_a_large_workload():
    """With 8 worker backends (remote ones) against 2 local helpers, the workers win."""
    sizes = {g: 200000 for g in range(16)}
    w = Workload(sizes, n_configs=4, epochs=50)
    plan = choose_strategy(sizes, 4, 50, 8, COSTS)
    one = best_one_backend(w, 2, COSTS, HOST, d=10)
    got = choose_backend(one, plan, executor_overhead(sum(sizes.values()), 10, 8, HOST))
    assert got["backend"] is False
    assert got["explanation"].startswith("worker backends are cheaper")


def test_executor_overhead_is_the_parallel_snapshot_plus_coordination():
    assert executor_overhead(100000, 9, 2, HOST) == pytest.approx(2e-7 * 100000 * 10 / 2 + 0.2)


def test_run_overhead_measured_from_earlier_worker_runs():
    # what each run spent beyond its training, less its snapshot as HOST prices it
    # (2e-7 x rows x (d + 1) / workers): 0.5 - 0.1, 0.3 - 0.05, 0.35 - 0.1 -> median 0.25
    runs = [{"overhead": 0.5, "workers": 2, "d": 9, "n_rows": 100000},
            {"overhead": 0.3, "workers": 4, "d": 9, "n_rows": 100000},
            {"overhead": 0.35, "workers": 2, "d": 4, "n_rows": 200000}]
    got, n = run_overhead_from_runs(runs, HOST)
    assert n == 3 and got == pytest.approx(0.25)
    # a run whose snapshot took longer than priced counts 0, never a negative overhead
    assert run_overhead_from_runs([{"overhead": 0.01, "workers": 1, "d": 9, "n_rows": 100000}], HOST) == (0.0, 1)
    bad = [{"overhead": None, "workers": 2, "d": 3, "n_rows": 10}, {"overhead": -1.0, "workers": 2, "d": 3, "n_rows": 10},
           {"overhead": 1.0, "workers": 0, "d": 3, "n_rows": 10}, {"overhead": float("nan"), "workers": 2, "d": 3,
                                                                     "n_rows": 10}, {"workers": 2}]
    assert run_overhead_from_runs(bad, HOST) == (None, 0)


def test_host_costs_from_timings():
    got = host_costs_from_timings(scan_seconds=0.05, scan_values=500000)
    assert got.scan_per_value == pytest.approx(1e-7)
    default = HostCosts()
    assert got.snapshot_per_value == pytest.approx(1e-7 * default.snapshot_per_value / default.scan_per_value)
    assert got.helper_startup == default.helper_startup
    got = host_costs_from_timings(scan_seconds=0.05, scan_values=500000, snapshot_seconds=1.0,
                                  snapshot_values=1000000, helper_seconds=0.2)
    assert (got.snapshot_per_value, got.helper_startup) == (pytest.approx(1e-6), 0.2)
    assert HostCosts.from_dict(got.to_dict()) == got


@pytest.mark.parametrize("kwargs", [{"scan_seconds": -1, "scan_values": 10}, {"scan_seconds": 1, "scan_values": 0}])
def test_host_costs_refuse_bad_timings(kwargs):
    with pytest.raises(InvalidParameterError):
        host_costs_from_timings(**kwargs)


def test_host_costs_refuse_unknown_fields():
    with pytest.raises(InvalidParameterError):
        HostCosts.from_dict({"scan_per_value": 1e-7, "nope": 1})
