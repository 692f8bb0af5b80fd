"""Makespan estimates (Kingpin section 3 cost models) and strategy choice."""

import json

import pytest

from groupml.errors import InvalidParameterError
from groupml.planner import (CostModel, UnitCosts, Workload, choose_strategy, constrained_wrap_around,
                             estimate_dp, estimate_grouped, estimate_gtp, estimate_mtp, unit_costs_from_model,
                             wrap_around)

ZERO = dict(compute_per_row=0, memory_per_row=0, update=0, load_per_row=0, disk_per_row=0,
            sync_per_step=0, model_transfer=0, task_startup=0, epoch_barrier=0)


def costs(**kw):
    return UnitCosts(**{**ZERO, **kw})


SIZES = {"a": 6, "b": 2, "c": 2}


def test_hand_computed_compute_only():
    # s=2 configs, h=3 epochs, p=2, one second per row per config
    w = Workload(SIZES, n_configs=2, epochs=3)
    c = costs(compute_per_row=1)
    gtp = estimate_gtp(w, 2, c)        # worker 0: a (2*3*6); worker 1: b, c
    assert gtp.per_worker == [36.0, 24.0] and gtp.makespan == 36.0
    gl = estimate_grouped(w, 2, c, wrap_around_placement(SIZES, 2, "size"))    # capacity 5 rows each: 2*3*5
    assert gl.per_worker == [30.0, 30.0]
    # GLMs run constrained wrap-around: a (6 rows < 1.5 * 5) stays whole, as under GTP
    assert estimate_grouped(w, 2, c).per_worker == [36.0, 24.0]
    dp = estimate_dp(w, 2, c)          # ceil(6/2) + ceil(2/2) + ceil(2/2) = 5 rows per step set
    assert dp.per_worker == [30.0, 30.0]
    mtp = estimate_mtp(w, 2, c)        # tasks a,a (18) b,b,c,c (6) -> 18+6+6 each
    assert mtp.per_worker == [30.0, 30.0]


def test_hand_computed_communication_terms():
    w = Workload(SIZES, n_configs=2, epochs=3)
    # DP: one sync round per config, epoch and group: 2*3*3 = 18 s on every worker
    assert estimate_dp(w, 2, costs(compute_per_row=1, sync_per_step=1)).per_worker == [48.0, 48.0]
    # grouped: group a is split over 2 workers -> 2 transfers per config and epoch = 12 s, shared
    gl = estimate_grouped(w, 2, costs(compute_per_row=1, model_transfer=1), wrap_around_placement(SIZES, 2, "size"))
    assert gl.per_worker == [36.0, 36.0] and gl.breakdown["transfer"] == 12.0
    # MTP: every worker copies a, and b and c to one... load 1 s/row, disk reload 0.5 s/row
    m = estimate_mtp(w, 2, costs(load_per_row=1, disk_per_row=0.5))
    # worker 0: a (load 6), b (load 2), c (load 2); worker 1 the same -> 10 each
    assert m.per_worker == [10.0, 10.0] and m.details["rows_copied"] == 20
    # GTP: 3 tasks' startup, worker 0 has 1 task, worker 1 has 2
    assert estimate_gtp(w, 2, costs(task_startup=1)).per_worker == [1.0, 2.0]
    # MTP with more configs than workers re-reads local copies from disk
    w4 = Workload({"a": 4}, n_configs=4, epochs=1)
    m = estimate_mtp(w4, 2, costs(load_per_row=1, disk_per_row=0.5))
    assert m.per_worker == [6.0, 6.0]  # load 4 + one disk re-read of 4 rows at 0.5


def test_whole_groups_above_the_pass_task_bound_pay_a_task_per_pass():
    # SIZES under GTP: worker 0 holds a (6 rows), worker 1 holds b and c (2 rows each)
    start = costs(task_startup=1)
    one_task = Workload(SIZES, n_configs=2, epochs=3)
    assert estimate_gtp(one_task, 2, start).per_worker == [1.0, 2.0]
    # groups with more than 4 rows run a task per pass (the executor's whole_group_max_work): a pays 3
    big_a = Workload(SIZES, n_configs=2, epochs=3, pass_task_rows=4)
    assert estimate_gtp(big_a, 2, start).per_worker == [3.0, 2.0]
    # 0 = whole_group_tasks => false: every group a task per pass
    every = Workload(SIZES, n_configs=2, epochs=3, pass_task_rows=0)
    assert estimate_gtp(every, 2, start).per_worker == [3.0, 6.0]
    # grouped, every group whole (one worker): the same rule per group
    assert estimate_grouped(big_a, 1, start).per_worker == [3.0 + 1 + 1]
    assert estimate_grouped(one_task, 1, start).per_worker == [1.0 + 1 + 1]
    # only GLMs run whole searches as one task; other patterns ignore the bound
    seq = Workload(SIZES, n_configs=2, epochs=3, pattern="sequential", batch_size=6, pass_task_rows=0)
    assert seq.whole_group_tasks(6) == 1
    with pytest.raises(InvalidParameterError, match="pass_task_rows"):
        Workload(SIZES, n_configs=2, epochs=3, pass_task_rows=-1)


def test_mlp_and_lightgbm_pay_a_task_start_per_whole_group():
    # the executor runs every unsplit MLP / LightGBM group as one 'fit' task: 400 groups of 50
    # rows on 4 workers are 100 task starts per worker under grouped as under GTP
    sizes = {i: 50 for i in range(400)}
    start = costs(task_startup=0.5)
    for pattern, extra in (("sequential", {"batch_size": 64}), ("sampling", {})):
        w = Workload(sizes, n_configs=4, epochs=5, pattern=pattern, **extra)
        gl = estimate_grouped(w, 4, start)
        assert gl.details["split_groups"] == 0
        assert gl.per_worker == [50.0] * 4 == estimate_gtp(w, 4, start).per_worker, pattern
        plan = choose_strategy(sizes, 4, 5, 4, start, pattern=pattern, **extra)
        assert plan.makespan == pytest.approx(50.0), pattern
    # a split LightGBM group: a rank per config on each holder; the whole group one task
    w = Workload({"a": 6, "b": 2}, n_configs=2, epochs=3, pattern="sampling")
    pl = constrained_wrap_around({"a": 6, "b": 2}, 2)            # a: 3 rows on each worker, b on worker 0
    assert pl.shard_counts() == {"a": 2, "b": 1} and pl.loads() == [5, 3]
    assert estimate_grouped(w, 2, costs(task_startup=1), pl).per_worker == [2 + 1.0, 2.0]


def test_dp_task_starts_follow_the_executor():
    start = costs(task_startup=1)
    # LightGBM: a data-parallel job per config and group, a rank on every holder; a group of
    # one row is one shard, its whole search one task (on worker 0)
    w = Workload({"a": 6, "b": 2, "c": 1}, n_configs=2, epochs=3, pattern="sampling")
    assert estimate_dp(w, 2, start).per_worker == [2 + 2 + 1.0, 2 + 2.0]
    # MLP: a statistics task and a task per mini-batch round (all configs step together)
    w = Workload({"a": 10, "b": 2}, n_configs=2, epochs=1, pattern="sequential", batch_size=4)
    assert estimate_dp(w, 2, start).per_worker == [(1 + 3) + (1 + 1.0)] * 2
    # GLMs: a task per pass on every holder; a one-row group runs whole
    w = Workload({"a": 6, "b": 2, "c": 1}, n_configs=2, epochs=3)
    assert estimate_dp(w, 2, start).per_worker == [3 + 3 + 1.0, 3 + 3.0]


def test_pass_task_rows_matches_the_executor_rule():
    from groupml.executor.plan import pass_task_rows
    opts = {"whole_group_tasks": True, "whole_group_max_work": 1e10}
    # rows x (d+1) x configs x iterations <= 1e10: d = 9, 10 configs, 100 iterations -> 1e6 rows
    assert pass_task_rows(opts, 9, 10, 100) == pytest.approx(1e6)
    assert pass_task_rows({**opts, "whole_group_tasks": False}, 9, 10, 100) == 0.0


def test_sequential_pattern_steps_and_floor():
    w = Workload({"a": 10, "b": 2}, n_configs=1, epochs=1, pattern="sequential", batch_size=4)
    # DP: a has ceil(10/4)=3 steps, b 1 step; one sync each
    dp = estimate_dp(w, 2, costs(sync_per_step=1))
    assert dp.per_worker == [4.0, 4.0]
    # grouped under group isolation: capacity max(6, 10) = 10 -> a whole on worker 0
    gl = estimate_grouped(w, 2, costs(compute_per_row=1))
    assert gl.placement.shard_counts() == {"a": 1, "b": 1}
    assert gl.per_worker == [10.0, 2.0] and gl.makespan == 10.0
    with pytest.raises(InvalidParameterError) as e:
        Workload({"a": 1}, 1, 1, pattern="sequential")
    assert str(e.value) == "The 'batch_size' value of train_groups must be an integer; got null"


def test_one_huge_group_grouped_beats_gtp():
    sizes = {"big": 1_000_000, **{f"g{i}": 10_000 for i in range(10)}}
    plan = choose_strategy(sizes, n_configs=4, epochs=10, n_workers=4, costs=UnitCosts())
    assert plan.strategy == "grouped"
    assert plan.estimates["gtp"].makespan > 3 * plan.makespan
    assert plan.estimates["dp"].makespan >= plan.makespan
    assert "whole-group placement leaves workers idle" in plan.explanation
    assert len(plan.per_worker) == 4
    assert max(plan.per_worker) == plan.makespan
    # sampling (LightGBM) pattern uses constrained wrap-around and also beats GTP
    plan = choose_strategy(sizes, 4, 10, 4, pattern="sampling")
    assert plan.placement.algorithm == "constrained_wrap_around"
    assert plan.estimates["gtp"].makespan > 3 * plan.estimates["grouped"].makespan


def test_many_equal_small_groups_gtp_competitive():
    sizes = {f"g{i:02d}": 1000 for i in range(40)}
    plan = choose_strategy(sizes, 4, 10, 4, costs=UnitCosts())
    gtp, gl = plan.estimates["gtp"].makespan, plan.estimates["grouped"].makespan
    assert gtp <= 1.2 * gl
    assert gtp < plan.estimates["dp"].makespan and gtp < plan.estimates["mtp"].makespan
    # with no per-task startup, GTP and grouped place the same whole groups: a tie -> grouped
    c = UnitCosts(task_startup=0, epoch_barrier=0)
    plan = choose_strategy(sizes, 4, 10, 4, costs=c)
    assert plan.estimates["gtp"].makespan == pytest.approx(plan.estimates["grouped"].makespan)
    assert plan.strategy == "grouped"
    # GTP strictly cheapest when grouped pays its epoch barriers and tasks start for free
    plan = choose_strategy(sizes, 4, 10, 4, costs=UnitCosts(task_startup=0, epoch_barrier=1.0))
    assert plan.strategy == "gtp"


def test_sequential_dp_pays_per_step_sync():
    sizes = {f"g{i}": 5000 for i in range(8)}
    plan = choose_strategy(sizes, 4, 5, 4, pattern="sequential", batch_size=32)
    assert plan.estimates["dp"].makespan == max(e.makespan for e in plan.estimates.values())
    assert "per-step synchronisation" in plan.explanation



def test_estimate_ties_go_to_the_earlier_strategy_name():
    # one worker, compute only: every strategy trains 2 configs x 3 epochs x 10 rows = 60 s; the order
    # grouped, gtp, mtp, dp breaks the tie
    pl = choose_strategy(SIZES, 2, 3, 1, costs(compute_per_row=1))
    assert {n: e.makespan for n, e in pl.estimates.items()} == {"grouped": 60.0, "gtp": 60.0, "mtp": 60.0, "dp": 60.0}
    assert pl.strategy == "grouped"
    assert choose_strategy(SIZES, 2, 3, 1, costs(compute_per_row=1), candidates=("dp", "mtp", "gtp")).strategy == "gtp"


def test_one_worker_pays_no_epoch_barrier():
    # a barrier synchronises workers; alone, grouped costs the 60 s of compute and ties (so wins)
    pl = choose_strategy(SIZES, 2, 3, 1, costs(compute_per_row=1, epoch_barrier=1))
    grouped = pl.estimates["grouped"]
    assert grouped.breakdown["sync"] == 0.0 and grouped.makespan == 60.0 and pl.strategy == "grouped"
    # two workers: 3 epochs x 1 s barrier on each of them, on top of a's 2 x 3 x 6 = 36 s
    two = choose_strategy(SIZES, 2, 3, 2, costs(compute_per_row=1, epoch_barrier=1)).estimates["grouped"]
    assert two.breakdown["sync"] == 6.0 and two.makespan == 39.0


def test_grouped_placement_ties_keep_the_first_option():
    # four equal groups on four workers: every option keeps each group whole at 2 x 2 x 50 = 200 s per
    # worker; grouped keeps its own placement (wrap-around in size order / constrained wrap-around)
    eq = {"a": 50, "b": 50, "c": 50, "d": 50}
    seq = estimate_grouped(Workload(eq, n_configs=2, epochs=2, pattern="sequential", batch_size=16), 4,
                           costs(compute_per_row=1))
    assert seq.per_worker == [200.0] * 4 and seq.details["split_groups"] == 0
    assert (seq.placement.algorithm, seq.placement.params) == ("wrap_around", {"group_isolation": True,
                                                                               "order": "size"})
    smp = estimate_grouped(Workload(eq, n_configs=2, epochs=2, pattern="sampling"), 4, costs(compute_per_row=1))
    assert smp.per_worker == [200.0] * 4 and smp.placement.algorithm == "constrained_wrap_around"


def test_forced_strategy_and_plain_data():
    plan = choose_strategy(SIZES, 2, 3, 2, strategy="mtp", candidates=("gtp",))
    assert plan.strategy == "mtp" and set(plan.estimates) == {"gtp", "mtp"}
    assert plan.explanation.startswith("mtp was requested")
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["strategy"] == "mtp" and d["n_workers"] == 2 and d["placement"] is None
    plan = choose_strategy({("US", 1): 5, ("FR", 2): 3}, 2, 2, 2)
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["placement"]["workers"][0][0]["group"] == ["US", 1]


def test_strategy_validation_messages():
    with pytest.raises(InvalidParameterError) as e:
        choose_strategy(SIZES, 2, 3, 2, strategy="foo")
    assert str(e.value) == ("The 'strategy' value of train_groups must be one of 'auto', 'grouped', "
                            "'gtp', 'mtp', 'dp'; got 'foo'")
    with pytest.raises(InvalidParameterError) as e:
        choose_strategy(SIZES, 0, 3, 2)
    assert str(e.value) == "The 'n_configs' value of train_groups must be >= 1; got 0"
    with pytest.raises(InvalidParameterError) as e:
        choose_strategy(SIZES, 2, 3, 0)
    assert str(e.value) == "The 'workers' value of train_groups must be >= 1; got 0"
    with pytest.raises(InvalidParameterError) as e:
        choose_strategy(SIZES, 2, 3, 2, pattern="streaming")
    assert str(e.value) == ("The 'pattern' value of train_groups must be one of 'algebraic', "
                            "'sequential', 'sampling'; got 'streaming'")
    with pytest.raises(InvalidParameterError) as e:
        UnitCosts(update=-1)
    assert str(e.value) == "The 'update' value of unit costs must be >= 0; got -1"
    with pytest.raises(InvalidParameterError) as e:
        UnitCosts.from_dict({"flops": 1})
    assert "Unknown key 'flops' in unit costs" in str(e.value)
    assert UnitCosts.from_dict(UnitCosts(update=2).to_dict()).update == 2.0


def test_unit_costs_from_calibrated_model():
    m = CostModel({"fixed": 0.5, "per_worker": 0.1, "compute": 2e-9, "memory": 4e-9, "elementwise": 0.0,
                   "network": 1e-8})
    u = unit_costs_from_model(m, d=10, k=2)
    assert u.compute_per_row == pytest.approx(2e-8 + 2e-8)
    assert u.model_transfer == pytest.approx(1e-7)
    assert u.sync_per_step == pytest.approx(0.1 + 1e-7)
    assert u.task_startup == 0.5


def test_long_tail_spreads_per_group_overhead():
    # 3 big groups and 300 tiny ones; each group costs a fixed update per config and epoch
    # (one mini-batch). keys interleave big and tiny groups in key order: k000..k050, k050x, ...
    sizes = {**{f"k{i}50x": 3000 for i in range(3)}, **{f"k{i:03d}": 10 for i in range(300)}}
    w = Workload(sizes, n_configs=2, epochs=2, pattern="sequential", batch_size=10_000)
    c = costs(compute_per_row=1e-3, update=0.05)
    by_size = estimate_grouped(w, 4, c, wrap_around(sizes, 4, order="size"))
    best = estimate_grouped(w, 4, c)
    # largest-first leaves all 300 tiny groups (and their updates) to the last worker
    assert by_size.per_worker[-1] > 2 * min(by_size.per_worker)
    assert best.makespan < 0.7 * by_size.makespan
    assert best.placement.params["order"] == "key"
    assert best.makespan <= estimate_gtp(w, 4, c).makespan * 1.05
    # GLMs: the estimate is of the placement the executor runs, constrained wrap-around, which
    # balances rows only (here the same groups on the same workers as GTP)
    glm = Workload(sizes, n_configs=2, epochs=2)
    est = estimate_grouped(glm, 4, c)
    assert est.placement.algorithm == "constrained_wrap_around"
    assert est.per_worker == pytest.approx(estimate_gtp(glm, 4, c).per_worker)


def wrap_around_placement(sizes, p, order):
    return wrap_around(sizes, p, group_isolation=False, order=order)


def test_mtp_pays_a_task_per_epoch_block_and_per_glm_pass():
    # the MLP under MTP runs each config's epoch block as its own task, shipping the state
    # there and back: blocks * (task_startup + 2 * model_transfer) per (group, config)
    w = Workload({"a": 8}, n_configs=2, epochs=4, pattern="sequential", batch_size=4, blocks=4)
    m = estimate_mtp(w, 2, costs(task_startup=1, model_transfer=0.5))
    assert m.per_worker == [8.0, 8.0] and m.breakdown["startup"] == 16.0
    one = Workload({"a": 8}, n_configs=2, epochs=4, pattern="sequential", batch_size=4)
    assert estimate_mtp(one, 2, costs(task_startup=1, model_transfer=0.5)).per_worker == [2.0, 2.0]
    # GLMs: a task per data pass of each config, shipping the weights there and the gradient
    # back (4 epochs: 4 x (1 + 2 x 0.5) per worker), after one statistics task for the group
    # on its first copy (worker 0)
    alg = Workload({"a": 8}, n_configs=2, epochs=4, blocks=4)
    assert estimate_mtp(alg, 2, costs(task_startup=1, model_transfer=0.5)).per_worker == [9.0, 8.0]
    # LightGBM: one task per (group, config) whatever the blocks
    lgb = Workload({"a": 8}, n_configs=2, epochs=4, pattern="sampling", blocks=4)
    assert estimate_mtp(lgb, 2, costs(task_startup=1, model_transfer=0.5)).per_worker == [1.0, 1.0]
    plan = choose_strategy({"a": 8}, 2, 4, 2, pattern="sequential", batch_size=4, blocks=4, strategy="mtp")
    assert plan.workload.to_dict()["blocks"] == 4
    with pytest.raises(InvalidParameterError) as e:
        Workload({"a": 1}, 1, 1, blocks=0)
    assert str(e.value) == "The 'blocks' value of train_groups must be >= 1; got 0"


def test_grouped_keeps_groups_whole_when_a_split_costs_more():
    """Sequential / sampling patterns: a split group costs a task per hop (or a distributed
    job), so grouped keeps groups whole when that balances as well; a dominant group is still
    cut when the hops cost less than an idle worker."""
    tail = {"a": 600, "b": 600, "c": 400}
    for pattern, extra in (("sequential", {"batch_size": 64}), ("sampling", {})):
        w = Workload(tail, n_configs=2, epochs=3, pattern=pattern, **extra)
        c = costs(compute_per_row=1e-6, task_startup=1e-2, model_transfer=1e-4)
        gl = estimate_grouped(w, 2, c)
        assert gl.details["split_groups"] == 0, pattern
        assert gl.makespan <= estimate_gtp(w, 2, c).makespan + 1e-12
        # sequential: three equal large groups on two workers (whole groups leave a worker idle half
        # the time); sampling: one dominant group (constrained wrap-around cuts it in equal shards)
        sizes = ({"a": 1_000_000, "b": 1_000_000, "c": 1_000_000} if pattern == "sequential"
                 else {"a": 2_000_000, "b": 1000})
        big = Workload(sizes, n_configs=2, epochs=3, pattern=pattern, **extra)
        gl = estimate_grouped(big, 2, c)
        assert gl.details["split_groups"] == 1, pattern
        assert gl.makespan < 0.8 * estimate_gtp(big, 2, c).makespan
    # the algebraic pattern: constrained wrap-around, as the executor runs it (no group of the
    # tail reaches 1.5 n/p rows; the dominant one is cut in equal shards)
    w = Workload(tail, n_configs=2, epochs=3)
    assert estimate_grouped(w, 2, costs(compute_per_row=1e-6, task_startup=1e-2)).details["split_groups"] == 0
    w = Workload({"a": 2_000_000, "b": 1000}, n_configs=2, epochs=3)
    gl = estimate_grouped(w, 2, costs(compute_per_row=1e-6, task_startup=1e-2))
    assert gl.placement.algorithm == "constrained_wrap_around" and gl.details["split_groups"] == 1


@pytest.mark.parametrize("sizes, p", [({i: 100_000 for i in range(10)}, 3), ({"A": 5, "B": 3, "C": 3, "D": 1}, 4),
                                      ({"big": 1000, "s1": 400, "s2": 400, "s3": 200}, 2),
                                      ({**{i: 10 for i in range(50)}, 99: 5000}, 4)])
def test_glm_grouped_estimate_is_of_the_placement_the_executor_runs(sizes, p):
    from groupml.executor.plan import make_plan, placement_for

    for strategy in ("auto", "grouped"):
        plan = make_plan(sizes, 4, 10, p, strategy)
        estimated = plan.estimates["grouped"].placement
        for given in (plan, None):          # options.placement 'auto' / 'wrap_around'
            assert placement_for("grouped", sizes, p, "algebraic", plan=given).to_dict() == estimated.to_dict()
        if plan.strategy == "grouped":
            assert plan.placement.to_dict() == estimated.to_dict()


@pytest.mark.parametrize("pattern, sizes, p", [("sequential", {i: 1000 for i in range(5)}, 2),
                                               ("sampling", {0: 600, 1: 100, 2: 100}, 3)])
def test_forced_wrap_around_is_the_placement_priced(pattern, sizes, p):
    """options.placement => 'wrap_around' makes MLP/LightGBM grouped runs use Kingpin's placement;
    the plan's grouped estimate (and so runs.estimated_seconds) is then of that placement."""
    from groupml.executor.plan import make_plan, placement_for
    from groupml.planner import estimate_grouped

    auto = make_plan(sizes, 4, 10, p, "grouped", pattern=pattern)       # whole groups: cheapest here
    forced = make_plan(sizes, 4, 10, p, "grouped", pattern=pattern, placement="wrap_around")
    runs = placement_for("grouped", sizes, p, pattern)          # what the executor runs when forced
    assert any(len(holders) > 1 for holders in runs.shard_index().values())   # it splits a group
    assert auto.placement.to_dict() != runs.to_dict()
    assert forced.placement.to_dict() == runs.to_dict()
    again = estimate_grouped(forced.workload, p, UnitCosts(), runs)
    assert forced.makespan == pytest.approx(again.makespan)
    assert forced.makespan > auto.makespan                       # splitting costs hops / ranks here
    assert "forced placement 'wrap_around'" in forced.explanation
    assert "forced" not in auto.explanation
    glm = make_plan(sizes, 4, 10, p, "grouped", placement="wrap_around")   # GLMs: one placement anyway
    assert glm.makespan == make_plan(sizes, 4, 10, p, "grouped").makespan


def test_mtp_is_not_planned_task_by_task_beyond_its_bound():
    # one task per (group, configuration): 2,000 groups x 1,000 configurations is left out of
    # auto, and refused when asked for, instead of building two million tuples
    from groupml.planner._strategy import MAX_MTP_TASKS

    sizes = {f"g{i}": 100 for i in range(2000)}
    plan = choose_strategy(sizes, 1000, 10, 2)
    assert plan.strategy != "mtp" and "mtp" not in plan.estimates
    with pytest.raises(InvalidParameterError) as info:
        choose_strategy(sizes, 1000, 10, 2, strategy="mtp")
    assert info.value.message == (f"The 'mtp' strategy plans one task per group and configuration, at most "
                                  f"{MAX_MTP_TASKS}; got 2000 groups x 1000 configurations = 2000000")
    assert "mtp" in choose_strategy(sizes, 500, 10, 2).estimates
