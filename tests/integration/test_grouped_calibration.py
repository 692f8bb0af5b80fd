"""The planner's unit costs calibrated from the tasks of earlier train_groups runs."""

import json

import pytest

from groupml.datagen import create_table, grouped_classification

pytestmark = pytest.mark.integration

FEATS = "ARRAY['f1', 'f2', 'f3', 'f4', 'f5']"
SPEC = '{"l2": [0.001, 0.1, 1.0]}'


@pytest.fixture
def clicks(db):
    create_table(db, "clicks", grouped_classification(20000, 6, 5, seed=3, exponent=1.1))


def on_workers(options: str) -> str:
    """``options`` with an option only worker backends take (its default value), so that strategy
    'auto' chooses among the worker strategies and never one backend (test_backend_choice.py)."""
    return json.dumps({"keep_snapshot": False, **json.loads(options)})


def call(db, options="{}"):
    return db.execute(f"CALL groupml.train_groups('clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                      f"%s::jsonb, %s::jsonb, NULL, workers => 2)", [SPEC, on_workers(options)]).fetchone()[0]


def explain(db, options="{}"):
    rows = db.execute(f"SELECT strategy, chosen, worker, estimated_seconds, explanation FROM "
                      f"groupml.explain_train_groups('clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                      f"%s::jsonb, %s::jsonb, 2)", [SPEC, on_workers(options)]).fetchall()
    return [r for r in rows if r[1]]


@pytest.mark.parametrize("groups, options", [(6, '{"whole_group_tasks": false}'), (24, "{}")],
                         ids=["pass-tasks", "whole-group-tasks"])
def test_explain_and_runs_use_unit_costs_measured_by_earlier_runs(db, groups, options):
    # one task per data pass (6 groups give plenty of tasks), or -- the default for groups
    # that are not split -- one task per group, measured by its trials' configuration-passes
    # (enough rows that a task's time is not all fixed cost: with 20,000 rows over 6 groups a
    # pass task's per-row part was a quarter of its time, and once lost in the noise)
    create_table(db, "clicks", grouped_classification(80000, groups, 5, seed=3, exponent=1.1))
    before = explain(db)
    assert "Unit costs are not calibrated" in before[0][4]
    first = call(db, options)
    kinds = {r[0] for r in db.execute("SELECT DISTINCT kind FROM groupml.run_schedule WHERE run_id = %s",
                                      [first]).fetchall()}
    assert kinds == ({"pass", "stats"} if groups == 6 else {"fit"})
    plan1 = db.execute("SELECT plan FROM groupml.grouped_runs WHERE run_id = %s", [first]).fetchone()[0]
    assert plan1["unit_costs"]["calibrated"] is False
    assert plan1["workload"] == {"n_configs": 3, "epochs": 100, "blocks": 10}

    chosen = explain(db, options)
    text = chosen[0][4]
    assert "Unit costs calibrated from" in text and "1 earlier run(s)" in text
    assert "compute_per_row" in text and "worker_startup" in text
    assert "of the planned config-epochs" in text      # L-BFGS converges long before max_iter
    assert len(chosen) == 2
    makespan = max(r[3] for r in chosen)
    assert makespan > 0

    # a second, identical run plans with the same measurements
    second = call(db, options)
    strategy, plan2 = db.execute("SELECT strategy, plan FROM groupml.grouped_runs WHERE run_id = %s",
                                 [second]).fetchone()
    uc = plan2["unit_costs"]
    assert uc["calibrated"] is True and uc["runs"] == 1 and uc["tasks"] >= 20
    # a whole-group task loads its rows once and trains on them for a similar number of
    # configuration-passes in every group: loading and compute are (nearly) collinear there
    measured = ("compute_per_row", "load_per_row", "task_startup", "worker_startup") if groups == 6 else \
        ("compute_per_row", "task_startup", "worker_startup")
    for f in measured:
        assert uc["sources"][f].startswith("measured"), f
    assert uc["sources"]["epoch_barrier"] == "default"
    assert 0 < uc["work_ratio"] < 1
    assert strategy == chosen[0][0]
    seconds, estimated = db.execute("SELECT seconds, estimated_seconds FROM groupml.runs WHERE run_id = %s",
                                    [second]).fetchone()
    # explain sizes groups from counts (validation share estimated), the run from its snapshot
    assert estimated == pytest.approx(makespan, rel=0.25)
    # the planner prices the training, which runs between the first task and the last; the
    # run's seconds also hold the snapshot build and the catalog writes. How close the
    # calibrated estimate comes to the measured time is bench/bench_calibration.py's figure
    span = db.execute("SELECT max(finished) - min(started) FROM groupml.run_schedule WHERE run_id = %s",
                      [second]).fetchone()[0]
    assert 0 < span < seconds
    # the first run's estimate, made with the defaults, is kept beside its measured time
    assert db.execute("SELECT estimated_seconds FROM groupml.runs WHERE run_id = %s", [first]).fetchone()[0] > 0
    assert json.loads(json.dumps(uc))["costs"]["compute_per_row"] > 0


def test_a_run_in_one_backend_gives_the_work_ratio_to_later_plans(db, clicks):
    # a run in one backend records no tasks: its trials' configuration-passes say how much of
    # the planned budget the search ran (L-BFGS stops long before max_iter), and later plans
    # of the same search expect as much
    assert "of the planned config-epochs" not in explain(db)[0][4]
    db.execute(f"CALL groupml.train_groups('clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', %s::jsonb)",
               [SPEC])
    assert db.execute("SELECT count(*) FROM groupml.grouped_runs").fetchone()[0] == 0
    text = explain(db)[0][4]
    assert "earlier runs of this search ran" in text and "of the planned config-epochs (1 run(s))" in text
    # another search has no comparable run
    other = db.execute(f"SELECT explanation FROM groupml.explain_train_groups('clicks', ARRAY['country'], {FEATS}, "
                       f"'clicked', 'logistic', '{{\"l2\": [0.5]}}', %s::jsonb, 2) WHERE chosen",
                       [on_workers("{}")]).fetchone()[0]
    assert "of the planned config-epochs" not in other


def test_explain_by_a_role_that_cannot_read_the_run_catalog(db, dbname, clicks):
    call(db)
    role = f"calib_reader_{dbname}"
    db.execute(f"CREATE ROLE {role}")
    db.execute(f"GRANT USAGE ON SCHEMA groupml TO {role}")
    db.execute(f"GRANT SELECT ON clicks TO {role}")
    db.execute(f"SET ROLE {role}")
    try:
        chosen = explain(db)
    finally:
        db.execute("RESET ROLE")
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")
    assert chosen and "Unit costs are not calibrated (this role cannot read the run catalog)" in chosen[0][4]
