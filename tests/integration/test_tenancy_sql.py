"""Multi-tenant model selection in SQL: tenants with real roles, jobs, the coordinator procedure,
resume after cancel, row-level security, failures, infer, pg_cron and bad input."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import psycopg
import pytest
from psycopg import sql

from groupml.datagen import create_table, grouped_classification
from groupml.learners import load_model
from pg_helpers import TEMPLATE, cron_runs, sql_error

pytestmark = pytest.mark.integration

CLS_CANDIDATES = json.dumps([
    {"model": "logistic", "search": {"l2": [0, 0.01, 0.1, 1.0]}},
    {"model": "svm", "search": {"l2": [0.01, 1.0]}},
])


def _connect(cluster, dbname, user):
    return psycopg.connect(cluster.dsn(dbname, user=user), autocommit=True)


def _make_table(db, name, n_rows=400, n_features=3, seed=0, regression=False):
    data = grouped_classification(n_rows=n_rows, n_groups=1, n_features=n_features, seed=seed,
                                  task="regression" if regression else "classification")
    create_table(db, name, data, group_col="grp", label_col="y", bool_label=not regression)


@pytest.fixture
def roles(cluster, db, dbname):
    """Three LOGIN roles unique to this test: tenants a and b, and an administrator."""
    names = {k: f"{k}_{dbname}" for k in ("ta", "tb", "adm")}
    for r in names.values():
        db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(r)))
    db.execute(sql.SQL("GRANT groupml_admin TO {}").format(sql.Identifier(names["adm"])))
    yield names
    with psycopg.connect(cluster.dsn(dbname), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE usename = ANY(%s) AND pid <> pg_backend_pid()", [list(names.values())])
        for r in names.values():
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(r)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(r)))


@pytest.fixture
def setup(cluster, db, dbname, roles):
    """Tenants a and b (each created by its own role) with one classification job each."""
    _make_table(db, "data_a", seed=1)
    _make_table(db, "data_b", seed=2)
    db.execute(sql.SQL("GRANT SELECT ON data_a TO {}").format(sql.Identifier(roles["ta"])))
    db.execute(sql.SQL("GRANT SELECT ON data_b TO {}").format(sql.Identifier(roles["tb"])))
    jobs = {}
    for t, table in (("ta", "data_a"), ("tb", "data_b")):
        with _connect(cluster, dbname, roles[t]) as conn:
            conn.execute("SELECT groupml.create_tenant(%s)", [t])
            jobs[t] = conn.execute("SELECT groupml.submit_job(%s, %s, ARRAY['f1','f2','f3'], 'y', %s)",
                                   [t, table, CLS_CANDIDATES]).fetchone()[0]
    return jobs


def _counts(db):
    return db.execute("SELECT (SELECT count(*) FROM groupml.observations), "
                      "(SELECT steps FROM groupml.scheduler_state), "
                      "(SELECT jsonb_array_length(state->'log') FROM groupml.scheduler_state), "
                      "(SELECT count(*) FROM groupml.candidates WHERE status <> 'pending')").fetchone()


def test_submit_run_and_infer(cluster, db, dbname, roles, setup):
    cands = db.execute("SELECT job_id, count(*), min(estimated_cost), max(estimated_cost) FROM groupml.candidates "
                       "GROUP BY job_id ORDER BY job_id").fetchall()
    assert [c[1] for c in cands] == [6, 6]
    # estimated cost = rows x (features + 1) x family factor x max_iter / 100
    assert cands[0][2] == pytest.approx(400 * 4 * 1.0)
    keys = {r[0] for r in db.execute("SELECT key FROM groupml.candidates")}
    assert 'logistic:{"l2":0.01}' in keys and 'svm:{"l2":1.0}' in keys

    with _connect(cluster, dbname, roles["adm"]) as adm:  # a non-superuser coordinator
        adm.execute("CALL groupml.run_scheduler(max_steps => 3)")
        assert _counts(db) == (3, 3, 3, 3)
        adm.execute("CALL groupml.run_scheduler(max_steps => 2, policy => 'hybrid')")
        assert _counts(db) == (5, 5, 5, 5)
        adm.execute("CALL groupml.run_scheduler()")
    assert _counts(db) == (12, 12, 12, 12)
    steps = [r[0] for r in db.execute("SELECT step FROM groupml.scheduler_log ORDER BY step")]
    assert steps == list(range(1, 13))
    assert db.execute("SELECT count(*) FROM groupml.observations WHERE status = 'ok' AND quality > 0.5 "
                      "AND cost_seconds > 0 AND finished_at >= started_at").fetchone()[0] == 12
    # a further call finds nothing to do and writes nothing
    db.execute("CALL groupml.run_scheduler(max_steps => 5)")
    assert _counts(db) == (12, 12, 12, 12)

    for t in ("ta", "tb"):
        job = setup[t]
        best_q, best_obs = db.execute("SELECT best_quality, best_observation_id FROM groupml.jobs WHERE job_id = %s",
                                      [job]).fetchone()
        top = db.execute("SELECT max(quality) FROM groupml.observations WHERE job_id = %s", [job]).fetchone()[0]
        assert best_q == top
        model_bytes = db.execute("SELECT model FROM groupml.observations WHERE observation_id = %s",
                                 [best_obs]).fetchone()[0]
        model = load_model(bytes(model_bytes))
        rows = db.execute(sql.SQL("SELECT f1, f2, f3 FROM {} ORDER BY id LIMIT 25").format(
            sql.Identifier("data_a" if t == "ta" else "data_b"))).fetchall()
        expected = model.predict(np.array(rows, dtype=float)).astype(float).tolist()
        with _connect(cluster, dbname, roles[t]) as conn:
            got = [conn.execute("SELECT groupml.infer(%s, %s::float8[])", [job, list(r)]).fetchone()[0]
                   for r in rows]
        assert got == expected
        assert set(got) <= {0.0, 1.0}


def test_deleted_jobs_and_observations(cluster, db, dbname, roles, setup):
    # a deleted job's candidates are withdrawn without a failed "step" each (nothing against
    # max_steps or HYBRID's stall counter); rebuilding the state from observations does not train
    # again a candidate whose observation a tenant deleted; jobs.best_* never names a deleted
    # observation
    db.execute("CALL groupml.run_scheduler(max_steps => 3, policy => 'roundrobin')")
    with _connect(cluster, dbname, roles["tb"]) as b:
        b.execute("DELETE FROM groupml.jobs WHERE job_id = %s", [setup["tb"]])
    db.execute("CALL groupml.run_scheduler(max_steps => 2, policy => 'roundrobin')")
    a_obs = "SELECT count(*) FROM groupml.observations WHERE job_id = %s"
    assert db.execute(a_obs, [setup["ta"]]).fetchone()[0] == 2 + 2     # two real steps
    state = db.execute("SELECT steps, jsonb_array_length(state->'log'), state->'policy' FROM "
                       "groupml.scheduler_state").fetchone()
    assert state[0] == 5 and state[1] == 5, state
    db.execute("CALL groupml.run_scheduler(policy => 'roundrobin')")
    assert db.execute(a_obs, [setup["ta"]]).fetchone()[0] == 6
    # the tenant deletes its best observation; the next coordinator call repairs best_*
    with _connect(cluster, dbname, roles["ta"]) as a:
        gone = a.execute("DELETE FROM groupml.observations WHERE observation_id = (SELECT best_observation_id "
                         "FROM groupml.jobs WHERE job_id = %s) RETURNING candidate_id", [setup["ta"]]).fetchone()[0]
    left = db.execute("SELECT observation_id, quality FROM groupml.observations WHERE job_id = %s AND status = 'ok' "
                      "ORDER BY quality DESC, observation_id LIMIT 1", [setup["ta"]]).fetchone()
    db.execute("CALL groupml.run_scheduler(policy => 'roundrobin')")
    assert db.execute("SELECT best_observation_id, best_quality FROM groupml.jobs WHERE job_id = %s",
                      [setup["ta"]]).fetchone() == left
    # a state rebuilt from the tables keeps the deleted observation's candidate done
    db.execute("DELETE FROM groupml.scheduler_state")
    db.execute("CALL groupml.run_scheduler(policy => 'roundrobin')")
    assert db.execute(a_obs, [setup["ta"]]).fetchone()[0] == 5
    assert db.execute("SELECT status FROM groupml.candidates WHERE candidate_id = %s", [gone]).fetchone()[0] == "ok"


def test_estimated_costs_count_the_rows_trained(cluster, db, dbname, roles):
    # rows with a NULL are never trained, but counted in the estimate (15x for the same rows)
    _make_table(db, "full_rows", n_rows=400)
    db.execute("CREATE TABLE holey AS SELECT * FROM full_rows UNION ALL "
               "SELECT id + 100000, grp, NULL::float8, f2, f3, y FROM full_rows")
    db.execute(sql.SQL("GRANT SELECT ON full_rows, holey TO {}").format(sql.Identifier(roles["ta"])))
    with _connect(cluster, dbname, roles["ta"]) as a:
        a.execute("SELECT groupml.create_tenant('ta')")
        jobs = [a.execute("SELECT groupml.submit_job('ta', %s, ARRAY['f1','f2','f3'], 'y', '[\"logistic\"]')",
                          [t]).fetchone()[0] for t in ("full_rows", "holey")]
    got = db.execute("SELECT j.n_rows, c.estimated_cost FROM groupml.jobs j JOIN groupml.candidates c USING (job_id) "
                     "WHERE j.job_id = ANY(%s) ORDER BY j.job_id", [jobs]).fetchall()
    assert got == [(400, 400 * 4 * 1.0), (800, 400 * 4 * 1.0)]


def test_rls_isolation(cluster, db, dbname, roles, setup):
    db.execute("CALL groupml.run_scheduler()")
    ja, jb = setup["ta"], setup["tb"]
    with _connect(cluster, dbname, roles["ta"]) as a:
        assert [r[0] for r in a.execute("SELECT name FROM groupml.tenants")] == ["ta"]
        assert [r[0] for r in a.execute("SELECT job_id FROM groupml.jobs")] == [ja]
        assert {r[0] for r in a.execute("SELECT job_id FROM groupml.candidates")} == {ja}
        assert {r[0] for r in a.execute("SELECT job_id FROM groupml.observations")} == {ja}
        assert {r[0] for r in a.execute("SELECT tenant FROM groupml.scheduler_log")} == {"ta"}
        # deleting b's rows touches nothing
        assert a.execute("DELETE FROM groupml.observations WHERE job_id = %s", [jb]).rowcount == 0
        assert a.execute("DELETE FROM groupml.candidates WHERE job_id = %s", [jb]).rowcount == 0
        assert a.execute("DELETE FROM groupml.jobs WHERE job_id = %s", [jb]).rowcount == 0
        # keys and estimated costs steer everyone's scheduler: no tenant writes candidates or
        # rewrites a job, not even its own
        for stmt in ("UPDATE groupml.candidates SET estimated_cost = 1e-9 WHERE job_id = %s" % ja,
                     "UPDATE groupml.jobs SET label = 'f1' WHERE job_id = %s" % ja,
                     "INSERT INTO groupml.candidates (job_id, owner_role, key, family, params, estimated_cost) "
                     "VALUES (%s, '%s'::regrole, 'x', 'svm', '{}', 1)" % (ja, roles["ta"])):
            st, msg, _ = sql_error(a, stmt)
            assert st == "42501" and "permission denied for table" in msg, (stmt, msg)
        # a job row claimed for b's tenant is refused
        tb_id = db.execute("SELECT tenant_id FROM groupml.tenants WHERE name = 'tb'").fetchone()[0]
        st, msg, _ = sql_error(a, "INSERT INTO groupml.jobs (tenant_id, owner_role, source, features, label, task, "
                                  "metric, n_rows) VALUES (%s, %s::regrole, 'data_a', ARRAY['f1'], 'y', "
                                  "'classification', 'accuracy', 1)", [tb_id, roles["ta"]])
        assert st == "42501" and "row-level security" in msg
        # candidates are added by the submit_job call that creates the job: not to b's job, even
        # once b deleted its own, and a job id that does not exist gets the same answer
        b_cands = db.execute("SELECT count(*) FROM groupml.candidates WHERE job_id = %s", [jb]).fetchone()[0]
        for job in (jb, 987654):
            st, msg, hint = sql_error(a, "SELECT groupml._tenancy_add_candidates(%s, '[\"svm\"]', 0, ''::bytea)",
                                      [job])
            assert (st, msg) == ("42501", f"groupml: permission denied: job {job} was not inserted by this "
                                          f"transaction; a job's candidates are added by the submit_job call that "
                                          f"creates it")
            assert "groupml.submit_job" in hint
        assert db.execute("SELECT count(*) FROM groupml.candidates WHERE job_id = %s", [jb]).fetchone()[0] == b_cands
        # nor to its own job twice
        a.execute("BEGIN")
        st, msg, _ = sql_error(a, "SELECT groupml._tenancy_add_candidates(groupml.submit_job('ta', 'data_a', "
                                  "ARRAY['f1'], 'y', '[\"svm\"]'), '[\"logistic\"]', 0, ''::bytea)")
        assert st == "55000" and msg.endswith("already has candidates; a job's candidates are added once"), msg
        a.execute("ROLLBACK")
        # the rows the coordinator trains on are not readable by tenants
        st, _, _ = sql_error(a, "SELECT count(*) FROM groupml.job_data")
        assert st == "42501"
        # the coordinator's state and functions are not theirs
        st, _, _ = sql_error(a, "SELECT * FROM groupml.scheduler_state")
        assert st == "42501"
        st, msg, hint = sql_error(a, "CALL groupml.run_scheduler(max_steps => 1)")
        assert (st, msg) == ("42501", "groupml: permission denied: run_scheduler needs membership in groupml_admin")
        assert "GRANT groupml_admin" in hint
        st, msg, _ = sql_error(a, "SELECT groupml.infer(%s, ARRAY[1, 2, 3]::float8[])", [jb])
        assert (st, msg) == ("42704", f"groupml: Job {jb} does not exist (or belongs to a tenant you are not a member of)")
        st, msg, _ = sql_error(a, "SELECT groupml.submit_job('tb', 'data_b', ARRAY['f1'], 'y', '[\"svm\"]')")
        assert st == "42704" and msg.startswith("groupml: Tenant 'tb' does not exist")
        st, msg, _ = sql_error(a, "SELECT groupml.create_tenant('evil', %s)", [roles["tb"]])
        assert st == "42501" and "only for a member of that role" in msg
        assert a.execute("SELECT groupml.infer(%s, ARRAY[1, 2, 3]::float8[])", [ja]).fetchone()[0] in (0.0, 1.0)
    with _connect(cluster, dbname, roles["tb"]) as b:
        assert [r[0] for r in b.execute("SELECT job_id FROM groupml.jobs")] == [jb]
        assert b.execute("SELECT count(*) FROM groupml.observations").fetchone()[0] == 6
    with _connect(cluster, dbname, roles["adm"]) as adm:
        assert adm.execute("SELECT count(*) FROM groupml.jobs").fetchone()[0] == 2
        assert adm.execute("SELECT count(*) FROM groupml.scheduler_log").fetchone()[0] == 12
        assert adm.execute("SELECT steps FROM groupml.scheduler_state").fetchone()[0] == 12
        # an administrator may bind a tenant to any role
        adm.execute("SELECT groupml.create_tenant('tb2', %s)", [roles["tb"]])
    with _connect(cluster, dbname, roles["tb"]) as b:
        assert {r[0] for r in b.execute("SELECT name FROM groupml.tenants")} == {"tb", "tb2"}


def test_failing_candidate_recorded_and_others_continue(db, roles):
    _make_table(db, "reg", regression=True, seed=3)
    db.execute("SELECT groupml.create_tenant('r')")
    job = db.execute("SELECT groupml.submit_job('r', 'reg', ARRAY['f1','f2','f3'], 'y', %s)", [json.dumps([
        {"model": "linear", "search": {"l2": [0, 0.1]}},
        {"model": "linear", "params": {"solver": "gd", "lr": 1e300}},
        {"model": "linear", "params": {"l2": 10.0}},
    ])]).fetchone()[0]
    db.execute("CALL groupml.run_scheduler(policy => 'roundrobin')")
    rows = db.execute("SELECT candidate, status, quality, error FROM groupml.scheduler_log ORDER BY step").fetchall()
    assert len(rows) == 4
    failed = [r for r in rows if r[1] == "failed"]
    assert len(failed) == 1
    assert failed[0][0] == 'linear:{"lr":1e+300,"solver":"gd"}'
    assert failed[0][2] is None
    assert failed[0][3] == "failed: no configuration produced a finite validation score"
    assert all(r[2] is not None for r in rows if r[1] == "ok")
    assert db.execute("SELECT status, count(*) FROM groupml.candidates GROUP BY 1 ORDER BY 1").fetchall() == \
        [("failed", 1), ("ok", 3)]
    assert db.execute("SELECT metric FROM groupml.jobs WHERE job_id = %s", [job]).fetchone()[0] == "r2"
    v = db.execute("SELECT groupml.infer(%s, ARRAY[0.5, -1, 2]::float8[])", [job]).fetchone()[0]
    assert np.isfinite(v)
    # a job whose only candidate failed: infer's hint says so (it said to run the coordinator)
    bad = db.execute("SELECT groupml.submit_job('r', 'reg', ARRAY['f1','f2','f3'], 'y', %s)", [json.dumps([
        {"model": "linear", "params": {"solver": "gd", "lr": 1e300}}])]).fetchone()[0]
    db.execute("CALL groupml.run_scheduler(policy => 'roundrobin')")
    st, msg, hint = sql_error(db, "SELECT groupml.infer(%s, ARRAY[0.5, -1, 2]::float8[])", [bad])
    assert (st, msg) == ("55000", f"groupml: Job {bad} has no trained model yet")
    assert hint == (f"Every candidate trained so far failed (1); their errors are in groupml.scheduler_log "
                    f"(WHERE job_id = {bad}). It has no candidate left: submit a job with other candidates.")
    db.execute("DELETE FROM groupml.observations WHERE job_id = %s", [job])       # the tenant's right
    st, msg, hint = sql_error(db, "SELECT groupml.infer(%s, ARRAY[0.5, -1, 2]::float8[])", [job])
    assert (st, hint) == ("55000", "The observations of its 3 trained candidate(s) were deleted, with their models. "
                                   "It has no candidate left: submit a job with other candidates.")


def test_a_candidate_cancelled_every_time_is_given_up(db):
    # a statement_timeout shorter than a candidate's training cancelled its step on every call
    # (and every pg_cron tick) and tried the same candidate again, forever
    _make_table(db, "slowsrc", n_rows=20000, n_features=8, seed=4)
    db.execute("SELECT groupml.create_tenant('slow')")
    job = db.execute("SELECT groupml.submit_job('slow', 'slowsrc', ARRAY['f1','f2','f3','f4','f5','f6','f7','f8'], "
                     "'y', %s)", [json.dumps([{"model": "mlp", "params": {"epochs": 400, "layers": [64, 64]}},
                                              {"model": "logistic", "params": {"l2": 0.5}}])]).fetchone()[0]
    db.execute("SET statement_timeout = '700ms'")
    try:
        errors = []
        for _ in range(6):
            try:
                db.execute("CALL groupml.run_scheduler(policy => 'roundrobin')")
                break
            except psycopg.errors.QueryCanceled as exc:
                errors.append(exc.diag.message_primary)
    finally:
        db.execute("RESET statement_timeout")
    assert errors == ["groupml: canceling statement due to statement timeout"] * 3, errors
    rows = db.execute("SELECT c.family, c.status, c.attempts, o.error FROM groupml.candidates c LEFT JOIN "
                      "groupml.observations o USING (candidate_id) WHERE c.job_id = %s ORDER BY 1", [job]).fetchall()
    assert rows == [("logistic", "ok", 1, None),
                    ("mlp", "failed", 3, "its training was interrupted 3 times (a cancel, a statement_timeout or "
                                         "the end of its backend; statement_timeout is 700ms here); given up")], rows


def test_a_candidate_whose_backend_ends_every_time_is_given_up(cluster, db, dbname):
    # a candidate that takes its backend down (the OOM killer; here pg_terminate_backend) must
    # not be retried on every call and every pg_cron tick, for ever: its attempt is committed
    # before the training starts
    _make_table(db, "heavysrc", n_rows=20000, n_features=8, seed=5)
    db.execute("SELECT groupml.create_tenant('heavy')")
    job = db.execute("SELECT groupml.submit_job('heavy', 'heavysrc', ARRAY['f1','f2','f3','f4','f5','f6','f7','f8'], "
                     "'y', %s)", [json.dumps([{"model": "mlp", "params": {"epochs": 400, "layers": [64, 64]}}])]
                     ).fetchone()[0]
    attempts = "SELECT attempts FROM groupml.candidates WHERE job_id = %s"
    for i in range(1, 4):
        with psycopg.connect(cluster.dsn(dbname), autocommit=True) as victim:
            pid = victim.info.backend_pid
            outcome = []

            def call():
                try:
                    victim.execute("CALL groupml.run_scheduler()")
                    outcome.append("returned")
                except psycopg.Error as exc:
                    outcome.append(type(exc).__name__)

            thread = threading.Thread(target=call)
            thread.start()
            deadline = time.time() + 60
            while db.execute(attempts, [job]).fetchone()[0] < i and time.time() < deadline:
                time.sleep(0.02)
            time.sleep(0.2)                       # well inside its training (400 epochs)
            db.execute("SELECT pg_terminate_backend(%s)", [pid])
            thread.join()
        assert outcome and outcome[0] != "returned", outcome
        assert db.execute(attempts, [job]).fetchone()[0] == i
        assert db.execute("SELECT count(*) FROM groupml.observations WHERE job_id = %s", [job]).fetchone()[0] == 0
    db.execute("CALL groupml.run_scheduler()")
    assert db.execute("SELECT c.status, c.attempts, o.status, o.error FROM groupml.candidates c JOIN "
                      "groupml.observations o USING (candidate_id) WHERE c.job_id = %s", [job]).fetchone() == \
        ("failed", 3, "failed", "its training was interrupted 3 times (a cancel, a statement_timeout or the end of "
                                "its backend); given up")
    # the step lock went with each ended session: nothing waits on it
    assert db.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").fetchone()[0] == 0


def test_mlp_and_lightgbm_candidates(cluster, db, dbname, roles):
    """Candidates of every access pattern in one job: estimated costs in one unit, trained by the
    coordinator, and infer predicts with whichever family won."""
    _make_table(db, "mix", n_rows=600, n_features=3, seed=4)
    db.execute("SELECT groupml.create_tenant('m')")
    cands = [{"model": "logistic", "params": {"l2": 0.01}},
             {"model": "lightgbm", "search": {"num_boost_round": [20, 40], "num_leaves": [7]}},
             {"model": "mlp", "params": {"layers": [8], "epochs": 3, "batch_size": 32}},
             {"model": "mlp", "params": {"layers": [4, 3], "epochs": 2}}]
    job = db.execute("SELECT groupml.submit_job('m', 'mix', ARRAY['f1','f2','f3'], 'y', %s)",
                     [json.dumps(cands)]).fetchone()[0]
    est = dict(db.execute("SELECT key, estimated_cost FROM groupml.candidates WHERE job_id = %s", [job]).fetchall())
    assert est == pytest.approx({
        'logistic:{"l2":0.01}': 600 * 4 * 1.0 * 100 / 100,
        # LightGBM: 7 leaves count as 8 of 31
        'lightgbm:{"num_boost_round":20,"num_leaves":7}': 600 * 4 * 20 * 8 / 31 * 0.35,
        'lightgbm:{"num_boost_round":40,"num_leaves":7}': 600 * 4 * 40 * 8 / 31 * 0.35,
        # weights (3 + 1) x 8 + (8 + 1) x 1 = 41; 600 rows x 3 epochs x (41 x 0.013 + 4900 / 32)
        'mlp:{"batch_size":32,"epochs":3,"layers":[8]}': 600 * 3 * (41 * 0.013 + 4900 / 32),
        # (3 + 1) x 4 + (4 + 1) x 3 + (3 + 1) x 1 = 35 weights, default batch_size 64
        'mlp:{"epochs":2,"layers":[4,3]}': 600 * 2 * (35 * 0.013 + 4900 / 64)})
    db.execute("CALL groupml.run_scheduler(policy => 'hybrid')")
    rows = db.execute("SELECT candidate, status, quality, cost_seconds FROM groupml.scheduler_log "
                      "WHERE job_id = %s ORDER BY step", [job]).fetchall()
    assert sorted(r[0].split(":")[0] for r in rows) == ["lightgbm", "lightgbm", "logistic", "mlp", "mlp"]
    assert all(r[1] == "ok" and 0 < r[2] <= 1 and r[3] > 0 for r in rows), rows
    # a candidate is exactly its configuration: list-valued layers are not a grid over widths
    two = db.execute("SELECT o.model FROM groupml.observations o JOIN groupml.candidates c USING (candidate_id) "
                     "WHERE c.key = 'mlp:{\"epochs\":2,\"layers\":[4,3]}'").fetchone()[0]
    assert load_model(bytes(two)).params["layers"] == [4, 3]
    for family in ("lightgbm", "mlp"):   # infer with each family's model as the job's best
        obs, model_bytes = db.execute(
            "SELECT o.observation_id, o.model FROM groupml.observations o JOIN groupml.candidates c "
            "USING (candidate_id) WHERE o.job_id = %s AND c.family = %s ORDER BY o.quality DESC LIMIT 1",
            [job, family]).fetchone()
        db.execute("UPDATE groupml.jobs SET best_observation_id = %s WHERE job_id = %s", [obs, job])
        model = load_model(bytes(model_bytes))
        X = np.array(db.execute("SELECT f1, f2, f3 FROM mix ORDER BY id LIMIT 20").fetchall(), dtype=float)
        got = [db.execute("SELECT groupml.infer(%s, %s::float8[])", [job, list(x)]).fetchone()[0] for x in X]
        assert got == model.predict(X).astype(float).tolist()
        assert set(got) <= {0.0, 1.0}


def test_regression_job_with_tree_and_mlp_candidates(db):
    _make_table(db, "regmix", n_rows=500, regression=True, seed=6)
    db.execute("SELECT groupml.create_tenant('rm')")
    job = db.execute("SELECT groupml.submit_job('rm', 'regmix', ARRAY['f1','f2','f3'], 'y', %s)", [json.dumps([
        "linear", {"model": "lightgbm_regressor", "params": {"num_boost_round": 30, "num_leaves": 7}},
        {"model": "mlp_regressor", "params": {"layers": [8, 4], "epochs": 5}}])]).fetchone()[0]
    assert db.execute("SELECT task, metric FROM groupml.jobs WHERE job_id = %s", [job]).fetchone() == \
        ("regression", "r2")
    db.execute("CALL groupml.run_scheduler()")
    rows = db.execute("SELECT c.family, o.status, o.quality FROM groupml.observations o JOIN groupml.candidates c "
                      "USING (candidate_id) WHERE o.job_id = %s ORDER BY c.family", [job]).fetchall()
    assert [r[0] for r in rows] == ["lightgbm_regressor", "linear", "mlp_regressor"]
    assert all(r[1] == "ok" and r[2] <= 1 for r in rows), rows
    best = db.execute("SELECT o.model FROM groupml.jobs j JOIN groupml.observations o "
                      "ON o.observation_id = j.best_observation_id WHERE j.job_id = %s", [job]).fetchone()[0]
    x = [0.5, -1.0, 2.0]
    got = db.execute("SELECT groupml.infer(%s, %s::float8[])", [job, x]).fetchone()[0]
    assert got == pytest.approx(float(load_model(bytes(best)).predict(np.array([x]))[0]), rel=1e-12)


def _many_jobs(db, roles_needed=False):
    for i, t in enumerate(("p", "q", "r")):
        _make_table(db, f"d{t}", n_rows=3000, n_features=4, seed=10 + i)
        db.execute("SELECT groupml.create_tenant(%s)", [t])
        db.execute("SELECT groupml.submit_job(%s, %s, ARRAY['f1','f2','f3','f4'], 'y', %s)", [t, f"d{t}", json.dumps([
            {"model": "logistic", "search": {"l2": [0, 0.001, 0.01, 0.1, 1.0, 10.0]}},
            {"model": "svm", "search": {"l2": [0.01, 0.1, 1.0]}}])])


def _trace(conn):
    return conn.execute("SELECT step, job_id, candidate, status, quality FROM groupml.scheduler_log "
                        "ORDER BY step").fetchall()


def _reference_trace(cluster, db, dbname):
    """The trace of one uninterrupted run_scheduler over _many_jobs, in a database of its own."""
    other = f"{dbname}_ref"
    db.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(other), sql.Identifier(TEMPLATE)))
    try:
        with psycopg.connect(cluster.dsn(other), autocommit=True) as ref:
            _many_jobs(ref)
            ref.execute("CALL groupml.run_scheduler()")
            return _trace(ref)
    finally:
        db.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(other)))


def test_resume_after_cancel_matches_uninterrupted_run(cluster, db, dbname):
    _many_jobs(db)
    reference = _reference_trace(cluster, db, dbname)
    assert len(reference) == 27

    runner = psycopg.connect(cluster.dsn(dbname), autocommit=True)
    pid = runner.execute("SELECT pg_backend_pid()").fetchone()[0]
    outcome = {}

    def run():
        try:
            runner.execute("CALL groupml.run_scheduler()")
            outcome["error"] = None
        except psycopg.Error as exc:
            outcome["error"] = exc

    th = threading.Thread(target=run)
    th.start()
    deadline = time.time() + 120
    while db.execute("SELECT count(*) FROM groupml.observations").fetchone()[0] < 3 and time.time() < deadline:
        time.sleep(0.01)
    db.execute("SELECT pg_cancel_backend(%s)", [pid])
    th.join()
    runner.close()
    assert isinstance(outcome["error"], psycopg.errors.QueryCanceled)
    n_obs, steps, log_len, not_pending = _counts(db)
    assert 3 <= n_obs < 27
    assert n_obs == steps == log_len == not_pending

    db.execute("CALL groupml.run_scheduler()")
    assert _counts(db) == (27, 27, 27, 27)
    assert db.execute("SELECT count(DISTINCT candidate_id) FROM groupml.observations").fetchone()[0] == 27
    assert _trace(db) == reference


def test_two_coordinators_at_once_share_the_steps(cluster, db, dbname):
    # pg_cron firing while an administrator's CALL runs: the state row lock serializes the
    # steps, each coordinator decides from the state the other committed, nothing is trained
    # twice, and the decisions are those of one coordinator alone
    _many_jobs(db)
    reference = _reference_trace(cluster, db, dbname)
    steps_by = {0: [], 1: []}
    errors = []

    def run(i):
        try:
            with psycopg.connect(cluster.dsn(dbname), autocommit=True) as conn:
                conn.add_notice_handler(lambda d: steps_by[i].append(d.message_primary)
                                        if d.message_primary.startswith("groupml: step ") else None)
                conn.execute("CALL groupml.run_scheduler()")
        except Exception as exc:  # reported below
            errors.append(exc)

    # both coordinators start while a step is held -- on the first run, before the state row
    # exists -- so both are under way at once
    with psycopg.connect(cluster.dsn(dbname)) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [0x67726F75706D6C])
        threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
        for th in threads:
            th.start()
        deadline = time.time() + 60
        while time.time() < deadline and db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = %s",
                [dbname]).fetchone()[0] < 2:
            time.sleep(0.01)
        holder.commit()
    for th in threads:
        th.join()
    assert errors == []
    assert len(steps_by[0]) >= 1 and len(steps_by[1]) >= 1, steps_by
    assert len(steps_by[0]) + len(steps_by[1]) == 27
    assert _counts(db) == (27, 27, 27, 27)
    assert db.execute("SELECT count(DISTINCT candidate_id), min(step), max(step), count(DISTINCT step) "
                      "FROM groupml.observations").fetchone() == (27, 1, 27, 27)
    assert _trace(db) == reference


def test_sources_under_row_security_and_canonical_candidates(cluster, db, dbname, roles):
    # submit_job reads the job's rows as the calling role: the tenant's own policies apply to
    # its table, its security_invoker view and its plain view alike. An administrator
    # submitting for the tenant would read them with its own policies, so that is refused
    _make_table(db, "guarded", n_rows=400)
    db.execute("ALTER TABLE guarded ENABLE ROW LEVEL SECURITY")
    db.execute(sql.SQL("CREATE POLICY positive ON guarded FOR SELECT TO {} USING (f1 > 0)").format(
        sql.Identifier(roles["ta"])))
    db.execute(sql.SQL("GRANT SELECT ON guarded TO {}").format(sql.Identifier(roles["ta"])))
    db.execute("CREATE VIEW guarded_view AS SELECT * FROM guarded")
    db.execute("CREATE VIEW guarded_invoker WITH (security_invoker = true) AS SELECT * FROM guarded")
    for v in ("guarded_view", "guarded_invoker"):
        db.execute(sql.SQL("ALTER VIEW {} OWNER TO {}").format(sql.Identifier(v), sql.Identifier(roles["ta"])))
    visible = db.execute("SELECT count(*) FROM guarded WHERE f1 > 0").fetchone()[0]
    assert 0 < visible < 400
    cands = json.dumps([{"model": "logistic", "search": {"l2": [0.0, 1]}},        # l2 = 0 is the default
                        {"model": "mlp", "params": {"layers": "8,4", "epochs": 2}}])
    with _connect(cluster, dbname, roles["ta"]) as a:
        a.execute("SELECT groupml.create_tenant('ta')")
        jobs = [a.execute("SELECT groupml.submit_job('ta', %s, ARRAY['f1','f2','f3'], 'y', %s)",
                          [source, cands]).fetchone()[0] for source in ("guarded", "guarded_invoker", "guarded_view")]
        # one key per configuration however it was written; each job holds the rows the tenant sees
        assert [r[0] for r in a.execute("SELECT DISTINCT key FROM groupml.candidates ORDER BY 1")] == \
            ['logistic:{"l2":1.0}', 'logistic:{}', 'mlp:{"epochs":2,"layers":[8,4]}']
        assert [r[0] for r in a.execute("SELECT n_rows FROM groupml.jobs ORDER BY job_id")] == [visible] * 3
        st, msg, _ = sql_error(a, "SELECT groupml.submit_job('ta', 'guarded_view', ARRAY['f1'], 'y', %s)",
                               [json.dumps([{"model": "logistic", "params": {"l2": 1}},
                                            {"model": "logistic", "params": {"l2": 1.0}}])])
        assert (st, msg) == ("22023", 'groupml: The \'candidates\' value of submit_job lists the configuration '
                                      'logistic:{"l2":1.0} twice')
    assert db.execute("SELECT n_rows, octet_length(block) FROM groupml.job_data WHERE job_id = %s",
                      [jobs[0]]).fetchone() == (visible, visible * 4 * 8)
    # another role -- a superuser here, an administrator below -- reads with its own rights, so
    # only a source that reads alike for every role and runs none of the tenant's code is taken:
    # a table whose policies apply to the tenant, a view (its filters see current_user, its
    # functions and its tables' policy functions run as the reader) are refused
    db.execute("CREATE TABLE ta_owned AS SELECT * FROM guarded WHERE f1 > 0")
    db.execute(sql.SQL("ALTER TABLE ta_owned OWNER TO {}").format(sql.Identifier(roles["ta"])))
    db.execute("CREATE VIEW mine_only AS SELECT f1, f2, f3, y FROM guarded WHERE current_user = 'postgres' "
               "OR f1 > 0")
    db.execute(sql.SQL("GRANT SELECT ON mine_only TO {}, {}").format(sql.Identifier(roles["ta"]),
                                                                     sql.Identifier(roles["adm"])))
    with _connect(cluster, dbname, roles["ta"]) as a:
        a.execute("ALTER TABLE ta_owned ENABLE ROW LEVEL SECURITY")
        a.execute("CREATE POLICY positive_only ON ta_owned USING (f1 > 0)")
        a.execute(sql.SQL("GRANT SELECT ON ta_owned TO {}").format(sql.Identifier(roles["adm"])))

    def refused(conn, caller, source, what):
        st, msg, hint = sql_error(conn, "SELECT groupml.submit_job('ta', %s, ARRAY['f1','f2','f3'], 'y', %s)",
                                  [source, cands])
        assert (st, msg) == ("0A000", f"groupml: The source {source} of submit_job {what}: read by the calling role "
                                      f"'{caller}' its rows can differ from the tenant's, and code of the source "
                                      f"would run with the calling role's rights"), (source, msg)
        assert hint == f'Submit the job as the tenant\'s role or one of its members (SET ROLE "{roles["ta"]}"; ' \
                       f'needs membership), or submit a plain table of the rows.'

    for source, what in (("guarded", "has row-level security"), ("guarded_invoker", "is a view"),
                         ("guarded_view", "is a view"), ("mine_only", "is a view")):
        refused(db, "postgres", source, what)
    # a superuser and the owner are both exempt from the owner's policies: no policy runs
    job = db.execute("SELECT groupml.submit_job('ta', 'ta_owned', ARRAY['f1','f2','f3'], 'y', %s)",
                     [cands]).fetchone()[0]
    assert db.execute("SELECT n_rows FROM groupml.jobs WHERE job_id = %s", [job]).fetchone()[0] == visible
    db.execute("DELETE FROM groupml.jobs WHERE job_id = %s", [job])
    # user-defined code attached to a table: the planner folds an index expression as it plans
    # the read, running the function with the reader's rights (a tenant could make itself superuser)
    db.execute("CREATE FUNCTION plus0(float8) RETURNS float8 LANGUAGE sql IMMUTABLE AS 'SELECT $1'")
    db.execute("CREATE TABLE ta_indexed AS SELECT * FROM ta_owned")
    db.execute("CREATE INDEX ON ta_indexed ((f1 + plus0(0)))")
    db.execute("CREATE TABLE ta_checked AS SELECT * FROM ta_owned")
    db.execute("ALTER TABLE ta_checked ADD CHECK (abs(f1) >= 0)")          # built-in code only
    for t_ in ("ta_indexed", "ta_checked"):
        db.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(sql.Identifier(t_), sql.Identifier(roles["ta"])))
    refused(db, "postgres", "ta_indexed", "has code of its own (function public.plus0(double precision), in an index, "
                                          "partition key, statistics object, constraint or default of it or of a "
                                          "partition or child), which PostgreSQL can run while it plans the read")
    job = db.execute("SELECT groupml.submit_job('ta', 'ta_checked', ARRAY['f1','f2','f3'], 'y', %s)",
                     [cands]).fetchone()[0]
    db.execute("DELETE FROM groupml.jobs WHERE job_id = %s", [job])
    with _connect(cluster, dbname, roles["adm"]) as adm:
        for source, what in (("ta_owned", "has row-level security"), ("mine_only", "is a view")):
            refused(adm, roles["adm"], source, what)
    # a member of the tenant's role (a team member's login) submits as part of the tenant, as
    # the tenant's role does; so does the tenant's role itself (the hint's SET ROLE)
    db.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(roles["ta"]), sql.Identifier(roles["adm"])))
    with _connect(cluster, dbname, roles["adm"]) as adm:
        job = adm.execute("SELECT groupml.submit_job('ta', 'mine_only', ARRAY['f1','f2','f3'], 'y', %s)",
                          [cands]).fetchone()[0]
        assert db.execute("SELECT n_rows, submitted_by FROM groupml.jobs WHERE job_id = %s",
                          [job]).fetchone() == (visible, roles["adm"])
        db.execute("DELETE FROM groupml.jobs WHERE job_id = %s", [job])
        adm.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(roles["ta"])))
        job = adm.execute("SELECT groupml.submit_job('ta', 'ta_owned', ARRAY['f1','f2','f3'], 'y', %s)",
                          [cands]).fetchone()[0]
        assert db.execute("SELECT n_rows, submitted_by FROM groupml.jobs WHERE job_id = %s",
                          [job]).fetchone() == (visible, roles["ta"])
        db.execute("DELETE FROM groupml.jobs WHERE job_id = %s", [job])
    db.execute(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(roles["ta"]), sql.Identifier(roles["adm"])))
    # the job trains on the rows read at submission, whatever happens to the table afterwards
    db.execute("DELETE FROM guarded")
    db.execute("CALL groupml.run_scheduler()")
    assert db.execute("SELECT count(*) FILTER (WHERE status = 'ok'), count(*) FROM groupml.observations").fetchone() \
        == (9, 9)


def test_a_deleted_best_model_gives_way_to_the_next_best(cluster, db, dbname, roles, setup):
    # a tenant may delete its observations; infer then uses the best model left, and the
    # coordinator's next step for the job recomputes its best from the rows there are
    ja = setup["ta"]
    db.execute("CALL groupml.run_scheduler(max_steps => 4, policy => 'roundrobin')")
    best = "SELECT best_observation_id, best_quality FROM groupml.jobs WHERE job_id = %s"
    ranked = "SELECT observation_id, quality, model FROM groupml.observations WHERE job_id = %s AND status = 'ok' " \
             "ORDER BY quality DESC, observation_id"
    first = db.execute(ranked, [ja]).fetchall()
    assert len(first) == 2 and db.execute(best, [ja]).fetchone() == tuple(first[0][:2])
    x = [0.3, -1.2, 0.7]
    with _connect(cluster, dbname, roles["ta"]) as a:
        assert a.execute("DELETE FROM groupml.observations WHERE observation_id = %s", [first[0][0]]).rowcount == 1
        got = a.execute("SELECT groupml.infer(%s, %s::float8[])", [ja, x]).fetchone()[0]
    assert got == float(load_model(bytes(first[1][2])).predict(np.array([x]))[0])
    db.execute("CALL groupml.run_scheduler(policy => 'roundrobin')")
    left = db.execute(ranked, [ja]).fetchall()
    assert len(left) == 5 and db.execute(best, [ja]).fetchone() == tuple(left[0][:2])
    assert db.execute("SELECT count(*) FROM groupml.scheduler_log WHERE is_best").fetchone()[0] == 2


def test_state_row_deleted_rebuilds_without_retraining(db):
    _make_table(db, "d1")
    db.execute("SELECT groupml.create_tenant('solo')")
    db.execute("SELECT groupml.submit_job('solo', 'd1', ARRAY['f1','f2','f3'], 'y', %s)", [CLS_CANDIDATES])
    db.execute("CALL groupml.run_scheduler(max_steps => 2)")
    db.execute("DELETE FROM groupml.scheduler_state")
    db.execute("CALL groupml.run_scheduler(max_steps => 1, policy => 'greedy')")
    assert _counts(db) == (3, 3, 3, 3)
    db.execute("CALL groupml.run_scheduler(policy => 'fcfs', cost_aware => false)")  # replayed under fcfs
    assert _counts(db) == (6, 6, 6, 6)
    assert db.execute("SELECT policy, cost_aware FROM groupml.scheduler_state").fetchone() == ("fcfs", False)


def test_a_tenant_role_that_needs_quoting_is_named_once_quoted(cluster, db, dbname):
    # role::text is already quoted ("Astro"); quote_ident over it would give """Astro""" in the hints
    role = f"Astro_{dbname}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        _make_table(db, "astro_src")
        with _connect(cluster, dbname, role) as a:
            a.execute("SELECT groupml.create_tenant('astro')")
        st, msg, hint = sql_error(db, "SELECT groupml.submit_job('astro', 'astro_src', ARRAY['f1'], 'y', "
                                      "'[\"logistic\"]')")
        assert (st, msg) == ("42501", f"groupml: permission denied for table astro_src: the role '{role}' of tenant "
                                      f"'astro' cannot SELECT it")
        assert hint == f'GRANT SELECT ON astro_src TO "{role}";'
    finally:
        db.execute("DELETE FROM groupml.tenants WHERE name = 'astro'")
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_bad_input_is_rejected_and_writes_nothing(cluster, db, dbname, roles):
    _make_table(db, "d1")
    db.execute("CREATE TABLE secret (f1 float8, y boolean, t text)")
    db.execute(sql.SQL("GRANT SELECT ON d1 TO {}").format(sql.Identifier(roles["ta"])))
    db.execute("CREATE TABLE empty_src (f1 float8, y int)")
    db.execute("CREATE TABLE reg_src AS SELECT i::float8 AS f1, i / 7.0 AS yr, 0 AS y0, 2.5 AS yc "
               "FROM generate_series(1, 50) i")
    db.execute(sql.SQL("GRANT SELECT ON empty_src, reg_src TO {}").format(sql.Identifier(roles["ta"])))
    with _connect(cluster, dbname, roles["ta"]) as a:
        a.execute("SELECT groupml.create_tenant('ta')")
        a.execute("CREATE TEMP TABLE tmp_src AS SELECT * FROM d1")
        cases = [
            # a temporary table was taken, and every candidate failed once the session had ended
            ("SELECT groupml.submit_job('ta', 'tmp_src', ARRAY['f1'], 'y', '[\"logistic\"]')", "55000",
             "groupml: submit_job cannot take the temporary table tmp_src: the scheduler trains the job later, from "
             "other sessions, and checks the source each time; the table ends with this session", "regular table"),
            # a regclass given by number of no relation: PL/Python's raw 42P01 without a hint
            ("SELECT groupml.submit_job('ta', '999999', ARRAY['f1'], 'y', '[\"logistic\"]')", "42P01",
             "groupml: The 'source' value of submit_job names no relation: '999999' does not exist", "existing"),
            # jobs that could only fail in run_scheduler are refused when submitted
            ("SELECT groupml.submit_job('ta', 'empty_src', ARRAY['f1'], 'y', '[\"logistic\"]')", "22000",
             "groupml: The source empty_src of submit_job has no usable rows (0 rows; every one has a NULL, NaN or "
             "infinite feature or label)", "complete rows"),
            ("SELECT groupml.submit_job('ta', 'reg_src', ARRAY['f1'], 'yr', '[\"logistic\"]')", "22000",
             "groupml: The label column 'yr' of submit_job must hold 0 or 1 for classifiers; got 0.14285714285714285",
             "submit regressors"),
            # one class, or a constant label: every candidate would fail, and the job, still without
            # a model, would keep the scheduler's priority over every other job's first model
            ("SELECT groupml.submit_job('ta', 'reg_src', ARRAY['f1'], 'y0', '[\"logistic\"]')", "22000",
             "groupml: The label column 'y0' of submit_job has one class only (every usable row has label 0): "
             "there is nothing to learn", "both classes"),
            ("SELECT groupml.submit_job('ta', 'reg_src', ARRAY['f1'], 'yc', '[\"linear\"]')", "22000",
             "groupml: The label column 'yc' of submit_job has the same label in every usable row (2.5): there is "
             "nothing to learn", "labels that vary"),
            ("SELECT groupml.submit_job('nobody', 'd1', ARRAY['f1'], 'y', '[\"svm\"]')", "42704",
             "groupml: Tenant 'nobody' does not exist (or belongs to a role you are not a member of)",
             "groupml.create_tenant('nobody')"),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', '[]')", "22023",
             "groupml: The 'candidates' value of submit_job must list at least one model; got []", "JSON array"),
            ("SELECT groupml.submit_job('ta', 'secret', ARRAY['f1'], 'y', '[\"svm\"]')", "42501",
             f"groupml: permission denied for table secret: the role '{roles['ta']}' of tenant 'ta' cannot SELECT it",
             "GRANT SELECT ON secret TO"),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['nope'], 'y', '[\"svm\"]')", "42703",
             "groupml: Column 'nope' of submit_job features does not exist in d1", "Columns of d1:"),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['grp'], 'y', '[\"svm\"]')", "42804",
             "groupml: Column 'grp' of submit_job features must be numeric or boolean; it is text", "Cast"),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY[]::text[], 'y', '[\"svm\"]')", "22023",
             "groupml: The 'features' value of submit_job must name at least one column; got {}", "ARRAY["),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', '[\"forest\"]')", "42704", None, None),
            # the message names whose 'model' it is (it said only "The 'model' value")
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', '[{\"model\": null}]')", "22023",
             "groupml: The 'model' value of submit_job candidates[0] must name a model family; got null",
             "Known model families"),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', '[\"svm\", \"linear\"]')", "22023",
             "groupml: The 'candidates' value of submit_job must be all classifiers (logistic, svm, mlp, lightgbm) "
             "or all regressors (linear, mlp_regressor, lightgbm_regressor); got a mix", "one job per task"),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', '[\"lightgbm\", \"mlp_regressor\"]')", "22023",
             "groupml: The 'candidates' value of submit_job must be all classifiers (logistic, svm, mlp, lightgbm) "
             "or all regressors (linear, mlp_regressor, lightgbm_regressor); got a mix", "one job per task"),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', "
             "'[{\"model\": \"mlp\", \"params\": {\"epochs\": 0}}]')", "22023", None, None),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', "
             "'[{\"model\": \"lightgbm\", \"search\": {\"num_leaves\": [1, 7]}}]')", "22023", None, None),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', "
             "'[{\"model\": \"svm\", \"search\": {\"method\": \"tpe\", \"n_trials\": 3, "
             "\"space\": {\"l2\": {\"uniform\": [0, 1]}}}}]')", "22023",
             "groupml: The 'method' value of submit_job candidates[0] search must be 'grid' or 'random'; got 'tpe'",
             "grid or a random sample"),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', '[{\"model\": \"svm\", \"params\": {\"l2\": -1}}]')",
             "22023", None, None),
            ("SELECT groupml.create_tenant('')", "22023",
             "groupml: The 'name' value of create_tenant must be a non-empty text; got ''", "create_tenant('astro')"),
            ("SELECT groupml.create_tenant('x', 'no_such_role_zz')", "42704",
             "groupml: Role 'no_such_role_zz' of create_tenant does not exist", "CREATE ROLE"),
            ("SELECT groupml.create_tenant('ta')", "42710", "groupml: Tenant 'ta' already exists", "another"),
            ("SELECT groupml.create_tenant('mon', 'pg_monitor')", "22023",
             "groupml: The 'role' value of create_tenant must not be a predefined role; got 'pg_monitor'",
             "a role of its own"),
            ("SELECT groupml.submit_job('ta', 'd1', ARRAY['f1'], 'y', "
             "'[{\"model\": \"logistic\", \"params\": {\"max_iter\": 1e308}}]')", "22023",
             "groupml: The 'max_iter' value of model 'logistic' must be <= 1073741824; got 1e+308",
             "Give 'max_iter' a value"),
        ]
        for stmt, state, message, hint in cases:
            st, msg, h = sql_error(a, stmt)
            assert st == state, (stmt, st, msg)
            assert msg.startswith("groupml: "), msg
            assert h, stmt
            if message is not None:
                assert msg == message
                assert hint in h
    assert db.execute("SELECT count(*) FROM groupml.jobs").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM groupml.candidates").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM groupml.tenants").fetchone()[0] == 1
    # the generator's arguments are named as this function's (they said 'synthetic_dataset'), bounded
    st, msg, hint = sql_error(db, "SELECT * FROM groupml.simulate_scheduler('hybrid', 1e308, 0.1)")
    assert (st, msg) == ("22023", "groupml: The 'sigma_m' value of simulate_scheduler must be <= 1000; got 1e+308")
    assert "SYN(0.01, 0.1)" in hint
    st, msg, _ = sql_error(db, "SELECT * FROM groupml.simulate_scheduler('hybrid', 0.5, -1)")
    assert (st, msg) == ("22023", "groupml: The 'alpha' value of simulate_scheduler must be >= 0; got -1.0")
    st, msg, _ = sql_error(db, "SELECT * FROM groupml.simulate_scheduler('hybrid', 0.5, 0.1, n_models => 200000)")
    assert (st, msg) == ("22023", "groupml: The 'n_models' value of simulate_scheduler must be <= 5000; got 200000")
    st, msg, hint = sql_error(db, "SELECT * FROM groupml.simulate_scheduler('hybrid', 0.5, 0.1, n_users => 100000, "
                                  "n_models => 200)")
    assert (st, msg) == ("22023", "groupml: The 'n_users' x 'n_models' value of simulate_scheduler must be <= "
                                  "1000000; got 100000 x 200 = 20000000")
    assert "200 x 100" in hint

    st, msg, hint = sql_error(db, "CALL groupml.run_scheduler(policy => 'bogus')")
    assert (st, msg) == ("22023", "groupml: The 'policy' value of run_scheduler must be one of 'eirate', 'fcfs', "
                                  "'greedy', 'hybrid', 'random', 'roundrobin'; got 'bogus'")
    assert "hybrid" in hint
    st, msg, _ = sql_error(db, "CALL groupml.run_scheduler(max_steps => 0)")
    assert (st, msg) == ("22023", "groupml: The 'max_steps' value of run_scheduler must be >= 1; got 0")
    st, msg, _ = sql_error(db, "CALL groupml.run_scheduler(max_seconds => -1)")
    assert (st, msg) == ("22023", "groupml: The 'max_seconds' value of run_scheduler must be > 0; got -1.0")
    assert db.execute("SELECT count(*) FROM groupml.scheduler_state").fetchone()[0] == 0
    st, msg, hint = sql_error(db, "SELECT groupml.infer(12345, ARRAY[1.0])")
    assert st == "42704"


def test_infer_before_training_and_bad_features(db):
    _make_table(db, "d1")
    db.execute("SELECT groupml.create_tenant('solo')")
    job = db.execute("SELECT groupml.submit_job('solo', 'd1', ARRAY['f1','f2','f3'], 'y', '[\"logistic\"]')"
                     ).fetchone()[0]
    st, msg, hint = sql_error(db, "SELECT groupml.infer(%s, ARRAY[1, 2, 3]::float8[])", [job])
    assert (st, msg) == ("55000", f"groupml: Job {job} has no trained model yet")
    assert "run_scheduler" in hint
    db.execute("CALL groupml.run_scheduler()")
    st, msg, hint = sql_error(db, "SELECT groupml.infer(%s, ARRAY[1, 2]::float8[])", [job])
    assert (st, msg) == ("2202E", f"groupml: Job {job}'s model expects 3 features; found 2")
    st, msg, _ = sql_error(db, "SELECT groupml.infer(%s, ARRAY[1, NULL, 2]::float8[])", [job])
    assert st == "22000"
    # several rows are refused, not flattened into one (a 2 x 1 array is not one 2-feature row)
    st, msg, hint = sql_error(db, "SELECT groupml.infer(%s, ARRAY[[1, 2, 3], [4, 5, 6]]::float8[])", [job])
    assert (st, msg) == ("2202E", "groupml: The 'features' value of infer must be one row; got a two-dimensional "
                                  "array of 2 rows")
    assert hint == "Call infer once per row, with a one-dimensional array."
    assert db.execute("SELECT groupml.infer(%s, ARRAY[[1, 2, 3]]::float8[]) = groupml.infer(%s, ARRAY[1, 2, 3]"
                      "::float8[])", [job, job]).fetchone()[0]


def test_schedule_with_cron(cluster, db, dbname):
    st, msg, hint = sql_error(db, "SELECT groupml.schedule_with_cron('* * * * *', 50)")
    assert (st, msg) == ("55000", f"groupml: pg_cron is not installed in database '{dbname}'")
    assert "CREATE EXTENSION pg_cron" in hint
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as pg:
        preload = pg.execute("SHOW shared_preload_libraries").fetchone()[0]
        assert "pg_cron" in preload
        pg.execute("CREATE EXTENSION IF NOT EXISTS groupml CASCADE")
        pg.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
        try:
            jobid = pg.execute("SELECT groupml.schedule_with_cron('0 3 1 1 *', 40, database => %s)",
                               [dbname]).fetchone()[0]
            row = pg.execute("SELECT schedule, command, database, jobname FROM cron.job WHERE jobid = %s",
                             [jobid]).fetchone()
            assert row == ("0 3 1 1 *", "CALL groupml.run_scheduler(max_seconds => 40.0, policy => 'hybrid', "
                           "cost_aware => true)", dbname, "groupml_scheduler")
            again = pg.execute("SELECT groupml.schedule_with_cron('0 4 1 1 *', 30, policy => 'greedy', "
                               "database => %s)", [dbname]).fetchone()[0]
            assert again == jobid  # same job name: updated, not duplicated
            assert pg.execute("SELECT schedule FROM cron.job WHERE jobname = 'groupml_scheduler'").fetchall() == \
                [("0 4 1 1 *",)]
            st, msg, _ = sql_error(pg, "SELECT groupml.schedule_with_cron('* * * * *', 0)")
            assert (st, msg) == ("22023", "groupml: The 'max_seconds' value of schedule_with_cron must be > 0; got 0.0")
            # pg_cron's and PostgreSQL's own refusals came raw ('spiexceptions.InvalidParameterValue:
            # invalid schedule: bogus', 'spiexceptions.InvalidCatalogName: ...'), without a hint
            st, msg, hint = sql_error(pg, "SELECT groupml.schedule_with_cron('bogus', 40, database => %s)", [dbname])
            assert (st, msg) == ("22023", "groupml: The 'schedule' value of schedule_with_cron is not a schedule "
                                          "pg_cron accepts; got 'bogus' (pg_cron: invalid schedule: bogus)")
            assert hint.startswith("Five cron fields")
            st, msg, hint = sql_error(pg, "SELECT groupml.schedule_with_cron('* * * * *', 40, database => 'nope', "
                                          "job_name => 'x')")
            assert (st, msg) == ("3D000", "groupml: The 'database' value of schedule_with_cron names no database: "
                                          "'nope' does not exist")
            st, msg, _ = sql_error(pg, "SELECT groupml.schedule_with_cron('* * * * *', 1e308)")
            assert (st, msg) == ("22023", "groupml: The 'max_seconds' value of schedule_with_cron must be <= 86400; "
                                          "got 1e+308")
            st, msg, _ = sql_error(pg, "SELECT groupml.schedule_with_cron(repeat('*', 1000), 40)")
            assert st == "22023" and len(msg) < 400 and "at most 256 characters" in msg, msg
            # the same name for another database: pg_cron would update the job in place and leave it
            # in the first database (with the new schedule); refused, nothing changed
            st, msg, hint = sql_error(pg, "SELECT groupml.schedule_with_cron('*/5 * * * *', 7)")
            assert (st, msg) == ("42710", f"groupml: The cron job 'groupml_scheduler' already runs in database "
                                          f"'{dbname}'; pg_cron cannot move it to database 'postgres'")
            assert hint == (f"Give this database's job its own name, e.g. job_name => 'groupml_scheduler_postgres', "
                            f"or remove the other with SELECT cron.unschedule({jobid});")
            assert pg.execute("SELECT schedule, database FROM cron.job").fetchall() == [("0 4 1 1 *", dbname)]
            own = pg.execute("SELECT groupml.schedule_with_cron('*/5 * * * *', 7, "
                             "job_name => 'groupml_scheduler_postgres')").fetchone()[0]
            assert own != jobid and sorted(pg.execute("SELECT database FROM cron.job").fetchall()) == \
                sorted([(dbname,), ("postgres",)])
            pg.execute("SELECT cron.unschedule(%s)", [own])
            pg.execute("SELECT cron.unschedule(%s)", [jobid])
            _cron_as_an_ordinary_admin(cluster, pg, dbname)
        finally:
            pg.execute("DROP EXTENSION IF EXISTS pg_cron")
            pg.execute("DROP EXTENSION IF EXISTS groupml")


def _cron_as_an_ordinary_admin(cluster, pg, dbname):
    # a groupml_admin member who is not a superuser got PL/Python's raw 42501 twice (pg_cron's
    # schema; then schedule_in_database, which pg_cron grants to superusers only, even for
    # its own database)
    pg.execute("CREATE ROLE cron_coord LOGIN IN ROLE groupml_admin")
    try:
        with psycopg.connect(cluster.dsn("postgres", user="cron_coord"), autocommit=True) as c:
            call = "SELECT groupml.schedule_with_cron('0 5 1 1 *', 30, job_name => 'coord_job', database => %s)"
            st, msg, hint = sql_error(c, call, ["postgres"])
            assert (st, msg) == ("42501", "groupml: permission denied for schema cron: schedule_with_cron needs "
                                          "USAGE on pg_cron's schema")
            assert hint == "Have a superuser run: GRANT USAGE ON SCHEMA cron TO \"cron_coord\";"
            pg.execute("GRANT USAGE ON SCHEMA cron TO cron_coord")
            jobid = c.execute(call, ["postgres"]).fetchone()[0]      # its own database: pg_cron's schedule()
            assert pg.execute("SELECT database, username FROM cron.job WHERE jobid = %s", [jobid]).fetchone() == \
                ("postgres", "cron_coord")
            st, msg, hint = sql_error(c, call.replace("coord_job", "coord_other"), [dbname])
            assert (st, msg) == ("42501", "groupml: permission denied for function cron.schedule_in_database: "
                                          f"schedule_with_cron needs it to schedule in database '{dbname}' from "
                                          "'postgres'")
            assert "GRANT EXECUTE ON FUNCTION cron.schedule_in_database(text, text, text, text, text, boolean) " \
                   "TO \"cron_coord\";" in hint
            pg.execute("SELECT cron.unschedule(%s)", [jobid])
    finally:
        pg.execute("DROP OWNED BY cron_coord")
        pg.execute("DROP ROLE cron_coord")


def test_pg_cron_runs_the_scheduler(cluster, db, dbname, setup):
    # not only the cron.job row: pg_cron's own worker runs CALL run_scheduler in the job's
    # database at the next minute, and the steps it commits are there afterwards
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as pg:
        pg.execute("CREATE EXTENSION IF NOT EXISTS groupml CASCADE")
        pg.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
        jobid = None
        try:
            jobid = pg.execute("SELECT groupml.schedule_with_cron('* * * * *', 20, job_name => 'groupml_cron_run', "
                               "database => %s)", [dbname]).fetchone()[0]
            runs = cron_runs(pg, jobid)
            pg.execute("SELECT cron.unschedule(%s)", [jobid])
            jobid = None
            assert runs and runs[0] == ("succeeded", "CALL"), runs
        finally:
            if jobid is not None:
                pg.execute("SELECT cron.unschedule(%s)", [jobid])
            pg.execute("DROP EXTENSION IF EXISTS pg_cron")
            pg.execute("DROP EXTENSION IF EXISTS groupml")
    # every candidate of both tenants trained by the cron-driven run (12 of them, well under 20 s)
    obs, steps, logged, done = _counts(db)
    assert obs == steps == logged == done == 12
    assert db.execute("SELECT count(*) FROM groupml.jobs WHERE best_observation_id IS NOT NULL").fetchone()[0] == 2


def test_simulate_scheduler(db):
    rows = db.execute("SELECT cost, avg_loss, worst_tenant_loss, worst_run_loss FROM "
                      "groupml.simulate_scheduler('hybrid', 0.5, 1.0, seeds => 2, n_users => 40, n_models => 20, "
                      "n_tenants => 5, grid_points => 10)").fetchall()
    assert len(rows) == 10 and rows[0][0] == 0.0
    avg = [r[1] for r in rows]
    assert avg[0] > avg[-1] >= 0
    assert all(x >= y - 1e-12 for x, y in zip(avg, avg[1:]))
    assert all(r[2] >= r[1] - 1e-12 and r[3] >= r[1] - 1e-12 for r in rows)
    st, msg, hint = sql_error(db, "SELECT * FROM groupml.simulate_scheduler('best')")
    assert st == "22023" and msg.startswith("groupml: The 'policy' value of simulate_scheduler must be one of")
    # a long simulation notices a cancel (it never called into PostgreSQL: cancel and terminate
    # waited for the whole run)
    db.execute("SET statement_timeout = '1s'")
    try:
        with pytest.raises(psycopg.errors.QueryCanceled):
            db.execute("SELECT count(*) FROM groupml.simulate_scheduler('hybrid', 0.5, 1.0, seeds => 1000, "
                       "n_users => 5000, n_models => 100, n_tenants => 50)")
    finally:
        db.execute("SET statement_timeout = 0")


def test_help_and_comments(db):
    for topic in ("tenancy", "create_tenant", "submit_job", "run_scheduler", "schedule_with_cron", "infer",
                  "scheduler_log", "simulate_scheduler", "tenants", "jobs", "candidates", "observations",
                  "scheduler_state", "groupml_admin"):
        assert db.execute("SELECT groupml.help(%s)", [topic]).fetchone()[0]
    missing = db.execute("""
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'groupml' AND c.relname IN ('tenants', 'jobs', 'candidates', 'observations',
              'scheduler_state', 'scheduler_log', 'job_data') AND obj_description(c.oid, 'pg_class') IS NULL
        UNION ALL
        SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'groupml' AND p.proname IN ('create_tenant', 'submit_job', 'run_scheduler',
              'schedule_with_cron', 'infer', 'simulate_scheduler', '_tenancy_add_candidates')
              AND obj_description(p.oid, 'pg_proc') IS NULL
        UNION ALL
        SELECT polname::text FROM pg_policy WHERE polname LIKE '%\\_own' AND obj_description(oid, 'pg_policy') IS NULL
        """).fetchall()
    assert db.execute("SELECT count(*) FROM pg_policy WHERE polname LIKE '%\\_own'").fetchone()[0] == 5
    assert missing == []
    assert db.execute("SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = 'groupml_admin'"
                      ).fetchone()[0]
    cfg = db.execute("SELECT proconfig, prosecdef FROM pg_proc WHERE proname = '_tenancy_add_candidates'").fetchone()
    assert cfg == (["search_path=pg_catalog, pg_temp"], True)


def test_max_seconds_and_revoked_source(cluster, db, dbname, roles, setup):
    db.execute("CALL groupml.run_scheduler(max_seconds => 1e-6)")   # checked between steps
    assert _counts(db)[0] <= 1
    # the coordinator reads a job's source only while the job's role may read it
    db.execute(sql.SQL("REVOKE SELECT ON data_b FROM {}").format(sql.Identifier(roles["tb"])))
    with _connect(cluster, dbname, roles["adm"]) as adm:
        adm.execute("CALL groupml.run_scheduler()")
    rows = db.execute("SELECT o.status, o.error, count(*) FROM groupml.observations o WHERE job_id = %s "
                      "GROUP BY 1, 2", [setup["tb"]]).fetchall()
    assert rows == [("failed", "the job's role may no longer SELECT from public.data_b", 6)] or \
        (len(rows) == 2 and ("failed", "the job's role may no longer SELECT from public.data_b", 5) in rows)
    assert db.execute("SELECT count(*) FROM groupml.observations WHERE job_id = %s AND status = 'ok'",
                      [setup["ta"]]).fetchone()[0] == 6


def test_a_tenant_source_never_runs_with_the_coordinators_rights(cluster, db, dbname, roles):
    """What a source runs when it is read (a view's functions) runs as the role that submits
    the job, once, at submission: a view that would make its reader's role a superuser (the
    privilege escalation the SECURITY DEFINER loader allowed) gets only the tenant's rights,
    and the coordinator never reads a source, so replacing the view later runs nothing."""
    ta = roles["ta"]
    db.execute(sql.SQL("CREATE SCHEMA ta_s AUTHORIZATION {}").format(sql.Identifier(ta)))
    with _connect(cluster, dbname, ta) as a:
        a.execute("SELECT groupml.create_tenant('ta')")
        a.execute("CREATE TABLE ta_s.seen (who name)")
        a.execute("GRANT INSERT ON ta_s.seen TO PUBLIC")
        a.execute(f"""CREATE FUNCTION ta_s.pwn() RETURNS boolean LANGUAGE plpgsql AS $$
            BEGIN
              INSERT INTO ta_s.seen VALUES (current_user);
              IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
                EXECUTE 'ALTER ROLE {ta} SUPERUSER';
              END IF;
              RETURN true;
            END $$""")
        a.execute("CREATE TABLE ta_s.rows AS SELECT g::float8 AS f1, (g % 7)::float8 AS f2, (g % 2 = 0) AS y "
                  "FROM generate_series(1, 200) g")
        a.execute("CREATE VIEW ta_s.v AS SELECT * FROM ta_s.rows WHERE ta_s.pwn()")
        a.execute("CREATE TEMP VIEW tv AS SELECT * FROM ta_s.rows WHERE ta_s.pwn()")
        jobs = [a.execute("SELECT groupml.submit_job('ta', %s, ARRAY['f1', 'f2'], 'y', '[\"logistic\", \"svm\"]')",
                          [v]).fetchone()[0] for v in ("ta_s.v",)]
        # a temporary view is refused before it is read (its job could not outlive the session)
        st, msg, _ = sql_error(a, "SELECT groupml.submit_job('ta', 'tv', ARRAY['f1', 'f2'], 'y', '[\"logistic\"]')")
        assert st == "55000" and msg.startswith("groupml: submit_job cannot take the temporary view tv: ") \
            and msg.endswith("the view ends with this session")
        assert {r[0] for r in a.execute("SELECT who FROM ta_s.seen")} == {ta}
        n_seen = a.execute("SELECT count(*) FROM ta_s.seen").fetchone()[0]
        # the view now reads nothing of the tenant's: the job keeps the rows it was submitted with
        a.execute("CREATE OR REPLACE VIEW ta_s.v AS SELECT * FROM ta_s.rows WHERE ta_s.pwn() AND f1 < 0")
        with _connect(cluster, dbname, roles["adm"]) as adm:
            adm.execute("CALL groupml.run_scheduler(max_steps => 2)")
        db.execute("CALL groupml.run_scheduler()")                  # a superuser coordinator too
        assert a.execute("SELECT count(*) FROM ta_s.seen").fetchone()[0] == n_seen
    assert db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [ta]).fetchone()[0] is False
    assert db.execute("SELECT job_id, count(*) FILTER (WHERE status = 'ok') FROM groupml.observations "
                      "GROUP BY 1 ORDER BY 1").fetchall() == [(jobs[0], 2)]
    assert db.execute("SELECT n_rows FROM groupml.job_data ORDER BY job_id").fetchall() == [(200,)]


def test_a_source_that_cannot_be_read_fails_its_submission_not_the_coordinator(cluster, db, dbname, roles):
    # a value out of float8's range would fail every coordinator run at the job's turn, so no
    # other job would be served: it is the submitter's error, and nothing is written
    _make_table(db, "fine")
    db.execute("CREATE TABLE big (f1 numeric, f2 float8, y boolean)")
    db.execute("INSERT INTO big SELECT g / 7.0, g % 3, g % 2 = 0 FROM generate_series(1, 50) g")
    db.execute("INSERT INTO big VALUES (1e400, 0, true)")
    db.execute("CREATE INDEX big_f2 ON big (f2)")
    db.execute("SELECT groupml.create_tenant('solo')")
    st, msg, hint = sql_error(db, "SELECT groupml.submit_job('solo', 'big', ARRAY['f1', 'f2'], 'y', '[\"svm\"]')")
    assert st == "22003" and msg.startswith("groupml: submit_job could not read the rows of big: ")
    assert msg.endswith(" is out of range for type double precision")
    assert "Fix the source" in hint
    st, msg, hint = sql_error(db, "SELECT groupml.submit_job('solo', 'big_f2', ARRAY['f2'], 'y', '[\"svm\"]')")
    assert (st, msg) == ("42809", "groupml: The source big_f2 of submit_job must be a table, view, materialized "
                                  "view or foreign table; it is an index")
    st, msg, _ = sql_error(db, "SELECT groupml.submit_job('solo', 'fine', ARRAY['f1'], 'y', "
                               "'[{\"model\": \"svm\", \"params\": []}]')")
    assert (st, msg) == ("22023", "groupml: The 'params' value of submit_job candidates[0] must be a JSON object; "
                                  "got []")
    assert db.execute("SELECT (SELECT count(*) FROM groupml.jobs), (SELECT count(*) FROM groupml.job_data), "
                      "(SELECT count(*) FROM groupml.candidates)").fetchone() == (0, 0, 0)
    job = db.execute("SELECT groupml.submit_job('solo', 'fine', ARRAY['f1'], 'y', '[\"svm\"]')").fetchone()[0]
    db.execute("CALL groupml.run_scheduler()")
    assert db.execute("SELECT status FROM groupml.observations WHERE job_id = %s", [job]).fetchall() == [("ok",)]
    # a job row written by hand gets submit_job's checks before it gets candidates
    with _connect(cluster, dbname, roles["ta"]) as a:
        db.execute(sql.SQL("GRANT SELECT ON fine TO {}").format(sql.Identifier(roles["ta"])))
        tid = a.execute("SELECT groupml.create_tenant('ta')").fetchone()[0]
        a.execute("BEGIN")
        jid = a.execute("INSERT INTO groupml.jobs (tenant_id, owner_role, source, features, label, task, metric, "
                        "n_rows) VALUES (%s, %s::regrole, 'fine', '{y,f1}', 'y', 'classification', 'accuracy', 1) "
                        "RETURNING job_id", [tid, roles["ta"]]).fetchone()[0]
        st, msg, _ = sql_error(a, "SELECT groupml._tenancy_add_candidates(%s, '[\"svm\"]', 0, ''::bytea)", [jid])
        assert (st, msg) == ("22023", f"groupml: Job {jid} must name distinct feature columns, without its label; "
                                      f"got features ['y', 'f1'], label 'y'")
        a.execute("ROLLBACK")


def test_a_candidate_deleted_while_it_trains_waits_for_the_step(cluster, db, dbname, roles, setup):
    # the step holds its candidate and job (FOR KEY SHARE): a tenant deleting them waits for
    # the step's commit instead of making its observation fail a foreign key, which stopped
    # the whole coordinator run
    ja = setup["ta"]
    with _connect(cluster, dbname, roles["adm"]) as adm, psycopg.connect(cluster.dsn(dbname)) as locker, \
            _connect(cluster, dbname, roles["ta"]) as a:
        locker.execute("LOCK TABLE groupml.observations IN SHARE MODE")     # the step stops before its insert
        out = {}
        coordinator = threading.Thread(target=lambda: out.update(
            run=adm.execute("CALL groupml.run_scheduler(max_steps => 1, policy => 'fcfs')")))
        coordinator.start()
        pid = adm.info.backend_pid

        def waiting(p):
            return db.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                              [p]).fetchone()[0]
        deadline = time.time() + 60
        while not waiting(pid) and time.time() < deadline:
            time.sleep(0.02)
        assert waiting(pid)
        deleter = threading.Thread(target=lambda: out.update(
            deleted=a.execute("DELETE FROM groupml.jobs WHERE job_id = %s", [ja]).rowcount))
        deleter.start()
        deadline = time.time() + 60
        while not waiting(a.info.backend_pid) and time.time() < deadline:
            time.sleep(0.02)
        assert waiting(a.info.backend_pid)                  # the tenant's delete waits for the step
        locker.rollback()
        coordinator.join(120)
        deleter.join(120)
    assert "run" in out and out["deleted"] == 1
    assert db.execute("SELECT steps FROM groupml.scheduler_state").fetchone()[0] == 1
    assert db.execute("SELECT count(*) FROM groupml.jobs WHERE job_id = %s", [ja]).fetchone()[0] == 0
    db.execute("CALL groupml.run_scheduler()")            # the next run goes on without the job
    assert db.execute("SELECT count(*) FROM groupml.observations WHERE status = 'ok'").fetchone()[0] == 6


def test_schedule_with_cron_as_an_administrator_without_pg_cron(cluster, db, dbname, roles):
    # reading shared_preload_libraries needs pg_read_all_settings: a groupml_admin member got
    # 42501 instead of the explanation
    with _connect(cluster, dbname, roles["adm"]) as adm:
        st, msg, hint = sql_error(adm, "SELECT groupml.schedule_with_cron('* * * * *', 50)")
    assert (st, msg) == ("55000", f"groupml: pg_cron is not installed in database '{dbname}'")
    assert "CREATE EXTENSION pg_cron" in hint


def test_a_revocation_takes_effect_at_the_next_step_of_a_running_call(cluster, db, dbname, roles, setup):
    # the coordinator cached a job's rows for the whole call and checked the source only when
    # it loaded them: a REVOKE (or DROP) during a long call did not stop the job's training
    with _connect(cluster, dbname, roles["adm"]) as adm, psycopg.connect(cluster.dsn(dbname)) as locker:
        locker.execute("LOCK TABLE groupml.observations IN SHARE MODE")     # step 1 waits before its insert
        thread = threading.Thread(target=lambda: adm.execute("CALL groupml.run_scheduler(policy => 'roundrobin')"))
        thread.start()
        pid = adm.info.backend_pid
        deadline = time.time() + 60
        while not db.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                             [pid]).fetchone()[0] and time.time() < deadline:
            time.sleep(0.02)
        db.execute(sql.SQL("REVOKE SELECT ON data_b FROM {}").format(sql.Identifier(roles["tb"])))
        locker.rollback()
        thread.join(300)
    rows = dict(db.execute("SELECT status, count(*) FROM groupml.observations WHERE job_id = %s GROUP BY 1",
                           [setup["tb"]]).fetchall())
    assert rows.get("ok", 0) <= 1 and rows.get("ok", 0) + rows["failed"] == 6, rows    # at most the step in flight
    assert {r[0] for r in db.execute("SELECT error FROM groupml.observations WHERE job_id = %s AND status = 'failed'",
                                     [setup["tb"]])} == {"the job's role may no longer SELECT from public.data_b"}
    assert db.execute("SELECT count(*) FROM groupml.observations WHERE job_id = %s AND status = 'ok'",
                      [setup["ta"]]).fetchone()[0] == 6
