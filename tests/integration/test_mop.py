"""Model hopper parallelism (strategy => 'mop'): k configurations hop over the partitions of
one table held by the worker backends, under Cerebro's randomized scheduler."""

import json
import threading
import time

import numpy as np
import psycopg
import pytest

from groupml.executor.invariants import schedule_violations
from groupml.learners import visit_log_violations
from pg_helpers import sql_error

pytestmark = pytest.mark.integration

FEATS = "ARRAY['f1', 'f2', 'f3']"
SPEC = {"method": "grid", "epoch_iters": 1,
        "space": {"lr": [0.01, 0.003], "layers": ["8", "6"], "epochs": [3], "batch_size": [32], "dropout": [0.0]}}


def make_table(db, n=1200, groups=("all",), name="clicks"):
    db.execute(f"CREATE TABLE {name} (country text, f1 float8, f2 float8, f3 float8, clicked int)")
    rng = np.random.default_rng(11)
    with db.cursor() as cur:
        with cur.copy(f"COPY {name} FROM STDIN") as cp:
            for g in groups:
                X = rng.normal(size=(n, 3))
                z = 1.5 * X[:, 0] - X[:, 1] + 0.5 * X[:, 0] * X[:, 2] + rng.normal(scale=0.5, size=n)
                for x, v in zip(X, z):
                    cp.write_row((g, *map(float, x), int(v > 0)))


@pytest.fixture
def clicks(db):
    make_table(db)


def mop(db, spec=SPEC, workers=2, options=None, group_by="ARRAY[]::text[]", run_id="NULL", source="clicks",
        model="mlp"):
    opts = dict({"keep_snapshot": True}, **(options or {}))
    return db.execute(f"CALL groupml.train_groups(%s, {group_by}, {FEATS}, 'clicked', %s, %s::jsonb, %s::jsonb, "
                      f"{run_id}, workers => {workers}, strategy => 'mop')",
                      [source, model, json.dumps(spec), json.dumps(opts)]).fetchone()[0]


def visits(db, run_id):
    rows = db.execute("SELECT group_key::text, pass, worker, shard, row_start, n_rows, trials, started, finished, kind "
                      "FROM groupml.run_schedule WHERE run_id = %s ORDER BY started", [run_id]).fetchall()
    names = ["group_key", "pass", "worker", "shard", "row_start", "n_rows", "trials", "started", "finished", "kind"]
    return [dict(zip(names, r)) for r in rows]


def as_visits(log):
    return [{"trial": e["trials"][0], "epoch": e["pass"], "shard": e["shard"], "worker": e["worker"],
             "start": e["started"], "end": e["finished"]} for e in log if e["kind"] == "visit"]


def check_run(db, run_id, workers, epochs=3):
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    assert db.execute("SELECT strategy FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0] == "mop"
    log = visits(db, run_id)
    sizes = dict(db.execute("SELECT g.group_key::text, g.n_train FROM groupml.snapshot_groups g JOIN "
                            "groupml.grouped_runs r USING (snapshot_id) WHERE r.run_id = %s", [run_id]).fetchall())
    assert schedule_violations(log, sizes, {}) == []
    for gkey in sizes:
        v = as_visits([e for e in log if e["group_key"] == gkey])
        trials = {x["trial"] for x in v}
        assert len(trials) == 4
        assert visit_log_violations(v, workers, {t: epochs for t in trials}) == []
    return log


def test_mop_over_an_ungrouped_table_keeps_rows_on_their_worker(db, clicks):
    run_id = mop(db)
    log = check_run(db, run_id, 2)
    v = [e for e in log if e["kind"] == "visit"]
    # partition s lives on worker s: rows stay put, only model states hop
    assert all(e["worker"] == e["shard"] for e in v)
    assert {e["worker"] for e in v} == {0, 1}
    # the two partitions tile the training rows
    bounds = sorted({(e["row_start"], e["n_rows"]) for e in v})
    assert len(bounds) == 2 and bounds[0][0] == 0 and bounds[1][0] == sum(bounds[0])
    best = db.execute("SELECT (fit).status FROM groupml.models WHERE run_id = %s", [run_id]).fetchone()[0]
    assert best == "ok"


@pytest.mark.parametrize("model", ["mlp", "logistic"])
def test_mop_runs_inside_each_group(db, model):
    make_table(db, n=500, groups=("a", "b"))
    run_id = mop(db, group_by="ARRAY['country']", model=model, spec=SPEC if model == "mlp" else GLM_SPEC)
    log = check_run(db, run_id, 2)
    assert {e["group_key"] for e in log if e["kind"] == "visit"} == {'{"country": "a"}', '{"country": "b"}'}


@pytest.mark.parametrize("stmt, state, text", [
    ("CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1'], 'clicked', 'lightgbm', '{}', '{}', "
     "workers => 2, strategy => 'mop')", "0A000", "strategy"),
    ("CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1'], 'clicked', 'logistic', "
     "'{\"solver\": \"lbfgs\"}', '{}', workers => 2, strategy => 'mop')", "22023", "'sgd'"),
    ("CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1'], 'clicked', 'logistic', "
     "'{\"space\": {\"tol\": [0.001]}}', '{}', workers => 2, strategy => 'mop')", "22023", "'tol'"),
    ("CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1'], 'clicked', 'linear', "
     "'{\"lr\": [-1]}', '{}', workers => 2, strategy => 'mop')", "22023", "'lr'"),
    ("CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1'], 'clicked', 'svm', "
     "'{\"epochs\": [3]}', '{}', workers => 2, strategy => 'mop')", "22023", "max_iter"),
    ("CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1'], 'clicked', 'mlp', '{}', "
     "'{\"replicas\": 0}', workers => 2, strategy => 'mop')", "22023", "replicas"),
    ("CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1'], 'clicked', 'mlp', '{}', '{}', "
     "workers => 2, strategy => 'hop')", "22023", "strategy"),
])
def test_bad_mop_requests_are_refused_before_anything_is_written(db, clicks, stmt, state, text):
    got_state, message, hint = sql_error(db, stmt)
    assert got_state == state and text in message and hint
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0


def stored_best(db, run_id, gkey=None):
    """(best trial id, its stored model bytes) of the run's (only, or named) group."""
    where, args = ("", [run_id]) if gkey is None else (" AND group_key = %s::jsonb", [run_id, gkey])
    trials, model = db.execute(f"SELECT (fit).trials, (fit).model FROM groupml.models WHERE run_id = %s{where}",
                               args).fetchone()
    return [t for t in trials if t["is_best"]][0]["trial_id"], bytes(model)


def test_replay_returns_the_stored_model_bit_for_bit(db, clicks):
    run_id = mop(db)
    tid, model = stored_best(db, run_id)
    again = bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, tid]).fetchone()[0])
    assert again == model
    # another configuration replays to another model
    other = (tid + 1) % 4
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, other]).fetchone()[0]) != model


def test_replay_refuses_what_it_cannot_replay(db, clicks):
    run_id = mop(db, options={"keep_snapshot": False})
    tid, _ = stored_best(db, run_id)
    state, message, hint = sql_error(db, "SELECT groupml.replay(%s, %s)", [run_id, tid])
    assert state == "55000" and "snapshot" in message and "keep_snapshot" in hint
    for args, want in [((run_id + 100, 0), "42704"), ((run_id, 999), "42704"), ((0, 0), "22023"),
                       ((run_id, -1), "22023")]:
        state, message, hint = sql_error(db, "SELECT groupml.replay(%s, %s)", list(args))
        assert state == want and hint, (args, message)
    # nothing was written
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 1


def terminate_worker_when(dsn, worker, condition_sql, timeout=120.0):
    """A thread that terminates worker backend ``worker`` of the running train_groups (found by
    its application_name) while it runs a task, once ``condition_sql`` is true."""
    fired = threading.Event()

    def watch():
        with psycopg.connect(dsn, autocommit=True) as w:
            deadline = time.time() + timeout
            while time.time() < deadline:
                if w.execute(condition_sql).fetchone()[0]:
                    pid = w.execute("SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s AND "
                                    "state = 'active'", [f"groupml worker {worker} run %"]).fetchone()
                    if pid:
                        w.execute("SELECT pg_terminate_backend(%s)", [pid[0]])
                        fired.set()
                        return
                time.sleep(0.005)

    t = threading.Thread(target=watch)
    t.start()
    return t, fired


# long enough that the run is still going well after its first committed epoch on any host (an
# epoch here takes a few hundredths of a second; the first also starts torch in the workers), with
# every finished epoch committed at once (checkpoint_every_s 0) so the watcher sees it soon
FAULT_EPOCHS = 30
FAULT_SPEC = dict(SPEC, space=dict(SPEC["space"], epochs=[FAULT_EPOCHS]))
AFTER_FIRST_EPOCH = "SELECT coalesce(max(epochs_done), 0) >= 1 FROM groupml.grouped_runs"


def test_a_worker_terminated_mid_run_hands_its_units_to_a_replica(db, dsn):
    make_table(db, n=6000)
    t, fired = terminate_worker_when(dsn, 0, AFTER_FIRST_EPOCH)
    try:
        run_id = mop(db, spec=FAULT_SPEC, options={"replicas": 2, "checkpoint_every_s": 0})
    finally:
        t.join()
    assert fired.is_set()
    log = check_run(db, run_id, 2, epochs=FAULT_EPOCHS)
    v = [e for e in log if e["kind"] == "visit"]
    # after the loss every unit ran on worker 1, partition 0's too
    assert any(e["worker"] == 1 and e["shard"] == 0 for e in v)
    tid, model = stored_best(db, run_id)
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, tid]).fetchone()[0]) == model


def test_losing_the_only_holder_of_a_partition_stops_resumably(db, dsn):
    make_table(db, n=6000)
    t, fired = terminate_worker_when(dsn, 1, AFTER_FIRST_EPOCH)
    try:
        state, message, hint = sql_error(
            db, "CALL groupml.train_groups('clicks', ARRAY[]::text[], " + FEATS + ", 'clicked', 'mlp', %s::jsonb, "
                "'{\"keep_snapshot\": true, \"checkpoint_every_s\": 0}', NULL, workers => 2, strategy => 'mop')",
            [json.dumps(FAULT_SPEC)])
    finally:
        t.join()
    assert fired.is_set()
    assert state == "08006" and "no live holder" in message and "run_id =>" in hint and "replicas" in hint
    run_id, status = db.execute("SELECT run_id, status FROM groupml.runs").fetchone()
    assert status == "failed"
    assert mop(db, spec=FAULT_SPEC, run_id=run_id) == run_id            # resumes and finishes
    check_run(db, run_id, 2, epochs=FAULT_EPOCHS)
    tid, model = stored_best(db, run_id)
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, tid]).fetchone()[0]) == model


def test_progress_shows_epochs_sub_epochs_and_losses_and_a_cancelled_run_resumes(db, dsn):
    make_table(db, n=6000)
    seen = []

    def watch_then_cancel():
        with psycopg.connect(dsn, autocommit=True) as w:
            deadline = time.time() + 120
            while time.time() < deadline:
                row = w.execute("SELECT last_event, epochs_done FROM groupml.progress WHERE strategy = 'mop'").fetchone()
                if row and row[0] and "loss" in row[0]:
                    seen.append(row[0])
                    w.execute("SELECT pg_cancel_backend(%s)", [pid])
                    return
                time.sleep(0.01)

    pid = db.info.backend_pid
    t = threading.Thread(target=watch_then_cancel)
    t.start()
    try:
        state, message, _ = sql_error(
            db, "CALL groupml.train_groups('clicks', ARRAY[]::text[], " + FEATS + ", 'clicked', 'mlp', %s::jsonb, "
                "'{\"keep_snapshot\": true, \"checkpoint_every_s\": 0}', NULL, workers => 2, strategy => 'mop')",
            [json.dumps(FAULT_SPEC)])
    finally:
        t.join()
    assert seen and state == "57014"
    # "trial 0 epoch 1 sub-epoch 1/2 loss 0.5123; trial 1 ..."
    assert "mop: trial " in seen[0] and " sub-epoch " in seen[0] and "/2" in seen[0]
    run_id = db.execute("SELECT run_id FROM groupml.runs").fetchone()[0]
    assert mop(db, spec=FAULT_SPEC, run_id=run_id) == run_id
    check_run(db, run_id, 2, epochs=FAULT_EPOCHS)
    tid, model = stored_best(db, run_id)
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, tid]).fetchone()[0]) == model


def asha_run(db, spec, **kw):
    """Epochs each trial of a new MOP run of ``spec`` visited; its visit log is sound and its
    best trial replays to the stored model."""
    run_id = mop(db, spec=spec, **kw)
    tid, model = stored_best(db, run_id)
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, tid]).fetchone()[0]) == model
    v = as_visits(visits(db, run_id))
    assert visit_log_violations(v, 2) == []
    epochs = {}
    for x in v:
        epochs[x["trial"]] = max(epochs.get(x["trial"], 0), x["epoch"] + 1)
    return epochs


def test_asha_drives_mop_epoch_by_epoch(db, clicks):
    spec = {"method": "asha", "n_trials": 6, "max_epochs": 4, "min_epochs": 1, "eta": 2, "epoch_iters": 1,
            "space": {"lr": {"loguniform": [0.001, 0.1]}, "layers": ["8"], "epochs": [4],
                      "batch_size": [32]}}
    epochs = asha_run(db, spec)
    assert len(epochs) >= 6 and min(epochs.values()) < 4 and max(epochs.values()) == 4   # ASHA stopped some early


@pytest.mark.parametrize("model", ["mlp", "logistic"])
def test_explain_train_groups_describes_a_mop_plan(db, clicks, model):
    spec = SPEC if model == "mlp" else GLM_SPEC
    rows = db.execute(f"SELECT strategy, explanation FROM groupml.explain_train_groups('clicks', ARRAY[]::text[], "
                      f"{FEATS}, 'clicked', %s, %s::jsonb, '{{}}', 2, 'mop') WHERE chosen",
                      [model, json.dumps(spec)]).fetchall()
    assert rows and rows[0][0] == "mop" and "partitions" in rows[0][1]


# ------------------------------------------------------------------ GLMs trained by SGD
GLM_SPEC = {"method": "grid", "epoch_iters": 1,
            "space": {"lr": [0.3, 0.03], "l2": [0.0, 0.001], "max_iter": [3], "batch_size": [64]}}


@pytest.fixture
def separable(db):
    """A well-separated logistic table of a few thousand rows, columns on very different scales."""
    db.execute("CREATE TABLE sep (country text, f1 float8, f2 float8, f3 float8, clicked int)")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 3)) * [1.0, 40.0, 0.01] + [2.0, -100.0, 0.0]
    z = 2.0 * (X[:, 0] - 2.0) - (X[:, 1] + 100.0) / 20.0 + rng.normal(scale=0.3, size=3000)
    with db.cursor() as cur:
        with cur.copy("COPY sep FROM STDIN") as cp:
            for x, v in zip(X, z):
                cp.write_row(("all", *map(float, x), int(v > 0)))


def best_metric(db, run_id, name="accuracy"):
    return db.execute("SELECT ((fit).metrics ->> %s)::float8 FROM groupml.models WHERE run_id = %s",
                      [name, run_id]).fetchone()[0]


def test_a_logistic_mop_run_trains_by_sgd_matches_lbfgs_and_replays_bit_for_bit(db, separable):
    run_id = mop(db, spec=GLM_SPEC, source="sep", model="logistic")
    check_run(db, run_id, 2)
    params = [r[0] for r in db.execute("SELECT params FROM groupml.trials WHERE run_id = %s", [run_id]).fetchall()]
    assert len(params) == 4 and all(p["solver"] == "sgd" for p in params)
    tid, model = stored_best(db, run_id)
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, tid]).fetchone()[0]) == model
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, (tid + 1) % 4]).fetchone()[0]) != model
    # an ordinary GLM fit: groupml.predict scores it, on the user's scale
    acc = db.execute("SELECT avg((groupml.predict(m.fit, ARRAY[s.f1, s.f2, s.f3]) = s.clicked)::int) "
                     "FROM sep s, groupml.models m WHERE m.run_id = %s", [run_id]).fetchone()[0]
    # the same data fit by lbfgs in one backend (same seed: the same validation rows)
    lbfgs = db.execute("CALL groupml.train_groups('sep', ARRAY[]::text[], " + FEATS + ", 'clicked', 'logistic', "
                       "'{}', '{}', NULL)").fetchone()[0]
    assert best_metric(db, lbfgs) > 0.9
    assert best_metric(db, run_id) >= best_metric(db, lbfgs) - 0.05
    assert float(acc) >= best_metric(db, lbfgs) - 0.05


def test_asha_drives_a_linear_mop_run_and_replays(db, separable):
    spec = {"method": "asha", "n_trials": 4, "max_epochs": 4, "min_epochs": 1, "eta": 2, "epoch_iters": 1,
            "space": {"lr": {"loguniform": [0.001, 0.1]}, "max_iter": [4], "batch_size": [128]}}
    epochs = asha_run(db, spec, source="sep", model="linear")
    assert len(epochs) >= 4 and max(epochs.values()) == 4


def test_svm_mop_runs_hinge_and_squared_hinge_sgd_and_replays(db, separable):
    spec = {"method": "grid", "epoch_iters": 1,
            "space": {"lr": [0.1, 0.01], "loss": ["hinge", "squared_hinge"], "max_iter": [3], "batch_size": [64]}}
    run_id = mop(db, spec=spec, source="sep", model="svm")
    check_run(db, run_id, 2)
    assert best_metric(db, run_id) > 0.9
    tid, model = stored_best(db, run_id)
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, tid]).fetchone()[0]) == model
