"""train_groups with workers: snapshot, worker backends, GAP for GLMs, strategies, resume."""

import json
import re
import threading
import time

import numpy as np
import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification
from groupml.executor.invariants import schedule_violations
from groupml.learners import load_model
from pg_helpers import TEMPLATE, cancel_when, sql_error

pytestmark = pytest.mark.integration

GRID = '{"l2": [0.001, 0.1], "class_weight": [null, "balanced"]}'
FEATS = "ARRAY['f1', 'f2', 'f3']"


@pytest.fixture
def clicks(db):
    data = grouped_classification(6000, 5, 3, seed=41, exponent=1.1)
    create_table(db, "clicks", data)
    return data


def call(db, workers, strategy="auto", options="{}", run_id="NULL", spec=GRID, source="clicks"):
    return db.execute(f"CALL groupml.train_groups({source!r}, ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                      f"%s::jsonb, %s::jsonb, {run_id}, workers => {workers}, strategy => %s)",
                      [spec, options, strategy]).fetchone()[0]


def models(db, run_id):
    out = {}
    for key, fit_params, score, model in db.execute(
            "SELECT group_key->>'country', (fit).params, (fit).score, (fit).model FROM groupml.models "
            "WHERE run_id = %s", [run_id]).fetchall():
        m = load_model(bytes(model)) if model is not None else None
        out[key] = (fit_params, score, None if m is None else np.append(m.coef, m.intercept))
    return out


def schedule(db, run_id):
    rows = db.execute("SELECT group_key::text, pass, worker, shard, row_start, n_rows, trials, started, finished, "
                      "kind FROM groupml.run_schedule WHERE run_id = %s", [run_id]).fetchall()
    names = ["group_key", "pass", "worker", "shard", "row_start", "n_rows", "trials", "started", "finished", "kind"]
    return [dict(zip(names, r)) for r in rows]


def assert_same(a, b, tol=1e-6):
    assert set(a) == set(b)
    for k in a:
        assert a[k][0] == b[k][0], k
        assert a[k][1] == pytest.approx(b[k][1], abs=tol)
        np.testing.assert_allclose(a[k][2], b[k][2], atol=tol, rtol=0)


def test_gap_equals_single_worker_and_one_backend(db, clicks):
    one = call(db, 1)                                  # the one-backend path (no executor)
    single = call(db, 1, "grouped")                    # executor, one worker
    gap = call(db, 4, "grouped", '{"block_rows": 256}')
    for r in (single, gap):
        assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s", [r]).fetchone() == ("done", 5)
    assert_same(models(db, gap), models(db, single))
    assert_same(models(db, gap), models(db, one))
    # the big group was split across both workers, and the executed schedule keeps the invariants
    log = schedule(db, gap)
    assert max(e["shard"] for e in log) >= 1
    sizes = dict(db.execute("SELECT group_key::text, (fit).n_train FROM groupml.models WHERE run_id = %s",
                            [gap]).fetchall())
    assert schedule_violations(log, sizes, {}) == []
    trials = db.execute("SELECT count(*) FROM groupml.trials WHERE run_id = %s", [gap]).fetchone()[0]
    assert trials == 20
    epochs = db.execute("SELECT count(*) FROM groupml.run_epochs WHERE run_id = %s", [gap]).fetchone()[0]
    assert epochs > 0
    # the snapshot went with the run
    assert db.execute("SELECT count(*) FROM groupml.snapshot_blocks").fetchone()[0] == 0


@pytest.mark.parametrize("strategy", ["gtp", "mtp", "dp"])
def test_every_strategy_trains_the_same_models(db, clicks, strategy):
    base = call(db, 1, "grouped")
    other = call(db, 2, strategy)
    assert db.execute("SELECT strategy FROM groupml.grouped_runs WHERE run_id = %s", [other]).fetchone()[0] == strategy
    # dp adds each shard's rows in blocks of their own: the logistic passes run in float32
    # (docs/learners.md), whose sums then differ by float32 rounding, so its fits agree to 1e-5;
    # gtp and mtp add the same blocks as one backend
    assert_same(models(db, other), models(db, base), tol=1e-5 if strategy == "dp" else 1e-6)
    log = schedule(db, other)
    sizes = dict(db.execute("SELECT group_key::text, (fit).n_train FROM groupml.models WHERE run_id = %s",
                            [other]).fetchall())
    modes = {k: "configs" for k in sizes} if strategy == "mtp" else {}
    assert schedule_violations(log, sizes, modes) == []
    workers = {e["worker"] for e in log}
    assert workers == {0, 1}


def test_unsplit_glm_groups_run_whole_or_pass_by_pass_with_the_same_result(db, clicks):
    # default: a group the placement keeps whole is one 'fit' task on its worker (the whole
    # search there); whole_group_tasks => false: one 'pass' task per data pass
    whole = call(db, 2, "gtp")
    passes = call(db, 2, "gtp", '{"whole_group_tasks": false}')
    assert_same(models(db, whole), models(db, passes))
    kinds = "SELECT kind, count(*) FROM groupml.run_schedule WHERE run_id = %s GROUP BY kind"
    assert dict(db.execute(kinds, [whole]).fetchall()) == {"fit": 5}
    # pass by pass, a group's column moments (standardization) are one 'stats' task per shard first
    assert set(dict(db.execute(kinds, [passes]).fetchall())) == {"pass", "stats"}
    for r in (whole, passes):
        log = schedule(db, r)
        sizes = dict(db.execute("SELECT group_key::text, (fit).n_train FROM groupml.models WHERE run_id = %s",
                                [r]).fetchall())
        assert schedule_violations(log, sizes, {}) == []
        assert {e["worker"] for e in log} == {0, 1}
    # the same searches: every trial's params, status and per-epoch losses, and the epoch reports
    trials = ("SELECT group_key::text, trial_id, params, status, epoch_scores FROM groupml.trials "
              "WHERE run_id = %s ORDER BY 1, 2")
    ta, tb = db.execute(trials, [whole]).fetchall(), db.execute(trials, [passes]).fetchall()
    assert [r[:4] for r in ta] == [r[:4] for r in tb] and len(ta) == 20
    for a, b in zip(ta, tb):
        np.testing.assert_allclose(a[4], b[4], atol=1e-6, rtol=0)
    epochs = ("SELECT group_key::text, block, trial_id, epoch, decision FROM groupml.run_epochs WHERE run_id = %s "
              "ORDER BY 1, 2, 3")
    assert db.execute(epochs, [whole]).fetchall() == db.execute(epochs, [passes]).fetchall()
    # a group whose planned work (rows x (features + 1) x configs x iterations) is above
    # whole_group_max_work keeps a task per pass, and its epoch checkpoints; the others are one task
    mixed = call(db, 2, "gtp", '{"whole_group_max_work": 1e6}')
    assert_same(models(db, mixed), models(db, whole))
    by_group = dict(db.execute("SELECT group_key->>'country', array_agg(DISTINCT kind) FROM groupml.run_schedule "
                               "WHERE run_id = %s GROUP BY 1", [mixed]).fetchall())
    assert by_group["SB"] == ["pass", "stats"] and by_group["IF"] == ["fit"], by_group
    # the plan prices the groups the same way and says so
    n_pass = sum(1 for v in by_group.values() if v == ["pass", "stats"])
    expl = db.execute(f"SELECT explanation FROM groupml.explain_train_groups('clicks', ARRAY['country'], {FEATS}, "
                      f"'clicked', 'logistic', %s::jsonb, '{{\"whole_group_max_work\": 1e6}}', 2, 'gtp') "
                      f"WHERE chosen LIMIT 1", [GRID]).fetchone()[0]
    assert f"except {n_pass} above whole_group_max_work, which run a task per pass" in expl, expl


def _snapshot_of(db, run_id):
    sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0]
    groups = db.execute("SELECT group_no, group_key, n_train, n_val, n_pos, n_skipped, n_blocks, train_rows FROM "
                        "groupml.snapshot_groups WHERE snapshot_id = %s ORDER BY group_no", [sid]).fetchall()
    blocks = db.execute("SELECT group_no, block_no, n_rows, n_val, md5(data) FROM groupml.snapshot_blocks "
                        "WHERE snapshot_id = %s ORDER BY group_no, block_no", [sid]).fetchall()
    head = db.execute("SELECT n_rows, n_groups, status FROM groupml.snapshots WHERE snapshot_id = %s",
                      [sid]).fetchone()
    return head, groups, blocks


def test_parallel_snapshot_equals_the_serial_one(db, clicks):
    # two group-by columns: the text country and a numeric tier whose values 1.0 and 1.00 are
    # one group (hash_record agrees with GROUP BY's equality), plus rows with a NULL tier
    db.execute("ALTER TABLE clicks ADD COLUMN tier numeric")
    db.execute("UPDATE clicks SET tier = CASE WHEN id % 3 = 0 THEN 1.0 WHEN id % 3 = 1 THEN 1.00 END")
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))

    def run(workers):
        return db.execute(f"CALL groupml.train_groups('clicks', ARRAY['country', 'tier'], {FEATS}, 'clicked', "
                          f"'logistic', %s::jsonb, '{{\"keep_snapshot\": true, \"block_rows\": 300}}'::jsonb, "
                          f"NULL, workers => {workers}, strategy => 'grouped')", [GRID]).fetchone()[0]

    serial, parallel = run(1), run(2)
    assert any("built in" in n and "by " not in n.split("built")[1] for n in notices), notices
    assert any("built by 2 workers in" in n for n in notices), notices
    a, b = _snapshot_of(db, serial), _snapshot_of(db, parallel)
    assert a == b
    assert a[0] == (6000, 10, "ready") and len(a[2]) > 10
    assert {g[1]["tier"] for g in a[1]} == {1, None}
    scores = ("SELECT group_key->>'country', (group_key->>'tier')::numeric, (fit).params, (fit).score FROM "
              "groupml.models WHERE run_id = %s ORDER BY 1, 2 NULLS FIRST")
    ma, mb = db.execute(scores, [serial]).fetchall(), db.execute(scores, [parallel]).fetchall()
    assert len(ma) == 10 and [r[:3] for r in ma] == [r[:3] for r in mb]
    assert [r[3] for r in ma] == pytest.approx([r[3] for r in mb], abs=1e-9)


def test_a_failed_snapshot_part_fails_the_run_and_keeps_no_snapshot(db, clicks):
    # the view errors on one group's rows; the count query does not read that column, the
    # worker packing that group does
    db.execute("CREATE VIEW broken AS SELECT country, f1 / CASE WHEN country = 'FI' THEN 0 ELSE 1 END AS f1, f2, "
               "f3, clicked FROM clicks")
    got = sql_error(db, f"CALL groupml.train_groups('broken', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                        f"workers => 2, strategy => 'grouped')")
    # a data error: its own SQLSTATE (it was XX000 with a hint to resume, which fails the same way)
    assert got[0] == "22012", got
    assert re.fullmatch(r"groupml: worker \d \('loopback-\d', backend pid \d+\): train_groups could not read the "
                        r"rows of public\.broken: division by zero", got[1]), got
    assert got[2] == "Fix the source (or pass a view that selects valid rows), then call train_groups again.", got
    assert db.execute("SELECT status, finished_at IS NOT NULL FROM groupml.runs").fetchall() == [("failed", True)]
    for t in ("snapshots", "snapshot_groups", "snapshot_blocks"):
        assert db.execute(f"SELECT count(*) FROM groupml.{t}").fetchone()[0] == 0, t


def test_a_cancelled_parallel_build_is_rebuilt_on_resume(dsn, db, clicks):
    # one group's rows are slow to read, so the cancel lands while the parts are being built
    db.execute("CREATE VIEW slow AS SELECT country, f1 + (SELECT 0 FROM pg_catalog.pg_sleep(CASE WHEN country = "
               "'FI' THEN 0.002 ELSE 0 END)) AS f1, f2, f3, clicked FROM clicks")
    stmt = (f"CALL groupml.train_groups('slow', ARRAY['country'], {FEATS}, 'clicked', 'logistic', %s::jsonb, "
            f"'{{}}'::jsonb, RUN, workers => 2, strategy => 'grouped')")
    with psycopg.connect(dsn, autocommit=True) as conn:
        thread, fired = cancel_when(dsn, conn.info.backend_pid,
                                    "SELECT EXISTS (SELECT 1 FROM groupml.snapshots WHERE status = 'building')")
        got = sql_error(conn, stmt.replace("RUN", "NULL"), [GRID])
        thread.join()
    assert fired.is_set() and got[0] == "57014", got
    run_id, status = db.execute("SELECT run_id, status FROM groupml.runs").fetchone()
    # the hint resumes it on worker backends (a plain run_id => N is refused for such a run)
    assert got[2] == f"Call train_groups again with run_id => {run_id}, workers => 2 to resume it.", got
    sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0]
    assert db.execute("SELECT status FROM groupml.snapshots WHERE snapshot_id = %s", [sid]).fetchone() == ("building",)
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    assert db.execute(stmt.replace("RUN", str(run_id)), [GRID]).fetchone()[0] == run_id
    assert any(f"snapshot {sid} was not finished; rebuilding it" in n for n in notices), notices
    assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone() == \
        ("done", 5)
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
    assert_same(models(db, run_id), models(db, call(db, 2, "grouped")))


def test_workers_read_the_callers_table_not_a_namesake_on_their_search_path(cluster, dbname, db):
    """Worker backends are new sessions with the default search_path. Were they to resolve the
    source by the bare name the caller's session printed, a view public.t of an ordinary role
    would stand in for the caller's s2.t -- and its functions would run as the (superuser) caller."""
    db.execute("CREATE ROLE mallory LOGIN")
    db.execute("GRANT CREATE ON SCHEMA public TO mallory")
    db.execute("CREATE SCHEMA s2")
    db.execute("CREATE TABLE s2.t AS SELECT i % 3 AS g, (i % 7)::float8 AS x1, ((i * 13) % 11)::float8 AS x2, "
               "(i % 7) > 3 AS y FROM generate_series(1, 3000) i")
    with psycopg.connect(cluster.dsn(dbname, user="mallory"), autocommit=True) as m:
        m.execute("CREATE TABLE public.ran_as (who name, super boolean)")
        m.execute("GRANT INSERT ON public.ran_as TO PUBLIC")
        m.execute("CREATE FUNCTION public.spy() RETURNS int LANGUAGE plpgsql AS $$ BEGIN "
                  "INSERT INTO public.ran_as SELECT current_user, rolsuper FROM pg_roles "
                  "WHERE rolname = current_user; RETURN 0; END $$")
        m.execute("CREATE VIEW public.t AS SELECT 7 + public.spy() AS g, 1.0::float8 AS x1, 2.0::float8 AS x2, "
                  "true AS y FROM generate_series(1, 3000)")
        m.execute("GRANT SELECT ON public.t TO PUBLIC")
    try:
        db.execute("SET search_path = s2, public")
        db.execute("CALL groupml.train_groups('t', ARRAY['g'], ARRAY['x1', 'x2'], 'y', 'logistic', workers => 2)")
        db.execute("RESET search_path")
        assert db.execute("SELECT count(*) FROM public.ran_as").fetchone()[0] == 0
        assert db.execute("SELECT source, status FROM groupml.runs").fetchall() == [("s2.t", "done")]
        assert sorted(r[0] for r in db.execute("SELECT group_key->>'g' FROM groupml.models")) == ["0", "1", "2"]
    finally:
        db.execute("RESET search_path")
        db.execute("DROP SCHEMA s2 CASCADE")
        db.execute("DROP OWNED BY mallory CASCADE")
        db.execute("DROP ROLE mallory")


def test_auto_and_explain(db, clicks):
    rows = db.execute(f"SELECT strategy, chosen, worker, estimated_seconds, shards, explanation FROM "
                      f"groupml.explain_train_groups('clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                      f"%s::jsonb, '{{\"keep_snapshot\": false}}', 4)", [GRID]).fetchall()
    chosen = [r for r in rows if r[1]]
    assert len(chosen) == 4 and len({r[0] for r in chosen}) == 1
    assert {r[0] for r in rows} == {"grouped", "gtp", "mtp", "dp"}
    assert "lowest estimate" in chosen[0][5]
    placed = [s for r in chosen for s in r[4]]
    assert placed
    run = call(db, 2, options='{"keep_snapshot": false}')
    strategy = db.execute("SELECT strategy FROM groupml.grouped_runs WHERE run_id = %s", [run]).fetchone()[0]
    assert strategy in ("grouped", "gtp", "mtp", "dp")
    prog = db.execute("SELECT status, groups_done, n_groups, workers FROM groupml.progress WHERE run_id = %s",
                      [run]).fetchone()
    assert prog == ("done", 5, 5, 2)


def test_kept_snapshot_is_reused(db, clicks):
    a = call(db, 2, "grouped", '{"keep_snapshot": true}')
    sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [a]).fetchone()[0]
    assert sid is not None
    n_blocks = db.execute("SELECT count(*) FROM groupml.snapshot_blocks WHERE snapshot_id = %s", [sid]).fetchone()[0]
    assert n_blocks >= 5
    b = call(db, 2, "gtp", json.dumps({"snapshot": sid}))
    assert db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [b]).fetchone()[0] == sid
    assert_same(models(db, a), models(db, b))
    assert db.execute("SELECT groupml.drop_snapshot(%s)", [sid]).fetchone()[0] is True
    assert db.execute("SELECT count(*) FROM groupml.snapshot_blocks").fetchone()[0] == 0


def test_a_run_deleted_while_it_trains_stops_its_call_cleanly(dsn, db, clicks):
    # the call stops with a clear error, not a raw ForeignKeyViolation at its next insert, and
    # leaves no snapshot behind
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn) as locker:
        pid = conn.info.backend_pid
        locker.execute("LOCK TABLE groupml.models IN SHARE MODE")     # the call waits at its first model
        out = {}

        def run():
            try:
                call(conn, 2, "grouped", spec=_slow_spec())
            except psycopg.Error as exc:
                out["error"] = (exc.sqlstate, exc.diag.message_primary, exc.diag.message_hint)
        thread = threading.Thread(target=run)
        thread.start()
        _wait_for_lock_wait(db, pid)
        run_id = db.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
        deleter = threading.Thread(target=lambda: db.execute("DELETE FROM groupml.runs WHERE run_id = %s", [run_id]))
        deleter.start()                                 # waits for the call's uncommitted rows
        deadline = time.time() + 60
        waiting = ("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                   "AND query LIKE 'DELETE FROM groupml.runs%'")
        with psycopg.connect(dsn, autocommit=True) as watcher:
            while not watcher.execute(waiting).fetchone()[0] and time.time() < deadline:
                time.sleep(0.02)
            assert watcher.execute(waiting).fetchone()[0] == 1
        locker.rollback()
        thread.join(120)
        deleter.join(120)
    assert out["error"][:2] == ("42704", f"groupml: Run {run_id} was deleted while it was being trained; this call "
                                         f"stops"), out
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0


def test_the_snapshot_of_a_deleted_run_is_dropped_by_the_next_run(db, clicks):
    # deleting a run while it trains took its grouped_runs row but left its (unkept) snapshot,
    # a full copy of the source no later call would drop
    a = call(db, 2, "grouped", '{"keep_snapshot": true}')
    sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [a]).fetchone()[0]
    db.execute("UPDATE groupml.snapshots SET keep = false WHERE snapshot_id = %s", [sid])   # as while training
    db.execute("DELETE FROM groupml.runs WHERE run_id = %s", [a])
    assert db.execute("SELECT count(*) FROM groupml.snapshot_blocks WHERE snapshot_id = %s", [sid]).fetchone()[0] > 0
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    b = call(db, 2, "grouped")
    assert (f"groupml: dropped snapshot {sid}: no run refers to it (its run was deleted, or its build stopped "
            "before the run recorded it)") in notices
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [b]).fetchone()[0] == "done"


def _waiting_on_a_lock(db, pid):
    return db.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]


def _wait_for_lock_wait(db, pid):
    deadline = time.time() + 60
    while not _waiting_on_a_lock(db, pid) and time.time() < deadline:
        time.sleep(0.02)
    assert _waiting_on_a_lock(db, pid)


def test_a_snapshot_in_use_by_a_training_call_is_not_dropped(dsn, db, clicks):
    """drop_snapshot refuses (55006, naming the run and the session) a snapshot that a call in
    another session is training from, and deletes nothing; once that call ends it drops it.
    A call taking a snapshot that is being dropped waits for the drop and then reports it
    gone instead of training from deleted blocks."""
    a = call(db, 2, "grouped", '{"keep_snapshot": true}')
    sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [a]).fetchone()[0]
    n_blocks = db.execute("SELECT count(*) FROM groupml.snapshot_blocks WHERE snapshot_id = %s", [sid]).fetchone()[0]
    stmt = (f"CALL groupml.train_groups('clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', %s::jsonb, "
            f"%s::jsonb, workers => 2, strategy => 'gtp')")
    with psycopg.connect(dsn, autocommit=True) as first, psycopg.connect(dsn) as locker:
        pid = first.info.backend_pid
        locker.execute("LOCK TABLE groupml.models IN SHARE MODE")      # the call stops at its first model
        out = {}
        thread = threading.Thread(target=lambda: out.update(
            run=first.execute(stmt, [GRID, json.dumps({"snapshot": sid})]).fetchone()[0]))
        thread.start()
        _wait_for_lock_wait(db, pid)
        b = db.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
        state, msg, hint = sql_error(db, "SELECT groupml.drop_snapshot(%s)", [sid])
        assert (state, msg) == ("55006", f"groupml: Snapshot {sid} is in use by run {b}, which another session is "
                                         f"training (pid {pid}); a snapshot is dropped when no call uses it")
        assert hint == (f"Wait for that call to end, or stop it with SELECT pg_cancel_backend({pid}); then drop "
                        f"the snapshot again.")
        assert db.execute("SELECT count(*) FROM groupml.snapshot_blocks WHERE snapshot_id = %s",
                          [sid]).fetchone()[0] == n_blocks
        locker.rollback()
        thread.join(120)
        assert out["run"] == b
    assert_same(models(db, a), models(db, b))
    # a drop not yet committed: a call taking the snapshot waits for it, then finds it gone
    with psycopg.connect(dsn) as dropper, psycopg.connect(dsn, autocommit=True) as second:
        assert dropper.execute("SELECT groupml.drop_snapshot(%s)", [sid]).fetchone()[0] is True
        pid = second.info.backend_pid
        out = {}

        def run_second():
            try:
                second.execute(stmt, [GRID, json.dumps({"snapshot": sid})])
            except psycopg.Error as exc:
                out["error"] = (exc.sqlstate, exc.diag.message_primary)
        thread = threading.Thread(target=run_second)
        thread.start()
        _wait_for_lock_wait(db, pid)
        dropper.commit()
        thread.join(120)
    assert out["error"] == ("42704", f"groupml: The 'snapshot' option of train_groups must name an existing "
                                     f"snapshot; got {sid}")
    assert db.execute("SELECT count(*) FROM groupml.snapshot_blocks").fetchone()[0] == 0
    assert db.execute("SELECT groupml.drop_snapshot(%s)", [sid]).fetchone()[0] is False
    for bad in ("NULL", "0", "-3"):
        state, msg, hint = sql_error(db, f"SELECT groupml.drop_snapshot({bad})")
        assert state == "22023" and msg.startswith("groupml: The 'snapshot_id' value of drop_snapshot must be "), msg
        assert hint == "Pass a snapshot_id of groupml.snapshots."


def _slow_spec():
    return json.dumps({"l2": [10 ** -k for k in range(1, 7)], "max_iter": 400, "tol": 1e-300})


def test_resume_after_a_worker_is_terminated(cluster, dsn, db):
    data = grouped_classification(20000, 6, 6, seed=43, exponent=0.5)
    create_table(db, "big", data)
    feats = "ARRAY[" + ", ".join(f"'f{j + 1}'" for j in range(6)) + "]"
    stmt = (f"CALL groupml.train_groups('big', ARRAY['country'], {feats}, 'clicked', 'logistic', %s::jsonb, "
            f"'{{}}', NULL, workers => 2, strategy => 'grouped')")
    errors = []

    def killer():
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(600):
                done = conn.execute("SELECT coalesce(sum(groups_done), 0) FROM groupml.runs").fetchone()[0]
                pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name "
                                                   "LIKE 'groupml worker 1 run %'").fetchall()]
                if pids and done >= 1:
                    conn.execute("SELECT pg_terminate_backend(%s)", [pids[0]])
                    return
                time.sleep(0.05)
            errors.append("no worker to terminate")

    t = threading.Thread(target=killer)
    t.start()
    with psycopg.connect(dsn, autocommit=True) as conn:
        state, msg, hint = sql_error(conn, stmt.replace("%s", "'" + _slow_spec() + "'"))
    t.join()
    assert not errors
    assert msg.startswith("groupml: run ") and "worker 1" in msg and "groups are committed" in msg
    assert "run_id =>" in hint
    run_id, status, done, ended = db.execute("SELECT run_id, status, groups_done, finished_at IS NOT NULL "
                                             "FROM groupml.runs").fetchone()
    # a failed run has ended: finished_at is set, so progress.elapsed stops growing
    assert status == "failed" and 1 <= done < 6 and ended
    kept = dict(db.execute("SELECT group_key::text, model_id FROM groupml.models WHERE run_id = %s",
                           [run_id]).fetchall())
    again = db.execute(stmt.replace("NULL", str(run_id)), [_slow_spec()]).fetchone()[0]
    assert again == run_id
    after = dict(db.execute("SELECT group_key::text, model_id FROM groupml.models WHERE run_id = %s",
                            [run_id]).fetchall())
    assert len(after) == 6 and all(after[k] == v for k, v in kept.items())
    assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone() == ("done", 6)
    fresh = db.execute(stmt.replace("%s::jsonb", "%s::jsonb"), [_slow_spec()]).fetchone()[0]
    assert_same(models(db, run_id), models(db, fresh), tol=1e-6)


def test_resume_after_the_coordinator_is_cancelled(cluster, dsn, db):
    data = grouped_classification(20000, 6, 6, seed=44, exponent=0.5)
    create_table(db, "big", data)
    feats = "ARRAY[" + ", ".join(f"'f{j + 1}'" for j in range(6)) + "]"
    stmt = (f"CALL groupml.train_groups('big', ARRAY['country'], {feats}, 'clicked', 'logistic', %s::jsonb, "
            f"'{{}}', RUN, workers => 2, strategy => 'gtp')")
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        thread, fired = cancel_when(dsn, pid, "SELECT groups_done >= 1 FROM groupml.runs")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(stmt.replace("RUN", "NULL"), [_slow_spec()])
        thread.join()
        assert fired.is_set()
    time.sleep(0.5)
    left = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'groupml worker%'").fetchone()[0]
    assert left == 0
    run_id, done = db.execute("SELECT run_id, groups_done FROM groupml.runs").fetchone()
    assert done < 6
    again = db.execute(stmt.replace("RUN", str(run_id)), [_slow_spec()]).fetchone()[0]
    assert again == run_id
    assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone() == ("done", 6)


def test_worker_tasks_end_soon_after_their_coordinator_is_terminated(cluster, dsn, db):
    # a terminated coordinator never closes its pool: without a check its workers would run
    # their current task to the end (a whole group's search: here about half a minute); with
    # client_connection_check_interval they notice the closed connection within a second or so
    data = grouped_classification(3000, 2, 4, seed=45, exponent=0.0)
    create_table(db, "mlpdata", data)
    stmt = ("CALL groupml.train_groups('mlpdata', ARRAY['country'], ARRAY['f1', 'f2', 'f3', 'f4'], 'clicked', 'mlp', "
            "'{\"epochs\": [300], \"batch_size\": [8]}', workers => 2, strategy => 'gtp')")
    busy = ("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'groupml worker%' AND state = 'active' "
            "AND clock_timestamp() - query_start > interval '1 second' AND query LIKE '%_gap_task%'")
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        done = threading.Event()

        def terminate():
            deadline = time.time() + 120
            while db.execute(busy).fetchone()[0] < 2 and time.time() < deadline:
                time.sleep(0.05)
            with psycopg.connect(dsn, autocommit=True) as killer:
                killer.execute("SELECT pg_terminate_backend(%s)", [pid])
            done.set()
        thread = threading.Thread(target=terminate)
        thread.start()
        with pytest.raises(psycopg.OperationalError):
            conn.execute(stmt)
        thread.join()
    assert done.is_set()
    deadline = time.time() + 10
    left = "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'groupml worker%'"
    while db.execute(left).fetchone()[0] and time.time() < deadline:
        time.sleep(0.1)
    assert db.execute(left).fetchone()[0] == 0


def test_bad_input_writes_nothing(cluster, dbname, db, clicks):
    db.execute("CREATE TABLE words (country text, f1 text, clicked boolean)")
    cases = [
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'nope'], 'clicked', 'logistic', "
         "workers => 2)", "42703", "groupml: Column 'nope' of train_groups features does not exist in public.clicks"),
        ("CALL groupml.train_groups('words', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', '{}', "
         "'{\"transform\": false}', workers => 2)",
         "42804", "groupml: Column 'f1' of train_groups features must be numeric or boolean; it is text"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'missing', 'logistic', workers => 2)",
         "42703", "groupml: Column 'missing' of train_groups label does not exist in public.clicks"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], NULL, 'logistic', workers => 2)",
         "22023", "groupml: The 'label' value of train_groups must be a column name; got null"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', workers => -1)",
         "22023", "groupml: The 'workers' value of train_groups must be >= 0; got -1"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', workers => 2, "
         "strategy => 'magic')", "22023", "groupml: The 'strategy' value of train_groups must be one of"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', "
         "'{\"solver\": [\"sgd\"]}', workers => 2)", "0A000", "groupml: solver 'sgd' needs"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', '{}', "
         "'{\"worker_memory_mb\": -1}', workers => 2)", "22023",
         "groupml: The 'worker_memory_mb' value of train_groups options must be >= 0; got -1"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', '{}', "
         "'{\"whole_group_tasks\": \"yes\"}', workers => 2)", "22023",
         "groupml: The 'whole_group_tasks' value of train_groups options must be"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', '{}', "
         "'{\"whole_group_max_work\": -1}', workers => 2)", "22023",
         "groupml: The 'whole_group_max_work' value of train_groups options must be >= 0; got -1"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', '{}', "
         "'{\"worker_memory_mb\": 1e308}', workers => 2)", "22023",
         "groupml: The 'worker_memory_mb' value of train_groups options must be <= 16777216"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', '{}', "
         "'{\"block_rows\": 1e308}', workers => 2)", "22023",
         "groupml: The 'block_rows' value of train_groups options must be <= 1048576"),
        ("CALL groupml.train_groups(NULL, ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', workers => 2)",
         "22023", "groupml: The 'source' value of train_groups must name a table or view; got null"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', NULL, workers => 2)",
         "22023", "groupml: The 'model' value must name a model family; got null"),
    ]
    for stmt, state, msg in cases:
        got = sql_error(db, stmt)
        assert got[0] == state, (stmt, got)
        assert got[1].startswith(msg), (stmt, got)
        assert got[2], (stmt, got)
    db.execute("CREATE ROLE nobody_gx LOGIN")
    with psycopg.connect(dsn_for(cluster, dbname, "nobody_gx"), autocommit=True) as conn:
        got = sql_error(conn, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', "
                              "'logistic', workers => 2)")
        assert got[0] == "42501" and got[1].startswith("groupml: permission denied for table groupml.runs")
    db.execute("GRANT ALL ON ALL TABLES IN SCHEMA groupml TO nobody_gx")     # past the catalog check
    db.execute("GRANT USAGE ON ALL SEQUENCES IN SCHEMA groupml TO nobody_gx")
    with psycopg.connect(dsn_for(cluster, dbname, "nobody_gx"), autocommit=True) as conn:
        got = sql_error(conn, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', "
                              "'logistic', workers => 2)")
        assert got[0] == "42501" and got[1].startswith("groupml: permission denied for table public.clicks")
    with psycopg.connect(dsn_for(cluster, dbname, None), autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE tmp_clicks AS SELECT * FROM clicks")
        got = sql_error(conn, "CALL groupml.train_groups('tmp_clicks', ARRAY['country'], ARRAY['f1'], 'clicked', "
                              "'logistic', workers => 2)")
        assert got[0] == "55000", got
        assert "cannot see a temporary table" in got[1] and "commit" in got[2]
        # the plan is refused exactly when the run would be
        plan = sql_error(conn, "SELECT * FROM groupml.explain_train_groups('tmp_clicks', ARRAY['country'], "
                               "ARRAY['f1'], 'clicked', 'logistic', workers => 2)")
        assert plan == got, (plan, got)
        assert conn.execute("SELECT count(*) FROM groupml.explain_train_groups('tmp_clicks', ARRAY['country'], "
                            "ARRAY['f1'], 'clicked', 'logistic', workers => 1)").fetchone()[0] >= 1
    sgd = ("groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', "
           "'{\"solver\": [\"sgd\"]}', workers => 2)")
    run_err = sql_error(db, "CALL " + sgd)
    plan_err = sql_error(db, "SELECT * FROM " + sgd.replace("train_groups", "explain_train_groups"))
    assert run_err[0] == "0A000" and plan_err == run_err, (plan_err, run_err)
    for t in ("runs", "models", "trials", "snapshots", "snapshot_blocks", "grouped_runs"):
        assert db.execute(f"SELECT count(*) FROM groupml.{t}").fetchone()[0] == 0, t


def test_internal_worker_functions_refuse_hand_made_requests(db):
    """_gap_partial / _gap_task are SQL-callable; a hand-made request gets a 22023 naming
    what is wrong, never a Python traceback (38000), and the backend keeps working."""
    theta = "'\\x" + "00" * 8 * 3 + "'::bytea"
    ok = ('{"snapshot": 1, "group_no": 0, "pieces": [[0, 0, 5]], "d": 2, "k": 1, '
          '"family": "logistic", "params": [{}]}')
    bad_pieces = ok.replace("[[0, 0, 5]]", "[[0, -1]]")
    bad_params = ok.replace("[{}]", "{}")
    cases = [
        ("SELECT groupml._gap_partial('[]', ''::bytea)", "must be a JSON object"),
        ("SELECT groupml._gap_partial('{}', ''::bytea)", "lacks 'd'"),
        ("SELECT groupml._gap_partial('{\"d\": \"x\", \"k\": 1}', ''::bytea)",
         "The 'd' value of the request of _gap_partial must be an integer"),
        ("SELECT groupml._gap_partial('{\"d\": 2, \"k\": 0}', ''::bytea)", "must be >= 1; got 0"),
        (f"SELECT groupml._gap_partial('{bad_pieces}', {theta})",
         "The 'pieces' value of the request of _gap_partial must be a list of [block_no, skip, take]"),
        (f"SELECT groupml._gap_partial('{bad_params}', {theta})",
         "The 'params' value of the request of _gap_partial must be a list of k = 1 objects"),
        (f"SELECT groupml._gap_partial('{ok}', ''::bytea)", "must hold (d + 1) * k = 3 float8 values; got 0 bytes"),
        ("SELECT groupml._gap_task('\"x\"', NULL)", "must be a JSON object"),
        ("SELECT groupml._gap_task('{\"op\": \"boom\"}', NULL)", "The 'op' value of _gap_task must be one of"),
        ("SELECT groupml._gap_task('{\"op\": \"mlp_stats\"}', NULL)", "lacks 'd'"),
        ("SELECT groupml._gap_task('{\"op\": \"mlp_visit\", \"d\": 2, \"snapshot\": 1, \"group_no\": 0, "
         "\"pieces\": [], \"epoch\": -3}', NULL)", "The 'epoch' value of the request of _gap_task must be >= 0"),
    ]
    for stmt, msg in cases:
        got = sql_error(db, stmt)
        assert got[0] == "22023", (stmt, got)
        assert msg in got[1], (stmt, got)
        assert "internal to train_groups" in got[2], (stmt, got)
    assert db.execute("SELECT 1").fetchone()[0] == 1


def test_internal_worker_functions_need_the_snapshot_rights(cluster, dbname, db):
    """A role without the catalog rights cannot use the worker side of train_groups: not even
    the op that reads nothing (lgbm_ports bound up to 1024 ports for any caller), nor a shard
    an earlier call of the same backend left cached."""
    db.execute("CREATE ROLE nobody_gt LOGIN")
    ports = "SELECT groupml._gap_task('{\"op\": \"lgbm_ports\", \"n\": 3}', NULL)"
    assert len(json.loads(bytes(db.execute(ports).fetchone()[0]))) == 3       # the owner may
    with psycopg.connect(dsn_for(cluster, dbname, "nobody_gt"), autocommit=True) as conn:
        for stmt, fn in [(ports, "_gap_task"), ("SELECT groupml._gap_partial('{}', ''::bytea)", "_gap_partial")]:
            got = sql_error(conn, stmt)
            assert got[0] == "42501", (stmt, got)
            assert got[1] == (f"groupml: permission denied for table groupml.snapshot_blocks: {fn} needs SELECT "
                              "on it (it is the worker side of train_groups and reads its training snapshots)"), got
            assert got[2] == ("Run it as the extension's owner, or have an administrator grant the calling role what "
                              "it needs: GRANT SELECT ON groupml.snapshot_blocks TO nobody_gt;"), got


def dsn_for(cluster, dbname, user):
    return cluster.dsn(dbname, user) if user else cluster.dsn(dbname)


def test_worker_endpoints_are_checked_before_the_run_and_must_reach_this_database(cluster, dbname, db, clicks):
    # an endpoint on another database that has groupml read *its* snapshot of the same id and
    # trained a 'done' run on the wrong rows; endpoint problems came as XX000 after the run row
    # existed, and all-disabled endpoints fell back to loopback silently
    other = f"{dbname}_other"
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {other} TEMPLATE {TEMPLATE}")
    try:
        db.execute("INSERT INTO groupml.worker_endpoints (name, dsn, enabled) VALUES ('a', 'loopback', true), "
                   "('b', %s, true)", [cluster.dsn(other) + " password=s3cret"])
        stmt = ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2'], 'clicked', 'logistic', "
                "workers => {}, strategy => 'grouped')")
        state, msg, hint = sql_error(db, stmt.format(2))
        assert state == "08001", (state, msg)
        assert f"connects to database '{other}'; workers must connect to this server's database '{dbname}'" in msg
        assert "Worker endpoint 'b' (" in msg and "password=***" in msg and "s3cret" not in msg + hint
        assert hint.startswith("Workers read this database's snapshot tables: point the endpoint's DSN at this "
                               "server and database (or 'loopback'), or disable it."), hint
        assert db.execute("SELECT status FROM groupml.runs").fetchall() == [("failed",)]
        assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
        db.execute("UPDATE groupml.worker_endpoints SET enabled = false")
        state, msg, _ = sql_error(db, stmt.format(2))
        assert (state, msg) == ("55000", "groupml: groupml.worker_endpoints has 2 rows and none is enabled")
        db.execute("UPDATE groupml.worker_endpoints SET enabled = true WHERE name = 'a'")
        state, msg, _ = sql_error(db, stmt.format(2))
        assert (state, msg) == ("22023", "groupml: The 'workers' value of train_groups must be <= the 1 enabled rows "
                                         "of groupml.worker_endpoints; got 2")
        assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 1       # none written by these
        db.execute("DELETE FROM groupml.worker_endpoints WHERE name = 'b'")
        db.execute("INSERT INTO groupml.worker_endpoints (name, dsn, enabled) VALUES ('c', 'loopback', true)")
        db.execute(stmt.format(2))
        assert db.execute("SELECT status FROM groupml.runs ORDER BY run_id DESC LIMIT 1").fetchone()[0] == "done"
    finally:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {other} WITH (FORCE)")


def test_group_by_names_with_backslashes_or_internal_aliases_group_and_sort_alike(db):
    # with standard_conforming_strings off the group key's name literal lost its backslash
    # (models under {"hq": ..}, or a syntax error for a name ending in one) and the workers,
    # new sessions with it on, disagreed with the coordinator; a group-by column named like an
    # output alias (n_rows, gkey, n, b) was sorted by that alias, so the parallel snapshot's
    # group order differed from the serial one
    db.execute('CREATE TABLE odd AS SELECT i % 3 AS "h\\q", (i * 7) % 2 AS n_rows, (i % 5) % 2 AS n, '
               '(i % 7)::float8 AS x, (i % 7) > 3 AS y FROM generate_series(1, 1200) i')
    db.execute("SET standard_conforming_strings = off")
    orders = []
    for workers, strategy in ((1, "gtp"), (2, "gtp")):
        run_id = db.execute("CALL groupml.train_groups('odd', %s, ARRAY['x'], 'y', 'logistic', '{}', "
                            "'{\"keep_snapshot\": true}', NULL, %s, %s)",
                            [["h\\q", "n_rows", "n"], workers, strategy]).fetchone()[0]
        keys = [r[0] for r in db.execute("SELECT group_key FROM groupml.models WHERE run_id = %s ORDER BY 1::text",
                                         [run_id])]
        assert len(keys) == 12 and all(set(k) == {"h\\q", "n_rows", "n"} for k in keys), keys
        sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0]
        order = [tuple(k[c] for c in ("h\\q", "n_rows", "n")) for (k,) in db.execute(
            "SELECT group_key FROM groupml.snapshot_groups WHERE snapshot_id = %s ORDER BY group_no", [sid])]
        assert order == sorted(order), order                  # key order, not count order
        orders.append(order)
    assert orders[0] == orders[1]
    db.execute("RESET standard_conforming_strings")


def test_objects_another_role_puts_on_the_callers_search_path_never_run(cluster, dbname, db):
    """groupml's statements run in the caller's session: a one-argument unnest or an
    =(text[], text[]) that a role created in public matched more closely than pg_catalog's
    polymorphic ones and ran with a superuser caller's rights (it could ALTER ROLE itself
    SUPERUSER). They now run under search_path pg_catalog, pg_temp."""
    db.execute("CREATE ROLE shadow LOGIN")
    db.execute("GRANT CREATE ON SCHEMA public TO shadow")
    db.execute("CREATE SCHEMA s3")
    db.execute("CREATE TABLE s3.t AS SELECT i % 3 AS g, (i % 7)::float8 AS x1, ((i * 13) % 11)::float8 AS x2, "
               "(i % 7) > 3 AS y FROM generate_series(1, 1500) i")
    with psycopg.connect(cluster.dsn(dbname, user="shadow"), autocommit=True) as m:
        m.execute("CREATE TABLE public.ran_as (who name, what text)")
        m.execute("GRANT INSERT ON public.ran_as TO PUBLIC")
        m.execute("CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$ BEGIN "
                  "INSERT INTO public.ran_as VALUES (current_user, 'unnest'); "
                  "RETURN QUERY SELECT pg_catalog.unnest($1); END $$")
        m.execute("CREATE FUNCTION public.arr_eq(text[], text[]) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN "
                  "INSERT INTO public.ran_as VALUES (current_user, '='); "
                  "RETURN $1 OPERATOR(pg_catalog.=) $2; END $$")
        m.execute("CREATE OPERATOR public.= (LEFTARG = text[], RIGHTARG = text[], FUNCTION = public.arr_eq)")
    try:
        for workers in (1, 2):
            db.execute("CALL groupml.train_groups('s3.t', ARRAY['g'], ARRAY['x1', 'x2'], 'y', 'logistic', "
                       "workers => %s)", [workers])
            db.execute("SELECT count(*) FROM groupml.explain_train_groups('s3.t', ARRAY['g'], ARRAY['x1', 'x2'], "
                       "'y', 'logistic', workers => %s)", [workers])
        db.execute("SELECT count(*) FROM groupml.explain_search('s3.t', ARRAY['x1', 'x2'], 'y', 'logistic', '{}', "
                   "ARRAY['g'])")
        assert db.execute("SELECT who, what FROM public.ran_as").fetchall() == []
        assert db.execute("SHOW search_path").fetchone()[0] == '"$user", public'      # the caller's, unchanged
        assert [r[0] for r in db.execute("SELECT status FROM groupml.runs")] == ["done", "done"]
    finally:
        db.execute("DROP SCHEMA s3 CASCADE")
        db.execute("DROP OWNED BY shadow CASCADE")
        db.execute("DROP ROLE shadow")


def test_a_sources_own_functions_still_see_the_callers_search_path(db):
    # the source is the caller's, run with the caller's rights: its functions may name their
    # tables bare. With groupml's statements pinned to pg_catalog, pg_temp, reading it failed
    # ('relation "factor" does not exist'); the reads run on the caller's path again
    db.execute("CREATE SCHEMA onlypath")
    db.execute("CREATE TABLE onlypath.c3 AS SELECT i % 3 AS g, (i % 7)::float8 AS x1, (i % 7) > 3 AS y "
               "FROM generate_series(1, 900) i")
    db.execute("CREATE TABLE onlypath.factor AS SELECT 2.0::float8 AS k")
    db.execute("SET search_path = onlypath, public")
    try:
        db.execute("CREATE FUNCTION onlypath.scale(x float8) RETURNS float8 LANGUAGE sql STABLE "
                   "AS 'SELECT x * (SELECT k FROM factor)'")
        db.execute("CREATE VIEW onlypath.v3 AS SELECT g, scale(x1) AS x1, y FROM c3 WHERE scale(x1) < 100")
        for workers in (1, 2):
            run = db.execute("CALL groupml.train_groups('v3', ARRAY['g'], ARRAY['x1'], 'y', 'logistic', "
                             "workers => %s)", [workers]).fetchone()[0]
            assert db.execute("SELECT status, source FROM groupml.runs WHERE run_id = %s", [run]).fetchone() == \
                ("done", "onlypath.v3")
            assert db.execute("SELECT count(*) FROM groupml.explain_train_groups('v3', ARRAY['g'], ARRAY['x1'], 'y', "
                              "'logistic', workers => %s)", [workers]).fetchone()[0] >= 1
        rows = dict(db.execute("SELECT item, value FROM groupml.explain_search('v3', ARRAY['x1'], 'y', 'logistic', "
                               "'{}', ARRAY['g'])").fetchall())
        assert rows["groups"] == "3" and rows["rows"] == "900"
        assert db.execute("SHOW search_path").fetchone()[0] == "onlypath, public"
    finally:
        db.execute("RESET search_path")
        db.execute("DROP SCHEMA onlypath CASCADE")


def test_workers_run_as_the_calling_role_whatever_the_sessions_time_zone(cluster, dbname, db, clicks):
    # an endpoint whose user is another role (a superuser) ran the caller's views with that
    # role's rights; the identity check compared the start time as text, so a session with
    # another TimeZone or DateStyle was refused its own loopback workers
    db.execute("SET TimeZone = 'Asia/Tokyo'")
    db.execute("SET DateStyle = 'SQL, DMY'")
    run = db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', "
                     "workers => 2, strategy => 'grouped')").fetchone()[0]
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run]).fetchone()[0] == "done"
    db.execute("RESET TimeZone")
    db.execute("RESET DateStyle")
    db.execute("CREATE ROLE trainer LOGIN")
    try:
        db.execute("GRANT ALL ON ALL TABLES IN SCHEMA groupml TO trainer")
        db.execute("GRANT USAGE ON ALL SEQUENCES IN SCHEMA groupml TO trainer")
        db.execute("GRANT SELECT ON clicks TO trainer")
        db.execute("INSERT INTO groupml.worker_endpoints (name, dsn) VALUES ('a', 'loopback'), ('b', %s)",
                   [cluster.dsn(dbname)])                                     # user=postgres
        with psycopg.connect(cluster.dsn(dbname, user="trainer"), autocommit=True) as t:
            state, msg, hint = sql_error(t, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], "
                                            "'clicked', 'logistic', workers => 2, strategy => 'grouped')")
        assert state == "08001", (state, msg)
        assert "connects as role 'postgres'; workers must connect as the calling role 'trainer'" in msg
        assert hint.startswith("A worker runs the source's views and functions with its role's rights")
        # loopback workers as that ordinary role (reading unix_socket_directories needed
        # pg_read_all_settings: such a role could not use workers at all)
        db.execute("DELETE FROM groupml.worker_endpoints")
        with psycopg.connect(cluster.dsn(dbname, user="trainer"), autocommit=True) as t:
            run = t.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', "
                            "'logistic', workers => 2, strategy => 'grouped')").fetchone()[0]
        assert db.execute("SELECT status, created_by FROM groupml.runs WHERE run_id = %s",
                          [run]).fetchone() == ("done", "trainer")
    finally:
        db.execute("DELETE FROM groupml.worker_endpoints")
        db.execute("DROP OWNED BY trainer")
        db.execute("DROP ROLE trainer")


def test_passwords_are_redacted():
    from groupml.executor.pool import redact

    assert redact("host=x password=s3cret user=u") == "host=x password=*** user=u"
    assert redact("postgresql://u:s3cret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert "s3cret" not in redact("password='s3 cret' dbname=x")
    # libpq decodes %xx in a URI's parameter names too
    assert redact("postgresql://u@h:1/db?pass%77ord=S3cretC&sslmode=disable") == \
        "postgresql://u@h:1/db?pass%77ord=***&sslmode=disable"
    assert "S3cretC" not in redact("postgresql://u@h/db?%70assword=S3cretC")


def test_an_error_of_the_sources_view_keeps_its_sqlstate_and_hint(db, clicks):
    # a function of the source's view raises a program-limit error with a hint for one group.
    # Read by the coordinator it came back as PL/Python's 'spiexceptions.ProgramLimitExceeded:
    # too much Finland' without the hint; read by a worker, any error but a data error or a lock
    # timeout ended the run as XX000 'worker failed' whose hint only said to resume
    db.execute("""CREATE FUNCTION picky(c text, v float8) RETURNS float8 LANGUAGE plpgsql STABLE AS $$
                  BEGIN IF c = 'FI' THEN RAISE EXCEPTION 'too much Finland' USING ERRCODE = '54000',
                  HINT = 'Ask the view''s owner.', DETAIL = 'Finland is 40%.'; END IF; RETURN v; END $$""")
    db.execute("CREATE VIEW picky_clicks AS SELECT country, picky(country, f1) AS f1, f2, f3, clicked FROM clicks")
    call = (f"CALL groupml.train_groups('picky_clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
            f"workers => %s)")
    with pytest.raises(psycopg.Error) as info:
        db.execute(call % 1)
    assert info.value.diag.message_detail == "Finland is 40%."       # the detail is kept too
    state, msg, hint = sql_error(db, call % 1)
    assert (state, msg) == ("54000", "groupml: train_groups could not read the rows of public.picky_clicks: too "
                                     "much Finland")
    assert hint == "Ask the view's owner. Fix the source (or pass a view that selects valid rows), then call " \
                   "train_groups again."
    db.execute("CREATE VIEW picky_rows AS SELECT * FROM clicks WHERE picky(country, f1) IS NOT NULL")
    state, msg, hint = sql_error(db, f"SELECT * FROM groupml.explain_search('picky_rows', {FEATS}, 'clicked', "
                                     f"'logistic', '{{}}', ARRAY['country'])")
    assert (state, msg) == ("54000", "groupml: explain_search could not read the rows of public.picky_rows: too "
                                     "much Finland")
    assert hint.startswith("Ask the view's owner. Fix the source"), hint
    db.execute("DELETE FROM groupml.runs")
    state, msg, hint = sql_error(db, call % "2, strategy => 'grouped'")
    assert state == "54000", (state, msg)
    assert re.search(r"worker \d \('loopback-\d', backend pid \d+\): train_groups could not read the rows of "
                     r"public\.picky_clicks: too much Finland", msg), msg
    run_id = db.execute("SELECT run_id FROM groupml.runs").fetchone()[0]
    assert hint.startswith("Ask the view's owner. ") and f"run_id => {run_id}" in hint, hint
    assert db.execute("SELECT status, finished_at IS NOT NULL FROM groupml.runs").fetchall() == [("failed", True)]
    # once the cause is gone the same call resumes the run
    db.execute("CREATE OR REPLACE FUNCTION picky(c text, v float8) RETURNS float8 LANGUAGE sql STABLE AS 'SELECT v'")
    db.execute(f"CALL groupml.train_groups('picky_clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
               f"workers => 2, strategy => 'grouped', run_id => {run_id})")
    assert db.execute("SELECT status FROM groupml.runs").fetchall() == [("done",)]
