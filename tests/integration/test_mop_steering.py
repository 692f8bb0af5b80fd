"""Steering a running model hopper run from another session: mop_add_trial, mop_stop_trial and
mop_add_workers file requests in groupml.run_requests; the run applies them between epochs
(trials) and sub-epochs (workers) and marks them applied with its progress."""

import json
import threading
import time

import psycopg
import pytest

from groupml.executor.invariants import schedule_violations
from groupml.learners import visit_log_violations
from pg_helpers import cancel_when, sql_error
from test_mop import FAULT_EPOCHS, FAULT_SPEC, as_visits, make_table, mop, stored_best, visits

pytestmark = pytest.mark.integration

ADDED = {"lr": 0.01, "layers": "8", "epochs": 4, "batch_size": 32}


def steer_when(dsn, condition_sql, statements, timeout=120.0):
    """A thread that runs ``statements`` (SQL taking the running run's id) from another session
    once ``condition_sql`` is true; their results go to the returned list."""
    out = []

    def watch():
        with psycopg.connect(dsn, autocommit=True) as w:
            deadline = time.time() + timeout
            while time.time() < deadline:
                if w.execute(condition_sql).fetchone()[0]:
                    rid = w.execute("SELECT run_id FROM groupml.grouped_runs").fetchone()[0]
                    out.extend(w.execute(sql, [rid] + list(args)).fetchone()[0] for sql, args in statements)
                    return
                time.sleep(0.005)

    t = threading.Thread(target=watch)
    t.start()
    return t, out


def test_another_session_adds_and_stops_trials_and_adds_a_worker_mid_run(db, dsn):
    make_table(db, n=6000)
    t, got = steer_when(dsn, "SELECT coalesce(max(epochs_done), 0) >= 1 FROM groupml.grouped_runs", [
        ("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [json.dumps(ADDED)]),
        ("SELECT groupml.mop_stop_trial(%s, %s)", [0]),
        ("SELECT groupml.mop_add_workers(%s, %s)", [1])])
    try:
        run_id = mop(db, spec=FAULT_SPEC, options={"checkpoint_every_s": 0})
    finally:
        t.join()
    assert len(got) == 3, got
    added = got[0]
    assert added == 1000000
    reqs = db.execute("SELECT kind, status, applied_at IS NOT NULL, note FROM groupml.run_requests "
                      "WHERE run_id = %s ORDER BY request_id", [run_id]).fetchall()
    assert [(k, s, a) for k, s, a, _ in reqs] == [("add_trial", "applied", True), ("stop_trial", "applied", True),
                                                 ("add_workers", "applied", True)], reqs
    assert "worker" in reqs[2][3] and "2" in reqs[2][3]

    log = visits(db, run_id)
    n_train = db.execute("SELECT g.n_train FROM groupml.snapshot_groups g JOIN groupml.grouped_runs r "
                         "USING (snapshot_id) WHERE r.run_id = %s", [run_id]).fetchone()[0]
    assert schedule_violations(log, {"{}": n_train}, {}) == []
    v = as_visits(log)
    # the new worker loaded both partitions, then took units of both
    assert {e["shard"] for e in log if e["kind"] == "load" and e["worker"] == 2} == {0, 1}
    assert {x["shard"] for x in v if x["worker"] == 2} == {0, 1}
    # every trial, the added one too, saw every partition exactly once in each of its epochs; the
    # trials nobody stopped ran all their epochs, the added one its 4, the stopped one fewer
    assert visit_log_violations(v, 2, {1: FAULT_EPOCHS, 2: FAULT_EPOCHS, 3: FAULT_EPOCHS, added: 4}) == []
    epochs = {}
    for x in v:
        epochs[x["trial"]] = max(epochs.get(x["trial"], 0), x["epoch"] + 1)
    assert epochs[added] == 4 and 1 <= epochs[0] < FAULT_EPOCHS
    trials = {t["trial_id"]: t for t in db.execute("SELECT (fit).trials FROM groupml.models WHERE run_id = %s",
                                                   [run_id]).fetchone()[0]}
    assert trials[0]["status"] == "stopped" and "request" in trials[0]["stop_reason"]
    assert trials[0]["epochs"] == epochs[0]
    assert trials[added]["epochs"] == 4 and trials[added]["params"]["lr"] == 0.01
    assert db.execute("SELECT count(*) FROM groupml.trials WHERE run_id = %s AND trial_id = %s AND status = 'stopped'",
                      [run_id, 0]).fetchone()[0] == 1
    tid, model = stored_best(db, run_id)
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, tid]).fetchone()[0]) == model


def test_requests_filed_while_a_run_is_stopped_apply_once_when_it_resumes(db, dsn):
    make_table(db, n=6000)
    t, fired = cancel_when(dsn, db.info.backend_pid,
                           "SELECT coalesce(max(epochs_done), 0) >= 2 FROM groupml.grouped_runs")
    try:
        state, _, _ = sql_error(db, "CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1', 'f2', 'f3'], "
                                    "'clicked', 'mlp', %s::jsonb, '{\"keep_snapshot\": true, \"checkpoint_every_s\": 0}', "
                                    "NULL, workers => 2, strategy => 'mop')", [json.dumps(FAULT_SPEC)])
    finally:
        t.join()
    assert fired.is_set() and state == "57014"
    run_id, status = db.execute("SELECT run_id, status FROM groupml.runs").fetchone()
    assert status == "cancelled"
    stopped_at = db.execute("SELECT max(epoch) FROM groupml.run_epochs WHERE run_id = %s AND trial_id = 1",
                            [run_id]).fetchone()[0]
    added = db.execute("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [run_id, json.dumps(ADDED)]).fetchone()[0]
    db.execute("SELECT groupml.mop_stop_trial(%s, 1)", [run_id])
    db.execute("SELECT groupml.mop_add_workers(%s, 1)", [run_id])
    assert mop(db, spec=FAULT_SPEC, run_id=run_id, options={"checkpoint_every_s": 0}) == run_id
    assert db.execute("SELECT array_agg(status ORDER BY request_id) FROM groupml.run_requests WHERE run_id = %s",
                      [run_id]).fetchone()[0] == ["applied"] * 3
    v = as_visits(visits(db, run_id))
    # applied at the resumed search's first boundary: trial 1 trained no epoch after the cancel's
    # checkpoint, the added trial its 4 epochs (each partition once each, none twice), the new
    # worker took units
    epochs = {}
    for x in v:
        epochs[x["trial"]] = max(epochs.get(x["trial"], 0), x["epoch"] + 1)
    assert epochs[1] == stopped_at and epochs[added] == 4
    assert visit_log_violations(v, 2, {0: FAULT_EPOCHS, 1: stopped_at, 2: FAULT_EPOCHS, 3: FAULT_EPOCHS,
                                       added: 4}) == []
    assert any(x["worker"] == 2 for x in v)
    tid, model = stored_best(db, run_id)
    assert bytes(db.execute("SELECT groupml.replay(%s, %s)", [run_id, tid]).fetchone()[0]) == model


def test_bad_requests_are_refused_and_nothing_is_written(db, dsn):
    make_table(db)
    done = mop(db)
    grid = db.execute("CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1'], 'clicked', 'logistic', "
                      "'{}', '{}', workers => 2, strategy => 'grouped')").fetchone()[0]
    # a MOP run that stopped can still take requests (they apply when it resumes): fake one
    db.execute("UPDATE groupml.runs SET status = 'failed' WHERE run_id = %s", [done])
    failed = done
    done = mop(db)
    for sql, args, state, words in [
        ("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [999, '{"lr": 0.1}'], "42704", "999"),
        ("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [0, '{"lr": 0.1}'], "22023", "run_id"),
        ("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [done, '{"lr": 0.1}'], "55000", "done"),
        ("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [grid, '{"lr": 0.1}'], "55000", "grouped"),
        ("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [failed, '{"lr": -1}'], "22023", "lr"),
        ("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [failed, '{"depth": 3}'], "22023", "depth"),
        ("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [failed, '[1, 2]'], "22023", "params"),
        ("SELECT groupml.mop_add_trial(%s, NULL)", [failed], "22023", "params"),
        ("SELECT groupml.mop_stop_trial(%s, %s)", [failed, -1], "22023", "trial_id"),
        ("SELECT groupml.mop_stop_trial(%s, %s)", [failed, 77], "42704", "77"),
        ("SELECT groupml.mop_stop_trial(%s, %s)", [failed, 0], "55000", "finished"),
        ("SELECT groupml.mop_add_workers(%s, %s)", [failed, 0], "22023", "'n'"),
        ("SELECT groupml.mop_add_workers(%s, %s)", [failed, 65], "22023", "'n'"),
        ("SELECT groupml.mop_add_workers(%s, %s)", [failed, 100000], "22023", "'n'"),
    ]:
        got, message, hint = sql_error(db, sql, args)
        assert got == state and words in message and hint, (sql, args, got, message)
    # with endpoints configured, a request may not ask for more workers than are left
    db.execute("INSERT INTO groupml.worker_endpoints (name, dsn) VALUES ('a', 'loopback'), ('b', 'loopback'), "
               "('c', 'loopback')")
    got, message, hint = sql_error(db, "SELECT groupml.mop_add_workers(%s, 2)", [failed])
    assert got == "22023" and "the 1 enabled rows" in message and hint
    db.execute("DELETE FROM groupml.worker_endpoints")
    assert db.execute("SELECT count(*) FROM groupml.run_requests").fetchone()[0] == 0
    # a stopped run takes requests; a second stop of one trial is refused
    tid = db.execute("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [failed, json.dumps(ADDED)]).fetchone()[0]
    assert db.execute("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [failed, json.dumps(ADDED)]).fetchone()[0] \
        == tid + 1
    db.execute("SELECT groupml.mop_stop_trial(%s, %s)", [failed, tid])
    got, message, hint = sql_error(db, "SELECT groupml.mop_stop_trial(%s, %s)", [failed, tid])
    assert got == "55000" and "already" in message and hint
    assert db.execute("SELECT count(*) FROM groupml.run_requests").fetchone()[0] == 3


def test_requests_follow_row_security(db, cluster, dbname):
    make_table(db)
    run_id = mop(db)
    db.execute("UPDATE groupml.runs SET status = 'failed' WHERE run_id = %s", [run_id])
    db.execute("CREATE ROLE steer_other LOGIN")
    try:
        with psycopg.connect(cluster.dsn(dbname, user="steer_other"), autocommit=True) as other:
            got, message, hint = sql_error(other, "SELECT groupml.mop_add_workers(%s, 1)", [run_id])
            assert got == "42501" and "run_requests" in hint
            db.execute("GRANT SELECT ON groupml.runs, groupml.grouped_runs, groupml.run_epochs, "
                       "groupml.worker_endpoints TO steer_other")
            db.execute("GRANT SELECT, INSERT ON groupml.run_requests TO steer_other")
            db.execute("GRANT USAGE ON SEQUENCE groupml.run_requests_request_id_seq TO steer_other")
            # another role's run is not visible: as if it did not exist
            got, message, hint = sql_error(other, "SELECT groupml.mop_add_workers(%s, 1)", [run_id])
            assert got == "42704" and str(run_id) in message and "groupml_admin" in hint
            # nor can a request for it be written around the function
            got, _, _ = sql_error(other, "INSERT INTO groupml.run_requests (run_id, kind, n_workers) "
                                         "VALUES (%s, 'add_workers', 1)", [run_id])
            assert got == "42501"
            assert db.execute("SELECT count(*) FROM groupml.run_requests").fetchone()[0] == 0
            db.execute("GRANT groupml_admin TO steer_other")
            assert other.execute("SELECT groupml.mop_add_workers(%s, 1)", [run_id]).fetchone()[0] >= 1
    finally:
        db.execute("DROP OWNED BY steer_other")
        db.execute("DROP ROLE steer_other")
