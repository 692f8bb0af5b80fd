"""Row-level security on the training catalog: two roles granted what train_groups' 42501 hint
names each see and change only their own runs and what belongs to them (models with their
bytes, trials, the executor's tables, checkpoints, snapshots, and the views over them); a
member of groupml_admin sees every run; a snapshot's groups and packed rows are readable only
by a role that may read its source's columns, during a run and after it."""

import re
import threading
import time

import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification
from pg_helpers import sql_error

pytestmark = pytest.mark.integration

GRID = '{"l2": [0.001, 0.1]}'
A, B, ADMIN = "rls_a", "rls_b", "rls_admin"
#: a run with workers that keeps its snapshot and commits an epoch block at a time (so it has
#: run_epochs and run_schedule rows)
WORKERS = ("'{\"l2\": [0.001, 0.1], \"max_iter\": 40, \"epoch_iters\": 10}', "
           "'{\"keep_snapshot\": true, \"whole_group_tasks\": false}', workers => 2")


def train(conn, source="clicks", args="'" + GRID + "'"):
    return conn.execute(f"CALL groupml.train_groups('{source}', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], "
                        f"'clicked', 'logistic', {args})").fetchone()[0]


def grant_what_the_hint_names(db, conn):
    """Run a train_groups with workers as ``conn``'s role, which has no catalog rights, and grant
    it exactly the statements of the 42501 hint."""
    state, _, hint = sql_error(conn, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], "
                                     "'clicked', 'logistic', workers => 2)")
    assert state == "42501", state
    grants = re.search(r"grant the calling role what it needs: (GRANT .*;)$", hint)
    assert grants, hint
    db.execute(grants.group(1))
    return grants.group(1)


@pytest.fixture
def clicks(db):
    data = grouped_classification(3000, 3, 3, seed=7, exponent=0.7)
    create_table(db, "clicks", data)
    return data


@pytest.fixture
def granted(cluster, dbname, db, clicks):
    """A role with SELECT on clicks and no catalog rights; its autocommit connection."""
    db.execute("CREATE ROLE rls_granted LOGIN")
    db.execute("GRANT SELECT ON clicks TO rls_granted")
    try:
        with psycopg.connect(cluster.dsn(dbname, user="rls_granted"), autocommit=True) as conn:
            yield conn
    finally:
        db.execute("DROP OWNED BY rls_granted")
        db.execute("DROP ROLE rls_granted")


def test_the_hint_grants_no_more_than_the_call_uses(db, granted):
    # every sequence of the schema (the snapshots' to a role training in its backend, the
    # tenancy tables') went with the hint; the views read as the caller now, so the tables
    # they read are named
    state, _, hint = sql_error(granted, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], "
                                        "'clicked', 'logistic')")
    assert state == "42501"
    assert hint.endswith("GRANT SELECT, INSERT, UPDATE ON groupml.runs TO rls_granted; GRANT SELECT, INSERT ON "
                         "groupml.models TO rls_granted; GRANT INSERT ON groupml.trials TO rls_granted; GRANT INSERT "
                         "ON groupml.cost_runs TO rls_granted; GRANT USAGE ON SEQUENCE groupml.runs_run_id_seq, "
                         "groupml.models_model_id_seq, groupml.cost_runs_run_id_seq TO rls_granted; GRANT SELECT ON "
                         "groupml.trials, groupml.grouped_runs, groupml.best_models, groupml.progress, "
                         "groupml.run_trial_info TO rls_granted;"), hint
    grants = grant_what_the_hint_names(db, granted)
    assert "ALL SEQUENCES" not in grants and "ALL TABLES" not in grants, grants
    assert grants.endswith("GRANT USAGE ON SEQUENCE groupml.runs_run_id_seq, groupml.models_model_id_seq, "
                           "groupml.cost_runs_run_id_seq, groupml.snapshots_snapshot_id_seq TO rls_granted; GRANT "
                           "SELECT ON groupml.best_models, groupml.progress, groupml.run_trial_info TO rls_granted;")
    # they are enough: in its backend and with workers, it trains and reads its results
    one = train(granted)
    two = train(granted, args=WORKERS)
    for view in ("best_models", "run_trial_info"):
        assert granted.execute(f"SELECT count(*) FROM groupml.{view} WHERE run_id = %s", [one]).fetchone()[0] > 0
    assert [tuple(r) for r in granted.execute("SELECT run_id, status FROM groupml.progress ORDER BY 1")] == \
        [(one, "done"), (two, "done")]
    # a sequence's grant missing is named too (the run failed at its first insert)
    db.execute("REVOKE USAGE ON SEQUENCE groupml.models_model_id_seq FROM rls_granted")
    state, msg, hint = sql_error(granted, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], "
                                          "'clicked', 'logistic')")
    assert (state, msg) == ("42501", "groupml: permission denied for sequence groupml.models_model_id_seq: "
                                     "train_groups needs USAGE on it (it writes groupml's catalog)")
    assert "GRANT USAGE ON SEQUENCE groupml.models_model_id_seq TO rls_granted;" in hint, hint
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 2


@pytest.fixture
def roles(cluster, dbname, db, clicks):
    """{name: autocommit connection} of A and B (SELECT on clicks and the hint's grants) and of
    a member of groupml_admin with nothing else."""
    for r in (A, B, ADMIN):
        db.execute(f"CREATE ROLE {r} LOGIN")
    db.execute(f"GRANT groupml_admin TO {ADMIN}")
    conns = {}
    try:
        for r in (A, B, ADMIN):
            conns[r] = psycopg.connect(cluster.dsn(dbname, user=r), autocommit=True)
        for r in (A, B):
            db.execute(f"GRANT SELECT ON clicks TO {r}")
            grant_what_the_hint_names(db, conns[r])
        yield conns
    finally:
        for c in conns.values():
            c.close()
        for r in (A, B, ADMIN):
            db.execute(f"DROP OWNED BY {r}")
            db.execute(f"DROP ROLE {r}")


#: (relation, the column that names a run or snapshot, which) of every table and view that
#: holds a run's rows
PER_RUN = [("runs", "run_id"), ("models", "run_id"), ("trials", "run_id"), ("grouped_runs", "run_id"),
           ("run_epochs", "run_id"), ("run_schedule", "run_id"), ("run_checkpoints", "run_id"),
           ("best_models", "run_id"), ("progress", "run_id"), ("run_trial_info", "run_id")]
PER_SNAPSHOT = ["snapshots", "snapshot_groups", "snapshot_blocks"]


def counts(conn, run_id, snapshot_id):
    out = {t: conn.execute(f"SELECT count(*) FROM groupml.{t} WHERE {c} = %s", [run_id]).fetchone()[0]
           for t, c in PER_RUN}
    out.update({t: conn.execute(f"SELECT count(*) FROM groupml.{t} WHERE snapshot_id = %s",
                                [snapshot_id]).fetchone()[0] for t in PER_SNAPSHOT})
    return out


def add_checkpoint(db, run_id):
    """A checkpoint row of a run (a finished run has none left: they exist while groups train)."""
    db.execute("INSERT INTO groupml.run_checkpoints (run_id, group_key, block, passes, fingerprint, state) "
               "VALUES (%s, '{\"country\": \"x\"}', 1, 1, 'f', '\\x00')", [run_id])


def test_each_role_sees_and_changes_only_its_own_runs_and_the_admin_sees_all(db, roles):
    a_conn, b_conn, admin = roles[A], roles[B], roles[ADMIN]
    # A trains in its backend and with workers; B with workers, keeping its snapshot
    a_plain = train(a_conn)
    a_run = train(a_conn, args=WORKERS)
    b_run = train(b_conn, args=WORKERS)
    a_snap, b_snap = [db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [r]).fetchone()[0]
                      for r in (a_run, b_run)]
    for r in (a_run, b_run):
        add_checkpoint(db, r)
    assert [tuple(r) for r in db.execute("SELECT run_id, status, created_by FROM groupml.runs ORDER BY run_id")] == \
        [(a_plain, "done", A), (a_run, "done", A), (b_run, "done", B)]
    full = counts(db, b_run, b_snap)                       # as the superuser: everything
    assert all(n > 0 for n in full.values()), full
    a_full = counts(db, a_run, a_snap)

    # each role: its own rows, every one of them, and none of the other's
    assert counts(a_conn, a_run, a_snap) == a_full
    assert counts(b_conn, b_run, b_snap) == full
    assert set(counts(a_conn, b_run, b_snap).values()) == {0}
    assert set(counts(b_conn, a_run, a_snap).values()) == {0}
    assert a_conn.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s", [a_plain]).fetchone()[0] == 3
    assert [r[0] for r in a_conn.execute("SELECT DISTINCT run_id FROM groupml.models ORDER BY 1")] == [a_plain, a_run]
    assert a_conn.execute("SELECT count(fit) FROM groupml.models").fetchone()[0] == 6          # model bytes: its own
    assert [r[0] for r in b_conn.execute("SELECT run_id FROM groupml.progress")] == [b_run]
    assert b_conn.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 1

    # A cannot change B's rows: no row matches, and rows naming B's run are refused (even with
    # DELETE on runs, which the hint does not name)
    db.execute(f"GRANT DELETE ON groupml.runs TO {A}")
    for stmt in ("UPDATE groupml.runs SET status = 'failed' WHERE run_id = %s",
                 "DELETE FROM groupml.runs WHERE run_id = %s",
                 "DELETE FROM groupml.trials WHERE run_id = %s",
                 "UPDATE groupml.snapshots SET keep = false WHERE snapshot_id = (SELECT snapshot_id FROM "
                 "groupml.grouped_runs WHERE run_id = %s)"):
        assert a_conn.execute(stmt, [b_run]).rowcount == 0, stmt
    assert a_conn.execute("SELECT groupml.drop_snapshot(%s)", [b_snap]).fetchone()[0] is False
    state, msg, _ = sql_error(a_conn, "INSERT INTO groupml.trials (run_id, trial_id, params, status) "
                                      "VALUES (%s, 99, '{}', 'failed')", [b_run])
    assert (state, msg) == ("42501", 'new row violates row-level security policy for table "trials"')
    state, _, _ = sql_error(a_conn, "UPDATE groupml.runs SET created_by = %s WHERE run_id = %s", [B, a_run])
    assert state == "42501"                               # nor hand its own run to B
    assert counts(db, b_run, b_snap) == full
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [b_run]).fetchone()[0] == "done"

    # groupml_admin: every run's rows; the snapshots' rows only with SELECT on the source
    assert [r[0] for r in admin.execute("SELECT run_id FROM groupml.runs ORDER BY 1")] == [a_plain, a_run, b_run]
    assert admin.execute("SELECT count(fit) FROM groupml.models").fetchone()[0] == 9
    for run, snap, every in ((a_run, a_snap, a_full), (b_run, b_snap, full)):
        seen = counts(admin, run, snap)
        assert seen == dict(every, snapshot_groups=0, snapshot_blocks=0), seen
    db.execute(f"GRANT SELECT ON clicks TO {ADMIN}")
    assert counts(admin, b_run, b_snap) == full
    # and may change any run
    assert admin.execute("UPDATE groupml.runs SET status = 'failed' WHERE run_id = %s", [b_run]).rowcount == 1

    # a member of B's role sees B's rows
    db.execute(f"GRANT {B} TO {A}")
    assert counts(a_conn, b_run, b_snap) == full


def test_a_role_without_select_on_the_source_never_reads_a_snapshots_rows(dsn, db, roles):
    a_conn = roles[A]
    db.execute("CREATE TABLE secret AS SELECT * FROM clicks")
    # during a run: the superuser's call waits at its first model, its snapshot committed
    with psycopg.connect(dsn, autocommit=True) as owner, psycopg.connect(dsn) as locker:
        locker.execute("LOCK TABLE groupml.models IN SHARE MODE")
        out = {}
        thread = threading.Thread(target=lambda: out.update(run=train(owner, "secret", args=WORKERS)))
        thread.start()
        deadline = time.time() + 120
        while time.time() < deadline and not db.execute(
                "SELECT count(*) FROM groupml.snapshot_blocks b JOIN groupml.snapshots s USING (snapshot_id) "
                "WHERE s.status = 'ready' AND s.source = 'public.secret'").fetchone()[0]:
            time.sleep(0.05)
        snap = db.execute("SELECT snapshot_id FROM groupml.snapshots WHERE source = 'public.secret'").fetchone()[0]
        try:
            assert db.execute("SELECT count(*) FROM groupml.snapshot_blocks WHERE snapshot_id = %s",
                              [snap]).fetchone()[0] > 0
            assert a_conn.execute("SELECT data FROM groupml.snapshot_blocks WHERE snapshot_id = %s",
                                  [snap]).fetchall() == []
            assert a_conn.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
            assert a_conn.execute("SELECT count(*) FROM groupml.snapshot_groups").fetchone()[0] == 0
            assert a_conn.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0
        finally:
            locker.rollback()
            thread.join(120)
    run = out["run"]
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run]).fetchone()[0] == "done"
    # after it: the kept snapshot
    assert db.execute("SELECT keep FROM groupml.snapshots WHERE snapshot_id = %s", [snap]).fetchone()[0]
    assert a_conn.execute("SELECT data FROM groupml.snapshot_blocks WHERE snapshot_id = %s", [snap]).fetchall() == []
    assert a_conn.execute("SELECT count(*) FROM groupml.snapshot_groups").fetchone()[0] == 0
    # A's own snapshot of a table it may read only in part: its blocks go once a column's grant
    # does (a member of groupml_admin, or of the snapshot's role, is no different)
    db.execute(f"GRANT SELECT (country, f1, f2, f3, clicked) ON secret TO {A}")
    mine = train(a_conn, "secret", args=WORKERS)
    mine_snap = a_conn.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s",
                               [mine]).fetchone()[0]
    assert a_conn.execute("SELECT count(*) FROM groupml.snapshot_blocks WHERE snapshot_id = %s",
                          [mine_snap]).fetchone()[0] > 0
    db.execute(f"REVOKE SELECT (f3) ON secret FROM {A}")
    assert a_conn.execute("SELECT count(*) FROM groupml.snapshot_blocks").fetchone()[0] == 0
    assert a_conn.execute("SELECT count(*) FROM groupml.snapshot_groups").fetchone()[0] == 0
    assert a_conn.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 1     # its metadata stays
