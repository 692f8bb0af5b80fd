"""train_groups: the catalog-writing procedure."""

import json
import os
import signal
import threading
import time

import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification
from pg_helpers import cancel_when, children_of, sql_error

pytestmark = pytest.mark.integration

GRID = '{"l2": [0.001, 0.1]}'


@pytest.fixture
def clicks(db):
    data = grouped_classification(5000, 4, 3, seed=31, exponent=0.7)
    create_table(db, "clicks", data)
    return data


def call(db, *extra):
    return db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', "
                      "'logistic', %s::jsonb" + "".join(", " + e for e in extra) + ")", [GRID]).fetchone()[0]


def test_trains_every_group_into_the_catalog(db, clicks):
    run_id = call(db)
    run = db.execute("SELECT status, n_groups, groups_done, family FROM groupml.runs WHERE run_id = %s",
                     [run_id]).fetchone()
    assert run == ("done", 4, 4, "logistic")
    best = db.execute("SELECT group_key->>'country', status, params, score FROM groupml.best_models "
                      "WHERE run_id = %s ORDER BY 1", [run_id]).fetchall()
    assert len(best) == 4 and all(b[1] == "ok" for b in best)
    n_trials = db.execute("SELECT count(*) FROM groupml.trials WHERE run_id = %s", [run_id]).fetchone()[0]
    assert n_trials == 8
    # the planner's estimate sits beside the measured time; every group's cost was recorded
    est, trained, actual = db.execute("SELECT estimated_seconds, train_seconds, seconds FROM groupml.runs "
                                      "WHERE run_id = %s", [run_id]).fetchone()
    # the estimate covers the searches' passes, and train_seconds is their measured time (the
    # call's wall time also loads rows, stores models and commits)
    assert est > 0 and 0 < trained <= actual
    trial_seconds = db.execute("SELECT sum((metrics->>'seconds')::float8) FROM groupml.trials WHERE run_id = %s",
                               [run_id]).fetchone()[0]
    assert trained == pytest.approx(trial_seconds, rel=0.05, abs=1e-3)
    assert db.execute("SELECT count(*) FROM groupml.cost_runs WHERE source = 'train_groups'").fetchone()[0] == 4
    costs = db.execute("SELECT metrics FROM groupml.trials WHERE run_id = %s", [run_id]).fetchall()
    assert all(m["passes"] >= 1 and m["seconds"] >= 0 for (m,) in costs)
    assert sum(1 for (m,) in costs if m["is_best"]) == 4
    # the catalog holds the same selection as the aggregate gives
    agg = dict(db.execute("SELECT country, (groupml.learn_over_groups(ARRAY[f1, f2, f3], clicked, 'logistic', "
                          "%s::jsonb)).score FROM clicks GROUP BY country", [GRID]).fetchall())
    for country, _status, _params, score in best:
        assert score == pytest.approx(agg[country], abs=1e-9)
    # models from the catalog predict
    n = db.execute("SELECT count(groupml.predict(m.fit, ARRAY[c.f1, c.f2, c.f3])) FROM clicks c "
                   "JOIN groupml.models m ON m.group_key->>'country' = c.country AND m.run_id = %s",
                   [run_id]).fetchone()[0]
    assert n == 5000


def test_a_group_large_enough_for_the_warm_start_trains_alike_in_both_paths(db, monkeypatch):
    """A group of 30,000+ training rows starts from a row sample's solution: train_groups, the
    aggregate and fit_group in this process select the same configuration with the same weights,
    in the warm start's iterations (fewer than a cold start's)."""
    import numpy as np

    from groupml.fitting import fit_group
    from groupml.learners import _glm, load_model

    data = grouped_classification(48000, 2, 3, seed=7, exponent=3.0)
    create_table(db, "big", data)
    grid = '{"l2": [0, 0.001, 0.1], "class_weight": [null, "balanced"]}'
    run_id = db.execute("CALL groupml.train_groups('big', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', "
                        "'logistic', %s::jsonb)", [grid]).fetchone()[0]
    stored = {k: (n, p, load_model(bytes(m))) for k, n, p, m in db.execute(
        "SELECT group_key->>'country', (fit).n_train, (fit).params, (fit).model FROM groupml.models "
        "WHERE run_id = %s AND (fit).status = 'ok'", [run_id]).fetchall()}
    agg = {k: (p, load_model(bytes(m)), t) for k, p, m, t in db.execute(
        "SELECT country, (f).params, (f).model, (f).trials FROM (SELECT country, groupml.learn_over_groups("
        "ARRAY[f1, f2, f3], clicked, 'logistic', %s::jsonb) AS f FROM big GROUP BY country) s", [grid]).fetchall()}
    big = max(stored, key=lambda k: stored[k][0])
    assert stored[big][0] >= 30000 and set(agg) == set(stored)
    rows = data["grp"] == big
    X = np.column_stack([data[f][rows] for f in ("f1", "f2", "f3")])
    local = fit_group(X, data["label"][rows].astype(np.float64), "logistic", json.loads(grid), {})
    for k, (_n, params, model) in stored.items():
        assert agg[k][0] == params
        np.testing.assert_allclose(agg[k][1].coef, model.coef, atol=1e-9, rtol=0)
    assert local.params == stored[big][1]
    np.testing.assert_allclose(load_model(local.model).coef, stored[big][2].coef, atol=1e-9, rtol=0)
    iterations = [t["iterations"] for t in local.trials]
    assert [t["iterations"] for t in agg[big][2]] == iterations
    monkeypatch.setattr(_glm, "PRESOLVE_MIN_STEP", 10 ** 9)         # the same search started cold
    cold = fit_group(X, data["label"][rows].astype(np.float64), "logistic", json.loads(grid), {})
    assert sum(iterations) < sum(t["iterations"] for t in cold.trials)


def test_resume_trains_only_missing_groups(db, clicks):
    run_id = call(db)
    before = dict(db.execute("SELECT group_key::text, model_id FROM groupml.models WHERE run_id = %s",
                             [run_id]).fetchall())
    victim = sorted(before)[0]
    db.execute("DELETE FROM groupml.models WHERE run_id = %s AND group_key = %s::jsonb", [run_id, victim])
    db.execute("DELETE FROM groupml.trials WHERE run_id = %s AND group_key = %s::jsonb", [run_id, victim])
    db.execute("UPDATE groupml.runs SET status = 'running', groups_done = 3 WHERE run_id = %s", [run_id])
    # another seed or split would train the missing group unlike the stored ones
    for what, search, options in (("search", '{"l2": [0.001, 0.1], "seed": 8}', "{}"),
                                  ("options", GRID, '{"validation_fraction": 0.5}')):
        state, msg, hint = sql_error(db, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', "
                                         "'f3'], 'clicked', 'logistic', %s::jsonb, %s::jsonb, %s)",
                                     [search, options, run_id])
        assert (state, msg) == ("22023", f"groupml: Run {run_id} was started with "
                                         f"{'another search' if what == 'search' else 'other options'}; resuming "
                                         "needs the same search and options (only how it runs may change: processes, "
                                         "progress and the executor's options such as drivers)"), msg
        assert hint == (f"Pass the {what} stored in groupml.runs: SELECT search, options FROM groupml.runs "
                        f"WHERE run_id = {run_id};")
    # another argument: the message says which (it only listed all five)
    state, msg, _ = sql_error(db, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2'], "
                                  "'clicked', 'svm', %s::jsonb, '{}', %s)", [GRID, run_id])
    assert (state, msg) == ("22023", f"groupml: Run {run_id} was started with other arguments; resuming needs the "
                                     f"same source, group_by, features, label and model; these differ: features "
                                     f"['f1', 'f2', 'f3'] (given ['f1', 'f2']); model 'logistic' (given 'svm')"), msg
    # the same search and options however they are written; how it runs may differ
    again = db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', "
                       "'logistic', '{\"method\": \"grid\", \"l2\": [0.001, 0.1]}', "
                       "'{\"processes\": 1, \"progress\": true, \"seed\": 0, \"metric\": \"accuracy\"}', %s)",
                       [run_id]).fetchone()[0]
    assert again == run_id
    after = dict(db.execute("SELECT group_key::text, model_id FROM groupml.models WHERE run_id = %s",
                            [run_id]).fetchall())
    assert set(after) == set(before)
    assert all(after[k] == before[k] for k in before if k != victim)
    assert after[victim] != before[victim]
    assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s",
                      [run_id]).fetchone() == ("done", 4)


def test_a_resumed_group_plans_with_the_cost_model_of_the_first_attempt(db, clicks):
    # the batch size k comes from the calibrated cost model and steers Hyperband (how many
    # trials are in flight): runs recorded after the run started changed a resumed group's search
    spec = json.dumps({"method": "hyperband", "seed": 7, "epoch_iters": 3, "max_epochs": 9, "eta": 3,
                       "space": {"l2": {"loguniform": [1e-6, 1]}, "lr": {"loguniform": [1e-3, 1]}, "solver": "gd",
                                 "max_iter": 60}})
    stmt = ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', 'svm', "
            "%s::jsonb, '{}', %s)")
    run_id = db.execute(stmt, [spec, None]).fetchone()[0]
    got = "SELECT group_key::text, (fit).params::text, (fit).score, md5((fit).model) FROM groupml.models WHERE run_id = %s"
    before = sorted(db.execute(got, [run_id]).fetchall())
    victim = before[0][0]
    db.execute("DELETE FROM groupml.models WHERE run_id = %s AND group_key = %s::jsonb", [run_id, victim])
    db.execute("DELETE FROM groupml.trials WHERE run_id = %s AND group_key = %s::jsonb", [run_id, victim])
    # timings of a machine where a pass costs nothing but its flops: k = 1 is cheapest
    db.execute("INSERT INTO groupml.cost_runs (n, d, k, workers, passes, seconds, family, source) "
               "SELECT n, 3, k, 1, 10, 10 * 2e-9 * n * 3 * k, 'svm', 'train_groups' "
               "FROM (VALUES (1000), (2000), (4000)) a(n), (VALUES (1), (4), (8)) b(k)")
    plan = db.execute("SELECT string_agg(detail, ' ') FROM groupml.explain_search('clicks', ARRAY['f1', 'f2', 'f3'], "
                      "'clicked', 'svm', %s::jsonb)", [spec]).fetchone()[0]
    assert "k = 1 " in plan, plan                 # a new run would now plan otherwise
    db.execute(stmt, [spec, run_id])
    assert sorted(db.execute(got, [run_id]).fetchall()) == before


def refusals_in_every_build(db, table, group_col):
    """(workers, strategy, sqlstate, message, hint) of train_groups over ``table`` in each way it
    reads groups: in this backend, through a snapshot built by workers, and through a snapshot
    built by this backend (gtp on one worker)."""
    for workers, strategy in ((1, "auto"), (2, "auto"), (1, "gtp")):
        yield (workers, strategy, *sql_error(db, f"CALL groupml.train_groups('{table}', ARRAY['{group_col}'], "
                                                 f"ARRAY['f1'], 'y', 'logistic', workers => {workers}, "
                                                 f"strategy => '{strategy}')"))


def assert_trains_every_group(db, table, group_col, n_groups):
    """train_groups over ``table`` in this backend stores a model for each of its groups."""
    run = db.execute(f"CALL groupml.train_groups('{table}', ARRAY['{group_col}'], ARRAY['f1'], 'y', "
                     f"'logistic')").fetchone()[0]
    assert db.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s", [run]).fetchone()[0] == n_groups


def test_a_group_key_too_long_for_the_catalog_is_refused_before_training(db):
    # its model insert failed on the unique index (54000, PL/Python's raw text) after every group
    # had been trained, and a resume could not get past it
    db.execute("CREATE TABLE longkeys AS SELECT k.k, random() AS f1, (random() < 0.5)::int AS y "
               "FROM (SELECT g, (SELECT string_agg(md5(i::text || '-' || g), '') FROM generate_series(1, 100) i) AS k "
               "FROM generate_series(1, 2) g) k, generate_series(1, 40)")
    for workers, strategy, state, msg, hint in refusals_in_every_build(db, "longkeys", "k"):
        assert state == "54000" and msg.startswith("groupml: The group key ") and msg.endswith(
            "of train_groups takes 3,217 bytes; groupml's catalog indexes group keys, which PostgreSQL limits to "
            "about 2,700 bytes"), (workers, msg)                          # the jsonb's size
        assert "md5(the_long_column)" in hint
    assert db.execute("SELECT count(*) FROM groupml.models").fetchone()[0] == 0
    # the snapshot builds (with workers, and gtp on one backend) left their unfinished snapshot
    # row behind ('building', no run using it) when the failed run was committed
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
    assert db.execute("SELECT array_agg(status) FROM groupml.runs").fetchone()[0] == ["failed"] * 3
    # sizes are the jsonb's: ten numeric columns make a 2,599-byte text 2,696 bytes of jsonb,
    # which failed after training; a key of escaped characters is 5,041 bytes of JSON text but
    # 1,017 of jsonb, and fits
    db.execute("CREATE TABLE numkeys AS SELECT 1 a, 2 b, 3 c, 4 d, 5 e, 6 f, 7 g, 8 h, 9 i, 0 j, v.k, "
               "random() AS f1, (random() < 0.5)::int AS y FROM (SELECT (SELECT string_agg(md5(i::text), '') "
               "FROM generate_series(1, 78) i) || 'abcdefghijklmn' AS k UNION ALL SELECT 'short') v, "
               "generate_series(1, 40)")
    size = db.execute("SELECT octet_length(jsonb_build_object('a',a,'b',b,'c',c,'d',d,'e',e,'f',f,'g',g,'h',h,'i',i,"
                      "'j',j,'k',k)::text), pg_column_size(jsonb_build_object('a',a,'b',b,'c',c,'d',d,'e',e,'f',f,"
                      "'g',g,'h',h,'i',i,'j',j,'k',k)) FROM numkeys WHERE k <> 'short' LIMIT 1").fetchone()
    assert size[0] < 2600 < size[1], size                    # the text passed the old check
    state, msg, _ = sql_error(db, "CALL groupml.train_groups('numkeys', ARRAY['a','b','c','d','e','f','g','h','i',"
                                  "'j','k'], ARRAY['f1'], 'y', 'logistic')")
    assert state == "54000" and msg.startswith("groupml: The group key "), msg
    db.execute("CREATE TABLE esckeys AS SELECT v.k, random() AS f1, (random() < 0.5)::int AS y FROM "
               "(SELECT string_agg(chr(1 + i % 31) || '\"\\', '') AS k FROM generate_series(1, 333) i "
               "UNION ALL SELECT 'short') v, generate_series(1, 40)")
    assert_trains_every_group(db, "esckeys", "k", 2)


def test_groups_whose_keys_are_equal_as_json_are_refused_before_training(db):
    # 0.1 + 0.2 and 0.3 are two groups, but one key under extra_float_digits = 0: the second
    # group's model met the catalog's unique key (a raw 23505) after the first was committed
    db.execute("CREATE TABLE fkeys AS SELECT CASE WHEN i % 2 = 0 THEN 0.1::float8 + 0.2::float8 ELSE 0.3::float8 END "
               "AS kf, (i % 7)::float8 AS f1, (i % 3 = 0)::int AS y FROM generate_series(1, 200) i")
    db.execute("SET extra_float_digits = 0")
    for workers, strategy, state, msg, hint in refusals_in_every_build(db, "fkeys", "kf"):
        assert (state, msg) == ("22000", 'groupml: 2 groups of train_groups have the same key \'{"kf": 0.3}\': the '
                                         'group-by values are distinct, but not once written as JSON, and a run '
                                         'stores one model per key'), (workers, strategy, msg)
        assert hint.startswith("Reset extra_float_digits (SET extra_float_digits = 1)"), hint
    assert db.execute("SELECT count(*) FROM groupml.models").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
    db.execute("RESET extra_float_digits")
    assert_trains_every_group(db, "fkeys", "kf", 2)


def test_a_source_error_in_the_one_backend_snapshot_build_fails_the_run(db):
    # its cursor stayed open, so committing the failed run failed ('pinned portal is not ready
    # to be auto-held'), the error was swallowed, and the run stayed 'running' for good
    db.execute("CREATE TABLE divsrc AS SELECT i % 3 AS g, (i % 7)::float8 AS f1, (i % 2)::int AS y, i "
               "FROM generate_series(1, 300) i")
    db.execute("CREATE VIEW divview AS SELECT g, f1 / (i - 250) AS f1, y FROM divsrc")
    state, msg, hint = sql_error(db, "CALL groupml.train_groups('divview', ARRAY['g'], ARRAY['f1'], 'y', "
                                     "'logistic', strategy => 'gtp')")
    assert (state, msg) == ("22012", "groupml: train_groups could not read the rows of public.divview: division by "
                                     "zero")
    assert hint == "Fix the source (or pass a view that selects valid rows), then call train_groups again."
    assert db.execute("SELECT status, finished_at IS NOT NULL FROM groupml.runs").fetchall() == [("failed", True)]
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0


def test_timestamp_group_keys_in_the_callers_time_zone_with_workers(db, cluster, dbname):
    # a worker wrote a timestamptz key in its own TimeZone, did not find it among the
    # coordinator's keys and stopped the snapshot ("the source changed while ...")
    db.execute("CREATE TABLE tzkeys AS SELECT timestamptz '2024-01-01 00:00:00+00' + (i % 3) * interval '1 day' "
               "AS ts, random() AS f1, (random() < 0.5)::int AS y FROM generate_series(1, 300) i")
    db.execute("SET TimeZone = 'Asia/Tokyo'")
    try:
        run = db.execute("CALL groupml.train_groups('tzkeys', ARRAY['ts'], ARRAY['f1'], 'y', 'logistic', "
                         "workers => 2)").fetchone()[0]
        keys = [r[0] for r in db.execute("SELECT group_key->>'ts' FROM groupml.models WHERE run_id = %s ORDER BY 1",
                                         [run])]
        assert keys == ["2024-01-01T09:00:00+09:00", "2024-01-02T09:00:00+09:00", "2024-01-03T09:00:00+09:00"]
    finally:
        db.execute("RESET TimeZone")


def test_a_run_resumes_only_under_the_settings_its_keys_were_written_in(db):
    # resumed under another TimeZone, a timestamptz group's key was another text: the groups
    # already stored were trained again (5 models for 3 groups, groups_done > n_groups)
    db.execute("CREATE TABLE tzbad AS SELECT timestamptz '2024-01-01 00:00:00+00' + (i % 3) * interval '1 day' AS ts, "
               "(i % 7)::float8 AS f1, CASE WHEN i = 3 THEN 2 ELSE (i % 5 = 0)::int END AS y "
               "FROM generate_series(1, 300) i")
    stmt = "CALL groupml.train_groups('tzbad', ARRAY['ts'], ARRAY['f1'], 'y', 'logistic', run_id => %s)"
    db.execute("SET TimeZone = 'UTC'")
    assert sql_error(db, stmt, [None])[0] == "22000"
    run = db.execute("SELECT run_id FROM groupml.runs").fetchone()[0]
    before = db.execute("SELECT count(*) FROM groupml.models").fetchone()[0]
    db.execute("UPDATE tzbad SET y = 1 WHERE y = 2")
    db.execute("SET TimeZone = 'America/New_York'")
    state, msg, hint = sql_error(db, stmt, [run])
    db.execute("SET TimeZone = 'UTC'")
    assert state == "22023", (state, msg)
    assert msg == (f"groupml: Run {run} wrote its group keys under TimeZone 'UTC' (this session: 'America/New_York'); "
                   f"resumed under other settings the same groups would get other keys and be trained again"), msg
    assert hint == f"SET TimeZone = 'UTC'; Then call train_groups again with run_id => {run}."
    assert db.execute("SELECT count(*) FROM groupml.models").fetchone()[0] == before
    db.execute(stmt, [run])
    db.execute("RESET TimeZone")
    assert db.execute("SELECT count(*), count(DISTINCT group_key) FROM groupml.models").fetchone() == (3, 3)
    # an integer key is written alike under any TimeZone: its run resumes there
    db.execute("CREATE TABLE intbad AS SELECT i % 3 AS g, (i % 7)::float8 AS f1, CASE WHEN i = 3 THEN 2 "
               "ELSE (i % 5 = 0)::int END AS y FROM generate_series(1, 300) i")
    again = "CALL groupml.train_groups('intbad', ARRAY['g'], ARRAY['f1'], 'y', 'logistic', run_id => %s)"
    assert sql_error(db, again, [None])[0] == "22000"
    run = db.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
    db.execute("UPDATE intbad SET y = 1 WHERE y = 2")
    db.execute("SET TimeZone = 'Asia/Tokyo'")
    try:
        db.execute(again, [run])
    finally:
        db.execute("RESET TimeZone")
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run]).fetchone()[0] == "done"


def _helpers_of(pid):
    """Live multiprocessing pool workers whose parent is backend ``pid``."""
    return children_of(pid, b"spawn_main")


def _three_slow_groups(db, table, seed):
    """A table of 3 groups of about 10,000 rows x 8 features whose 8-configuration search runs
    long enough (about a second a group) to be interrupted; (search spec, features array)."""
    create_table(db, table, grouped_classification(30000, 3, 8, seed=seed, exponent=0.2))
    spec = json.dumps({"l2": [10 ** -k for k in range(1, 9)], "max_iter": 300, "tol": 1e-300})
    return spec, "ARRAY[" + ", ".join(f"'f{j + 1}'" for j in range(8)) + "]"


@pytest.mark.parametrize("processes", [1, 2])
def test_commits_group_by_group(cluster, dsn, db, clicks, processes):
    """A run cancelled after its first group keeps that group; the same run id resumes it.
    With helper processes, the cancel also ends the helpers."""
    spec, feats = _three_slow_groups(db, "big", 32)
    stmt = (f"CALL groupml.train_groups('big', ARRAY['country'], {feats}, 'clicked', 'logistic', %s::jsonb, "
            f"'{{\"processes\": {processes}}}', RUN)")
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        thread, fired = cancel_when(dsn, pid, "SELECT groups_done >= 1 FROM groupml.runs WHERE source = 'public.big'")
        seen, stop = set(), threading.Event()
        spy = threading.Thread(target=lambda: [seen.update(_helpers_of(pid)) or time.sleep(0.01)
                                               for _ in iter(stop.is_set, True)])
        spy.start()
        with pytest.raises(psycopg.errors.QueryCanceled) as info:
            conn.execute(stmt.replace("RUN", "NULL"), [spec])
        stop.set()
        # the message names the run to resume (the CALL's INOUT run_id never comes back)
        run_no = db.execute("SELECT run_id FROM groupml.runs WHERE source = 'public.big'").fetchone()[0]
        assert info.value.diag.message_primary == (f"groupml: canceling statement due to user request; run {run_no} "
                                                   f"keeps the groups it committed")
        assert info.value.diag.message_hint == f"Call train_groups again with run_id => {run_no} to resume it."
        spy.join()
        thread.join()
        assert fired.is_set()
        assert len(seen) == (processes if processes > 1 else 0)   # the helpers really trained
        assert conn.execute("SELECT 1").fetchone() == (1,)      # the backend stays usable
        assert _helpers_of(pid) == []                            # no helper outlives the cancel
    run_id, status, done = db.execute("SELECT run_id, status, groups_done FROM groupml.runs "
                                      "WHERE source = 'public.big'").fetchone()
    assert status == "cancelled" and 1 <= done < 3
    stored = db.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s", [run_id]).fetchone()[0]
    assert stored == done  # every committed group is complete: model and counter together
    kept = db.execute("SELECT group_key, model_id FROM groupml.models WHERE run_id = %s", [run_id]).fetchall()
    assert db.execute(stmt.replace("RUN", str(run_id)), [spec]).fetchone()[0] == run_id
    assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s",
                      [run_id]).fetchone() == ("done", 3)
    for gkey, model_id in kept:  # committed groups were not trained again
        assert db.execute("SELECT model_id FROM groupml.models WHERE run_id = %s AND group_key = %s::jsonb",
                          [run_id, json.dumps(gkey)]).fetchone()[0] == model_id
    # the estimate and the measured training time cover every group, the cancelled call's too
    # (they were added when the run finished, so the first call's groups were lost)
    trained, trials = db.execute("SELECT r.train_seconds, (SELECT sum((t.metrics->>'seconds')::float8) FROM "
                                 "groupml.trials t WHERE t.run_id = r.run_id) FROM groupml.runs r WHERE "
                                 "r.run_id = %s", [run_id]).fetchone()
    assert trained == pytest.approx(trials, rel=0.05, abs=1e-3)


def test_a_killed_helper_process_ends_the_call_and_the_run_resumes(cluster, dsn, db):
    # multiprocessing.Pool replaced a killed helper but lost its group: the call waited for
    # ever, and once could not even be cancelled
    spec, feats = _three_slow_groups(db, "helped", 34)
    stmt = (f"CALL groupml.train_groups('helped', ARRAY['country'], {feats}, 'clicked', 'logistic', %s::jsonb, "
            f"'{{\"processes\": 2}}', RUN)")
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        killed = []

        def kill_a_busy_helper():
            deadline = time.time() + 60
            with psycopg.connect(dsn, autocommit=True) as watcher:
                while time.time() < deadline and not killed:
                    counted = watcher.execute("SELECT n_groups IS NOT NULL FROM groupml.runs "
                                              "WHERE source = 'public.helped'").fetchone()
                    helpers = _helpers_of(pid)
                    if counted and counted[0] and len(helpers) == 2:
                        time.sleep(0.2)              # both helpers hold a group now
                        os.kill(helpers[0], signal.SIGKILL)
                        killed.append(helpers[0])
                    time.sleep(0.01)

        thread = threading.Thread(target=kill_a_busy_helper)
        thread.start()
        t0 = time.time()
        with pytest.raises(psycopg.errors.SystemError) as info:
            conn.execute(stmt.replace("RUN", "NULL"), [spec])
        thread.join()
        assert killed and time.time() - t0 < 60
        assert info.value.diag.message_primary.startswith(
            f"groupml: A helper process of this backend (pid {killed[0]}) ended while it trained a group (killed by "
            f"signal 9;")
        assert "run_id" in info.value.diag.message_hint
        assert _helpers_of(pid) == []                  # the other helper is gone too
        assert conn.execute("SELECT 1").fetchone() == (1,)
    run_id, status = db.execute("SELECT run_id, status FROM groupml.runs WHERE source = 'public.helped'").fetchone()
    assert status == "failed"                          # and it resumes, as the hint says
    db.execute(stmt.replace("RUN", str(run_id)), [spec])
    assert db.execute("SELECT status, groups_done, n_groups, (SELECT count(*) FROM groupml.models m WHERE "
                      "m.run_id = r.run_id) FROM groupml.runs r WHERE run_id = %s", [run_id]).fetchone() == \
        ("done", 3, 3, 3)


def test_a_run_deleted_while_one_backend_trains_it_stops_the_call_cleanly(cluster, dsn, db):
    # the next group's insert met the foreign key: a raw 23503
    spec, feats = _three_slow_groups(db, "doomed", 35)
    deleted = threading.Event()

    def delete_after_first_group():
        with psycopg.connect(dsn, autocommit=True) as other:
            deadline = time.time() + 60
            while time.time() < deadline:
                if other.execute("DELETE FROM groupml.runs WHERE source = 'public.doomed' AND groups_done >= 1 "
                                 "RETURNING run_id").fetchall():
                    deleted.set()
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=delete_after_first_group)
    thread.start()
    state, msg, hint = sql_error(db, f"CALL groupml.train_groups('doomed', ARRAY['country'], {feats}, 'clicked', "
                                     f"'logistic', %s::jsonb, '{{\"processes\": 1}}')", [spec])
    thread.join()
    assert deleted.is_set()
    assert state == "42704" and msg.startswith("groupml: Run ") and msg.endswith(
        " was deleted while it was being trained; this call stops"), msg
    assert db.execute("SELECT count(*) FROM groupml.runs WHERE source = 'public.doomed'").fetchone()[0] == 0


def test_a_run_of_worker_backends_resumes_only_on_worker_backends(db, clicks):
    # resumed in one backend, it retrained every open group and left the executor's snapshot,
    # checkpoints and schedule rows behind, though the run said done
    resume = ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', "
              "'logistic', %s::jsonb, run_id => %s)")
    for extra, args in (("workers => 2, strategy => 'grouped'", "workers => 2"), ("workers => 1, strategy => 'gtp'",
                                                          "workers => 1, strategy => 'gtp'")):
        run_id = call(db, extra)
        db.execute("UPDATE groupml.runs SET status = 'running' WHERE run_id = %s", [run_id])   # as a cancel left it
        state, msg, hint = sql_error(db, resume, [GRID, run_id])
        assert (state, msg) == ("22023", f"groupml: Run {run_id} was trained by worker backends ({args}); it resumes "
                                         f"only on worker backends, where its snapshot and epoch checkpoints are")
        assert hint == (f"Call train_groups again with run_id => {run_id}, {args} (another worker count from 2, or "
                        f"a strategy with 1, resumes it too).")
        assert call(db, extra, f"run_id => {run_id}") == run_id
        assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
        # a finished one too: a one-backend call reads the live source and would add new groups
        assert sql_error(db, resume, [GRID, run_id])[:2] == (
            "22023", f"groupml: Run {run_id} was trained by worker backends ({args}); it is done, and a call in one "
                     f"backend would read the live source and add the groups that appeared since to a run the "
                     f"executor recorded")
    assert call(db, "workers => 3", f"run_id => {run_id}") == run_id
    # a one-backend run resumes either way
    one = call(db)
    assert call(db, "workers => 2", f"run_id => {one}") == one


def test_progress_shows_the_group_count_before_the_first_group_is_done(cluster, dsn, db):
    # n_groups was written with the first committed group, so a run cancelled during its
    # first (largest) group showed no count at all
    spec, feats = _three_slow_groups(db, "counted", 33)
    with psycopg.connect(dsn, autocommit=True) as conn:
        thread, fired = cancel_when(dsn, conn.info.backend_pid,
                                    "SELECT n_groups IS NOT NULL FROM groupml.runs WHERE source = 'public.counted'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(f"CALL groupml.train_groups('counted', ARRAY['country'], {feats}, 'clicked', 'logistic', "
                         f"%s::jsonb)", [spec])
        thread.join()
    assert fired.is_set()
    assert db.execute("SELECT status, n_groups, groups_done FROM groupml.progress WHERE source = 'public.counted'"
                      ).fetchone() == ("cancelled", 3, 0)


def test_a_view_function_raising_its_own_sqlstate_is_named_as_a_source_error(db):
    # a SQLSTATE without a PL/Python class of its own (plain plpy.SPIError, no 'sqlstate'
    # attribute) came raw: 'plpy.SPIError: boom' without our wording
    db.execute("""CREATE FUNCTION boom(v float8) RETURNS float8 LANGUAGE plpgsql STABLE AS $$
                  BEGIN IF v > 5 THEN RAISE EXCEPTION 'boom' USING ERRCODE = 'P0042', HINT = 'My own hint'; END IF;
                  RETURN v; END $$""")
    db.execute("CREATE TABLE boomsrc AS SELECT i % 2 AS g, (i % 7)::float8 AS f1, (i % 3 = 0)::int AS y "
               "FROM generate_series(1, 100) i")
    db.execute("CREATE VIEW vboom AS SELECT g, boom(f1) AS f1, y FROM boomsrc")
    state, msg, hint = sql_error(db, "CALL groupml.train_groups('vboom', ARRAY['g'], ARRAY['f1'], 'y', 'logistic')")
    assert (state, msg) == ("P0042", "groupml: train_groups could not read the rows of public.vboom: boom"), msg
    assert hint == "My own hint. Fix the source (or pass a view that selects valid rows), then call train_groups again."


def test_bad_input_writes_nothing(db, clicks):
    cases = [
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'nope'], 'clicked', 'logistic')",
         "42703", "groupml: Column 'nope' of train_groups features does not exist in public.clicks"),
        # a text feature is encoded by a transform, unless the options turn it off
        ("CALL groupml.train_groups('clicks', ARRAY[]::text[], ARRAY['f1', 'country'], 'clicked', 'logistic', '{}', "
         "'{\"transform\": false}')",
         "42804", "groupml: Column 'country' of train_groups features must be numeric or boolean; it is text"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'missing', 'logistic')",
         "42703", "groupml: Column 'missing' of train_groups label does not exist in public.clicks"),
        ("CALL groupml.train_groups('clicks', ARRAY['cntry'], ARRAY['f1'], 'clicked', 'logistic')",
         "42703", "groupml: Column 'cntry' of train_groups group_by does not exist in public.clicks"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'tree')",
         "42704", "groupml: Unknown model family 'tree'"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', "
         "'{\"l2\": [-1]}')", "22023", "groupml: The 'l2' value of model 'logistic' must be >= 0; got -1"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY[]::text[], 'clicked', 'logistic')",
         "22023", "groupml: The 'features' value of train_groups must name at least one column; got []"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', '{}', '{}', 999)",
         "42704", "groupml: The 'run_id' value of train_groups must name an existing run; got 999"),
        ("CALL groupml.train_groups('no_such_table', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic')",
         "42P01", 'relation "no_such_table" does not exist'),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY[['f1'], ['f2']], 'clicked', 'logistic')",
         "22023", "groupml: The 'features' value of train_groups must be a one-dimensional array of column names; "
                  "got a nested array"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'clicked'], 'clicked', 'logistic')",
         "22023", "groupml: The 'label' column 'clicked' of train_groups is also a feature"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', "
         "'{\"l2\": [{}]}')", "22023", "groupml: The 'l2[0]' value of search must be a non-empty object"),
        # group-by columns checked like the features (duplicates, the label, a feature were trained)
        ("CALL groupml.train_groups('clicks', ARRAY['country', 'country'], ARRAY['f1'], 'clicked', 'logistic')",
         "22023", "groupml: The 'group_by' value of train_groups must not repeat a column; got ['country', "
                  "'country']"),
        ("CALL groupml.train_groups('clicks', ARRAY['clicked'], ARRAY['f1'], 'clicked', 'logistic')",
         "22023", "groupml: The group-by column 'clicked' of train_groups is also the label or a feature"),
        ("CALL groupml.train_groups('clicks', ARRAY['f1'], ARRAY['f1', 'f2'], 'clicked', 'logistic')",
         "22023", "groupml: The group-by column 'f1' of train_groups is also the label or a feature"),
        # a regclass by number of a dropped relation (was PL/Python's raw UndefinedTable)
        ("CALL groupml.train_groups(99999999::oid::regclass, ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic')",
         "42P01", "groupml: The 'source' value of train_groups names no relation: '99999999' does not exist"),
        # NULL inside a name array: SQL's null, not Python's None
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY[NULL, 'f1'], 'clicked', 'logistic')",
         "22023", "groupml: The 'features' value of train_groups must name a column; got null"),
    ]
    for sql, state, message in cases:
        got_state, msg, hint = sql_error(db, sql)
        assert got_state == state, (sql, msg)
        assert msg.startswith(message), msg
        if state != "42P01" or msg.startswith("groupml: "):
            assert hint, sql
    assert db.execute("SELECT (SELECT count(*) FROM groupml.runs) + (SELECT count(*) FROM groupml.models) + "
                      "(SELECT count(*) FROM groupml.trials)").fetchone()[0] == 0


def test_a_source_the_caller_cannot_read(cluster, dbname, db, clicks):
    db.execute("CREATE ROLE analyst LOGIN")
    db.execute("GRANT USAGE ON SCHEMA groupml TO analyst")
    db.execute("GRANT ALL ON ALL TABLES IN SCHEMA groupml TO analyst")      # past the catalog check
    db.execute("GRANT USAGE ON ALL SEQUENCES IN SCHEMA groupml TO analyst")
    with psycopg.connect(cluster.dsn(dbname, user="analyst"), autocommit=True) as conn:
        state, msg, hint = sql_error(conn, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], "
                                           "'clicked', 'logistic')")
    db.execute("DROP OWNED BY analyst")
    db.execute("DROP ROLE analyst")
    assert state == "42501"
    assert msg == "groupml: permission denied for table public.clicks: train_groups needs SELECT on it"
    assert hint == "GRANT SELECT ON public.clicks TO the calling role."


def test_a_role_without_catalog_rights_is_told_before_anything_is_written(cluster, dbname, db, clicks):
    # the catalog has no grants to PUBLIC; such a role gets one 42501 naming what it needs
    # before anything is written, not PostgreSQL's "permission denied for table runs" mid-call
    db.execute("CREATE ROLE outsider LOGIN")
    db.execute("GRANT SELECT ON clicks TO outsider")
    cases = [
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic')",
         "groupml: permission denied for table groupml.runs: train_groups needs SELECT on it (it writes groupml's "
         "catalog)", "GRANT SELECT, INSERT, UPDATE ON groupml.runs TO outsider; GRANT SELECT, INSERT ON "
                     "groupml.models TO outsider; GRANT INSERT ON groupml.trials TO outsider; GRANT INSERT ON "
                     "groupml.cost_runs TO outsider"),
        ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', workers => 2)",
         "groupml: permission denied for table groupml.runs: train_groups with workers or a strategy needs SELECT "
         "on it (it writes groupml's catalog)", "GRANT SELECT ON groupml.worker_endpoints TO outsider"),
        ("SELECT groupml.drop_snapshot(1)",
         "groupml: permission denied for table groupml.snapshots: drop_snapshot needs SELECT on it (it writes "
         "groupml's catalog)", "GRANT SELECT, DELETE ON groupml.snapshots TO outsider; GRANT SELECT ON "
                               "groupml.grouped_runs TO outsider;"),
        ("SELECT * FROM groupml.calibrate_cost_model()",
         "groupml: permission denied for table groupml.cost_runs: calibrate_cost_model needs INSERT on it (it "
         "writes groupml's catalog)", "GRANT INSERT ON groupml.cost_runs TO outsider"),
    ]
    try:
        with psycopg.connect(cluster.dsn(dbname, user="outsider"), autocommit=True) as conn:
            for stmt, msg, grants in cases:
                state, got, hint = sql_error(conn, stmt)
                assert (state, got) == ("42501", msg), stmt
                assert hint.startswith("Run it as the extension's owner, or have an administrator grant the calling "
                                       "role what it needs: GRANT ") and grants in hint, hint
            # planning data is shared read-only: nobody else may add (or pre-claim) cost runs
            state, got, _ = sql_error(conn, "INSERT INTO groupml.cost_runs (n, d, k, passes, seconds, source) "
                                            "VALUES (1000, 2, 1, 1, 0.001, 'x')")
            assert (state, got) == ("42501", "permission denied for table cost_runs")
        assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0
        for bad in ("'NaN'", "'Infinity'"):     # NaN > 0 holds in PostgreSQL: the CHECK excludes both
            state, _, _ = sql_error(db, f"INSERT INTO groupml.cost_runs (n, d, k, passes, seconds, source) "
                                        f"VALUES (1000, 2, 1, 1, {bad}, 'x')")
            assert state == "23514", bad
    finally:
        db.execute("DROP OWNED BY outsider")
        db.execute("DROP ROLE outsider")


def test_the_grants_the_hint_lists_are_enough(cluster, dbname, db, clicks):
    # the executor's hint left out SELECT on run_epochs (a DELETE with a WHERE needs it): a role
    # granted exactly what it listed failed mid-run with PL/Python's raw 42501 and a failed run
    import re
    db.execute("CREATE ROLE granted LOGIN")
    db.execute("GRANT SELECT ON clicks TO granted")
    calls = ["CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', "
             "'{\"l2\": [0]}')",
             # dp and checkpoints at every block: the upsert of run_checkpoints needs UPDATE too
             "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic', "
             "'{\"l2\": [0], \"max_iter\": 300, \"tol\": 1e-300, \"epoch_iters\": 1}', "
             "'{\"checkpoint_every_s\": 0, \"whole_group_tasks\": false}', workers => 2, strategy => 'dp')"]
    try:
        with psycopg.connect(cluster.dsn(dbname, user="granted"), autocommit=True) as conn:
            for call in calls:
                state, _, hint = sql_error(conn, call)
                assert state == "42501", (call, state)
                # the hint's statements, pasted as they are, are all the role needs
                grants = re.search(r"grant the calling role what it needs: (GRANT .*;)$", hint)
                assert grants and grants.group(1).endswith(
                    "groupml.best_models, groupml.progress, groupml.run_trial_info TO granted;"), hint
                db.execute(grants.group(1))
                conn.execute(call)
            assert conn.execute("SELECT count(*) FROM groupml.best_models").fetchone()[0] == 2 * 4    # groups
            assert conn.execute("SELECT count(*) FROM groupml.run_trial_info").fetchone()[0] == 2 * 4
            assert conn.execute("SELECT count(*) FROM groupml.progress").fetchone()[0] == 2
            # the role's connection limit: its workers failed to connect after the run existed,
            # with a hint about pg_hba.conf
            db.execute("ALTER ROLE granted CONNECTION LIMIT 2")
            state, msg, hint = sql_error(conn, calls[1])
            assert state == "53300" and msg.endswith("connections free for loopback workers (the CONNECTION LIMIT 2 "
                                                     "of role granted, 1 in use); got 2"), msg
            assert hint.endswith("raise the role's limit (ALTER ROLE ... CONNECTION LIMIT).")
            # one worker (a strategy, or workers => 0 choosing 1) was not checked at all
            db.execute("ALTER ROLE granted CONNECTION LIMIT 1")
            for one in (calls[1].replace("workers => 2", "workers => 1"), calls[1].replace("workers => 2",
                                                                                          "workers => 0")):
                state, msg, _ = sql_error(conn, one)
                assert state == "53300" and "(the CONNECTION LIMIT 1 of role granted, 1 in use)" in msg, msg
        assert [r[0] for r in db.execute("SELECT status FROM groupml.runs ORDER BY run_id")] == ["done", "done"]
    finally:
        db.execute("DROP OWNED BY granted")
        db.execute("DROP ROLE granted")


def test_sources_that_are_not_tables_or_cannot_be_read(cluster, dbname, db, clicks):
    # an index or a sequence went on to PostgreSQL's raw error (a traceback, the run left
    # 'running'); a view whose owner lost its grant was reported as a group-by type problem;
    # a view failing on its rows left the run 'running' for good
    db.execute("CREATE INDEX clicks_f1 ON clicks (f1)")
    db.execute("CREATE SEQUENCE some_seq")
    for rel, what in (("clicks_f1", "an index"), ("some_seq", "a sequence")):
        for stmt in (f"CALL groupml.train_groups('{rel}', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic')",
                     f"SELECT * FROM groupml.explain_search('{rel}', ARRAY['f1'], 'clicked', 'logistic', '{{}}')"):
            state, msg, hint = sql_error(db, stmt)
            assert state == "42809" and msg.endswith(f"must be a table, view, materialized view or foreign table; "
                                                     f"it is {what}"), (stmt, msg)
            assert f"The source public.{rel} of " in msg and hint
    db.execute("CREATE ROLE viewowner LOGIN")
    try:
        db.execute("GRANT SELECT ON clicks TO viewowner")
        db.execute("GRANT CREATE ON SCHEMA public TO viewowner")
        with psycopg.connect(cluster.dsn(dbname, user="viewowner"), autocommit=True) as v:
            v.execute("CREATE VIEW vsec AS SELECT * FROM clicks")
            v.execute("GRANT SELECT ON vsec TO PUBLIC")
        db.execute("REVOKE SELECT ON clicks FROM viewowner")
        state, msg, hint = sql_error(db, "CALL groupml.train_groups('vsec', ARRAY['country'], ARRAY['f1'], "
                                         "'clicked', 'logistic')")
        assert (state, msg) == ("42501", "groupml: train_groups could not read public.vsec: permission denied for "
                                         "table clicks")
    finally:
        db.execute("DROP VIEW IF EXISTS vsec")
        db.execute("DROP OWNED BY viewowner")
        db.execute("DROP ROLE viewowner")
    state, msg, _ = sql_error(db, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f1'], "
                                  "'clicked', 'logistic')")            # as submit_job already refused
    assert (state, msg) == ("22023", "groupml: The 'features' value of train_groups must not repeat a column; "
                                     "got ['f1', 'f1']")
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0
    db.execute("CREATE VIEW boom AS SELECT country, f1, clicked, 1 / (f1 - f1)::int AS z FROM clicks")
    state, _, _ = sql_error(db, "CALL groupml.train_groups('boom', ARRAY['country'], ARRAY['f1', 'z'], 'clicked', "
                                "'logistic')")
    assert state == "22012"
    assert db.execute("SELECT status FROM groupml.runs").fetchall() == [("failed",)]


def test_helper_processes_give_the_same_catalog_as_the_backend_alone(db, clicks):
    # slots pinned: without them the batch size k comes from the cost model, which the first
    # run calibrates with its measured times -- under load the second run may batch the
    # configurations differently (same to 1e-6, not bit for bit; CI saw it once)
    pinned = json.dumps(dict(json.loads(GRID), slots=2))
    runs = []
    for processes in (1, 3):
        runs.append(db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], "
                               "'clicked', 'logistic', %s::jsonb, %s::jsonb)",
                               [pinned, json.dumps({"processes": processes})]).fetchone()[0])
    a, b = (dict((k, (p, s, m)) for k, p, s, m in db.execute(
        "SELECT group_key::text, (fit).params, (fit).score, md5((fit).model) FROM groupml.models WHERE run_id = %s",
        [r]).fetchall()) for r in runs)
    assert a == b and len(a) == 4            # same parameters, scores and model bytes


def test_rows_wider_than_a_function_takes_arguments_load_as_arrays(db):
    # up to 98 features a row's values are separate arguments of the load aggregate; a function
    # takes at most 100, so wider rows are packed from an array -- both load the same rows
    cols = ", ".join(f"x{j} float8" for j in range(99))
    db.execute(f"CREATE TABLE wide (g int, y int, {cols})")
    values = ", ".join(f"sin(i * {j + 1})" for j in range(99))
    db.execute(f"INSERT INTO wide SELECT i % 2, (sin(i * 1) + sin(i * 2) > 0)::int, {values} "
               "FROM generate_series(1, 400) i")
    feats = [f"x{j}" for j in range(99)]
    runs = [db.execute("CALL groupml.train_groups('wide', ARRAY['g'], %s, 'y', 'logistic', '{\"l2\": [1]}')",
                       [f]).fetchone()[0] for f in (feats, feats[:98])]
    for run, d in zip(runs, (99, 98)):
        got = db.execute("SELECT (fit).status, (fit).n_train + (fit).n_validation, (fit).n_features "
                         "FROM groupml.models WHERE run_id = %s", [run]).fetchall()
        assert got == [("ok", 200, d)] * 2


def test_the_load_arena_is_closed_after_a_call_and_after_a_failed_one(db, clicks):
    # the groups' rows reach the helpers through a memory file; the backend keeps no descriptor
    # of it once the call ends, whether the groups trained or the call failed
    db.execute("CREATE FUNCTION arena_fds() RETURNS int LANGUAGE plpython3u AS $$\n"
               "import os\n"
               "links = [os.readlink('/proc/self/fd/' + f) for f in os.listdir('/proc/self/fd')\n"
               "         if os.path.islink('/proc/self/fd/' + f)]\n"
               "return sum('groupml load' in link for link in links)\n$$")
    for processes in (1, 2):
        db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', "
                   "'logistic', %s::jsonb, %s::jsonb)", [GRID, json.dumps({"processes": processes})])
        assert db.execute("SELECT arena_fds()").fetchone()[0] == 0
    # a group key the catalog cannot index is refused after the load
    db.execute("UPDATE clicks SET country = (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 100) i) "
               "WHERE country = (SELECT min(country) FROM clicks)")
    with pytest.raises(psycopg.errors.ProgramLimitExceeded):
        db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2'], 'clicked', "
                   "'logistic', %s::jsonb, '{\"processes\": 2}'::jsonb)", [GRID])
    assert db.execute("SELECT arena_fds()").fetchone()[0] == 0


@pytest.mark.parametrize("options, workers, message, hint_part", [
    ('{"processes": 0}', 1, "groupml: The 'processes' value of train_groups options must be >= 1; got 0",
     "helper processes"),
    ('{"processes": 5}', 1, "groupml: The 'processes' value of train_groups options must be <= 4; got 5",
     "helper processes"),
    ('{"threads": 2}', 1, "groupml: train_groups options take 'processes', not 'threads'",
     "learn_over_groups"),
    ('{"processes": 2}', 2, "groupml: The 'processes' option of train_groups applies to workers => 1 and "
                            "strategy 'auto'; got workers => 2, strategy 'auto'", "Worker backends"),
    # train_groups' own options named, not learn_over_groups'
    ('{"keep_snapshot": true}', 1, "groupml: The 'keep_snapshot' option of train_groups applies to runs on worker "
                                   "backends; got it with workers => 1 and strategy 'auto'", "workers => 2"),
    ('{"foo": 1}', 1, "groupml: Unknown key 'foo' in train_groups options; allowed keys are metric, processes, "
                      "progress, seed, validation_fraction", "help('train_groups')"),
    ('{"validation_fraction": 2}', 2, "groupml: The 'validation_fraction' value of train_groups options must be "
                                      "< 1; got 2", "fraction"),
    # with workers 'threads' pointed to 'processes', which is then refused, and the unknown-key
    # list named 'processes' as allowed
    ('{"threads": 2}', 2, "groupml: train_groups options take no 'threads': 'threads' is learn_over_groups' option",
     "drop 'threads'"),
    ('{"foo": 1}', 2, "groupml: Unknown key 'foo' in train_groups options; allowed keys are block_rows, "
                      "checkpoint_every_s, drivers, flexible_hops, keep_snapshot, lock_timeout_ms, metric, "
                      "network_timeout_s, placement, progress, replicas, seed, snapshot, validation_fraction, "
                      "whole_group_max_work, whole_group_tasks, worker_memory_mb", "help('train_groups')"),
])
def test_bad_processes_option(db, clicks, options, workers, message, hint_part):
    state, msg, hint = sql_error(db, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], "
                                     f"'clicked', 'logistic', '{{}}', '{options}', workers => {workers})")
    assert (state, msg) == ("22023", message)
    assert hint_part in hint
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_a_data_error_while_training_fails_the_run_and_leaves_no_snapshot(db, workers):
    # labels a logistic model cannot use are only seen once the run's row is committed: the run
    # is marked failed (it stayed 'running' in groupml.progress), and its snapshot is dropped
    db.execute("CREATE TABLE badlabels AS SELECT i % 3 AS grp, (i % 5)::float8 AS f1, (i % 4)::float8 AS y "
               "FROM generate_series(1, 300) i")
    st, msg, hint = sql_error(db, "CALL groupml.train_groups('badlabels', ARRAY['grp'], ARRAY['f1'], 'y', "
                                  "'logistic', workers => %s)", [workers])
    assert st == "22000" and msg.startswith("groupml: ") and hint, msg
    assert db.execute("SELECT status FROM groupml.runs").fetchall() == [("failed",)]
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM groupml.progress WHERE status = 'running'").fetchone()[0] == 0


def test_procedures_that_commit_say_so_inside_a_transaction_block(dsn, db, clicks):
    # a clear 2D000 with a hint, not PL/Python's raw "spiexceptions.InvalidTransactionTermination"
    for stmt in ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', 'logistic')",
                 "CALL groupml.run_scheduler(max_steps => 1)"):
        with psycopg.connect(dsn) as conn:                    # not autocommit: the CALL runs inside BEGIN
            state, msg, hint = sql_error(conn, stmt)
        assert (state, msg) == ("2D000", "groupml: This procedure commits as it goes (so a crash or cancel resumes, "
                                         "not restarts); it cannot run inside a transaction block"), stmt
        assert hint.startswith("CALL it on its own, not between BEGIN and COMMIT")
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0


def test_more_loopback_workers_than_free_connections_are_refused_before_the_run(db, clicks):
    # each worker failed to connect ('too many clients') after the run existed: XX000, a failed run
    max_conn = int(db.execute("SHOW max_connections").fetchone()[0])
    state, msg, hint = sql_error(db, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', "
                                     "'logistic', workers => %s)", [max_conn + 4])
    assert state == "53300" and msg.startswith("groupml: The 'workers' value of train_groups must be <= the "), msg
    # the reserved slots are left free for a superuser's workers too (taken, nobody could log in to cancel)
    assert msg.endswith(f"; got {max_conn + 4}") and f"(max_connections {max_conn} less 3 reserved for superusers, " \
        in msg, msg
    assert "raise max_connections" in hint
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0


def test_a_group_by_column_that_cannot_be_sorted_is_refused_with_its_type(db):
    db.execute("CREATE TABLE pointk AS SELECT point(i % 2, 0) AS g, (i % 7)::float8 AS x1, i % 2 = 0 AS y "
               "FROM generate_series(1, 50) i")
    for stmt in ("CALL groupml.train_groups('pointk', ARRAY['g'], ARRAY['x1'], 'y', 'logistic')",
                 "CALL groupml.train_groups('pointk', ARRAY['g'], ARRAY['x1'], 'y', 'logistic', workers => 2)",
                 "SELECT * FROM groupml.explain_train_groups('pointk', ARRAY['g'], ARRAY['x1'], 'y', 'logistic')",
                 "SELECT * FROM groupml.explain_search('pointk', ARRAY['x1'], 'y', 'logistic', '{}', "
                 "group_by => ARRAY['g'])"):
        state, msg, hint = sql_error(db, stmt)
        assert state == "42883" and msg.startswith("groupml: Column 'g' of ") and \
            msg.endswith(" group_by must have a type that can be grouped and sorted; it is point"), (stmt, msg)
        assert hint == "Group by a cast of it, e.g. a view with (col)::text."
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0


@pytest.mark.parametrize("strategy", ["gtp", "dp"])
def test_a_data_error_in_a_worker_keeps_its_sqlstate_and_leaves_no_snapshot(db, strategy):
    # features an MLP cannot train on are only seen by the worker that trains the group: its
    # error keeps its own SQLSTATE (not XX000 "worker failed" with a hint to resume, which would
    # fail the same way every time), and the run keeps no snapshot
    db.execute("CREATE TABLE hugef AS SELECT i % 2 AS g, (i % 5) * 1e299 AS x1, (i % 3)::float8 AS x2, "
               "i % 2 = (i / 2) % 2 AS y FROM generate_series(1, 200) i")
    state, msg, hint = sql_error(db, "CALL groupml.train_groups('hugef', ARRAY['g'], ARRAY['x1', 'x2'], 'y', 'mlp', "
                                     "'{\"epochs\": [1]}', workers => 2, strategy => %s)", [strategy])
    assert state == "22000", (state, msg)
    assert msg.startswith("groupml: worker ") and "The features of an MLP must lie within +-1e+30" in msg, msg
    assert hint and "run_id" not in hint
    assert db.execute("SELECT status FROM groupml.runs").fetchall() == [("failed",)]
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0


def test_a_worker_that_gives_up_on_a_lock_names_lock_timeout_ms(dsn, db):
    # the parallel snapshot build's workers insert the blocks; a session holding the blocks
    # table in SHARE mode makes them wait, and after lock_timeout_ms they give up. That used
    # to end as XX000 "worker ... failed: canceling statement due to lock timeout", naming
    # neither the option nor the session in the way
    db.execute("CREATE TABLE locky AS SELECT i % 2 AS g, (i % 7)::float8 AS x1, i % 3 = 0 AS y "
               "FROM generate_series(1, 400) i")
    with psycopg.connect(dsn) as locker:
        locker.execute("LOCK TABLE groupml.snapshot_blocks IN SHARE MODE")
        state, msg, hint = sql_error(db, "CALL groupml.train_groups('locky', ARRAY['g'], ARRAY['x1'], 'y', 'logistic', "
                                         "'{}', '{\"lock_timeout_ms\": 300}', workers => 2)")
        locker.rollback()
    assert state == "55P03", (state, msg)
    assert "waited longer than its lock timeout (option lock_timeout_ms = 300) for a lock held by another " \
           "transaction: canceling statement due to lock timeout" in msg, msg
    assert msg.startswith("groupml: run ") and " stopped while building its snapshot: worker " in msg, msg
    assert hint.startswith("Raise the lock_timeout_ms option of train_groups, or end the transaction holding the "
                           "lock (pg_locks, pg_stat_activity). Call train_groups again with run_id => "), hint
    assert db.execute("SELECT status, finished_at IS NOT NULL FROM groupml.runs").fetchall() == [("failed", True)]
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
    run_id = db.execute("SELECT run_id FROM groupml.runs").fetchone()[0]
    db.execute("CALL groupml.train_groups('locky', ARRAY['g'], ARRAY['x1'], 'y', 'logistic', '{}', "
               "'{\"lock_timeout_ms\": 300}', %s, workers => 2)", [run_id])
    assert db.execute("SELECT status FROM groupml.runs").fetchall() == [("done",)]
    assert db.execute("SELECT count(*) FROM groupml.models").fetchone()[0] == 2


def _waiting_on_a_lock(db, pid):
    return db.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]


def test_a_run_in_use_is_named_by_its_holder_in_this_database(cluster, dsn, db, clicks):
    # advisory locks are per database: a session of another database holding the same run id
    # is not named, and the hint does not tell the user to cancel it
    from groupml.udf.train import RUN_LOCK_CLASS, _run_lock_keys

    assert RUN_LOCK_CLASS == 1735224434                   # the class groupml.progress looks for
    run_id = db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', "
                        "'logistic')").fetchone()[0]
    keys = list(_run_lock_keys(run_id))
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as elsewhere, \
            psycopg.connect(dsn, autocommit=True) as here:
        elsewhere.execute("SELECT pg_advisory_lock(%s, %s)", keys)
        here.execute("SELECT pg_advisory_lock(%s, %s)", keys)
        state, msg, hint = sql_error(db, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], "
                                         "'clicked', 'logistic', '{}', '{}', %s)", [run_id])
        assert (state, msg) == ("55006", f"groupml: Run {run_id} is being trained by another session "
                                         f"(pid {here.info.backend_pid}); a run is trained by one call at a time")
        assert str(elsewhere.info.backend_pid) not in hint
        # groupml.progress says who trains a run now (a 'running' run nobody holds was interrupted)
        assert db.execute("SELECT trained_by FROM groupml.progress WHERE run_id = %s",
                          [run_id]).fetchone()[0] == here.info.backend_pid
        here.execute("SELECT pg_advisory_unlock(%s, %s)", keys)
        assert db.execute("SELECT trained_by FROM groupml.progress WHERE run_id = %s", [run_id]).fetchone()[0] is None


def test_a_run_is_trained_by_one_call_at_a_time(dsn, db, clicks):
    """Resuming a run while another session is still training it is refused (55006), names
    that session and changes nothing; the first call finishes as if alone. A call that ends by
    a cancel releases the run, so another session can resume it while the first stays open."""
    from groupml.udf.train import _run_lock_keys

    stmt = ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', 'logistic', "
            "%s::jsonb, '{}', RUN)")
    with psycopg.connect(dsn, autocommit=True) as first, psycopg.connect(dsn) as locker:
        pid = first.info.backend_pid
        locker.execute("LOCK TABLE groupml.models IN SHARE MODE")      # the first call stops at its first model
        out = {}
        thread = threading.Thread(target=lambda: out.update(run=first.execute(stmt.replace("RUN", "NULL"),
                                                                              [GRID]).fetchone()[0]))
        thread.start()
        deadline = time.time() + 60
        while not _waiting_on_a_lock(db, pid) and time.time() < deadline:
            time.sleep(0.02)
        assert _waiting_on_a_lock(db, pid)
        run_id = db.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
        before = db.execute("SELECT status, groups_done, started_at FROM groupml.runs WHERE run_id = %s",
                            [run_id]).fetchone()
        for workers in (1, 2):
            state, msg, hint = sql_error(db, stmt.replace("RUN", f"{run_id}, workers => {workers}"), [GRID])
            assert (state, msg) == ("55006", f"groupml: Run {run_id} is being trained by another session (pid {pid}); "
                                             f"a run is trained by one call at a time")
            assert hint == (f"Wait for that call to end, or stop it with SELECT pg_cancel_backend({pid}); then call "
                            f"train_groups with run_id => {run_id} again to resume.")
        assert db.execute("SELECT status, groups_done, started_at FROM groupml.runs WHERE run_id = %s",
                          [run_id]).fetchone() == before
        assert db.execute("SELECT count(*) FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0] == 0
        locker.rollback()                                               # the first call goes on, alone
        thread.join(120)
        assert out["run"] == run_id
        assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s",
                          [run_id]).fetchone() == ("done", 4)
        assert db.execute("SELECT count(*), count(DISTINCT group_key) FROM groupml.models WHERE run_id = %s",
                          [run_id]).fetchone() == (4, 4)
        # a cancelled call releases the run: another session resumes it while the first stays open
        db.execute("DELETE FROM groupml.models WHERE run_id = %s", [run_id])
        db.execute("DELETE FROM groupml.trials WHERE run_id = %s", [run_id])
        locker.execute("LOCK TABLE groupml.models IN SHARE MODE")
        thread, fired = cancel_when(dsn, pid, f"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = {pid}")
        with pytest.raises(psycopg.errors.QueryCanceled):
            first.execute(stmt.replace("RUN", str(run_id)), [GRID])
        thread.join()
        locker.rollback()
        cls, key = _run_lock_keys(run_id)
        held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s AND pid = %s"
        assert first.execute(held, [cls, key & 0xFFFFFFFF, pid]).fetchone()[0] == 0
        assert db.execute(stmt.replace("RUN", str(run_id)), [GRID]).fetchone()[0] == run_id
        assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s",
                          [run_id]).fetchone()[0] == "done"
        # a lock this session already holds on the run (a release that failed) is its own: the call
        # runs, and releases it
        mine = db.info.backend_pid
        db.execute("SELECT pg_advisory_lock(%s, %s)", [cls, key])
        assert db.execute(stmt.replace("RUN", str(run_id)), [GRID]).fetchone()[0] == run_id
        assert db.execute(held, [cls, key & 0xFFFFFFFF, mine]).fetchone()[0] == 0


def test_explain_train_groups_takes_the_options_the_run_takes(db, clicks):
    # it accepted 'threads' (which the run refuses), refused 'processes' (which the run takes)
    # and listed learn_over_groups' option keys
    explain = ("SELECT count(*) FROM groupml.explain_train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', "
               "'f3'], 'clicked', 'logistic', '{}', %s::jsonb, workers => %s)")
    train = ("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', 'logistic', "
             "'{}', %s::jsonb, workers => %s)")
    for options, workers in (('{"threads": 2}', 1), ('{"threads": 2}', 2), ('{"processes": 2}', 2),
                             ('{"nope": 1}', 1), ('{"nope": 1}', 2), ('{"block_rows": 9000}', 1)):
        got = sql_error(db, explain, [options, workers])
        assert got == sql_error(db, train, [options, workers]), (options, workers, got)
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0
    assert db.execute(explain, ['{"processes": 2}', 1]).fetchone()[0] >= 1


def test_explain_train_groups_shows_numeric_keys_as_written(db):
    # a numeric key beyond float64 went through Python floats: 'Infinity', invalid JSON (22P02)
    db.execute("CREATE TABLE bigkeys AS SELECT CASE WHEN i % 2 = 0 THEN 10::numeric ^ 400 ELSE 1.000000000000000000001 "
               "END AS k, (i % 7)::float8 AS f1, (i % 3 = 0)::int AS y FROM generate_series(1, 200) i")
    keys = db.execute("SELECT DISTINCT (s->'group'->'k')::text FROM groupml.explain_train_groups('bigkeys', "
                      "ARRAY['k'], ARRAY['f1'], 'y', 'logistic', workers => 2, strategy => 'grouped') e, "
                      "jsonb_array_elements(e.shards) s "
                      "WHERE e.chosen ORDER BY 1").fetchall()
    assert [k[0] for k in keys] == ["1.000000000000000000001", "1" + "0" * 400 + ".0000000000000000"], keys


def test_columns_of_domains_count_as_their_base_types(db):
    # a domain over numeric was refused as a feature ('it is public.dnum') by train_groups,
    # the explain functions and submit_job, while learn_over_groups took it
    db.execute("CREATE DOMAIN dnum0 AS numeric CHECK (VALUE > -1e6)")
    db.execute("CREATE DOMAIN dnum AS dnum0")            # a domain over a domain: its base at any depth
    db.execute("CREATE DOMAIN dint AS integer")
    db.execute("CREATE DOMAIN dtext AS text")
    db.execute("CREATE TABLE doms AS SELECT ('g' || (i % 3))::dtext AS g, (i % 7)::dnum AS f1, "
               "(i % 5)::float8 AS f2, (i % 3 = 0)::int::dint AS y FROM generate_series(1, 300) i")
    one = db.execute("CALL groupml.train_groups('doms', ARRAY['g'], ARRAY['f1', 'f2'], 'y', 'logistic')").fetchone()[0]
    two = db.execute("CALL groupml.train_groups('doms', ARRAY['g'], ARRAY['f1', 'f2'], 'y', 'logistic', "
                     "workers => 2)").fetchone()[0]
    got = "SELECT group_key::text, (fit).score FROM groupml.models WHERE run_id = %s ORDER BY 1"
    a, b = db.execute(got, [one]).fetchall(), db.execute(got, [two]).fetchall()
    assert [r[0] for r in a] == ['{"g": "g0"}', '{"g": "g1"}', '{"g": "g2"}'] == [r[0] for r in b]
    assert [r[1] for r in a] == pytest.approx([r[1] for r in b], abs=1e-9)
    assert db.execute("SELECT count(*) FROM groupml.explain_search('doms', ARRAY['f1', 'f2'], 'y', 'logistic', "
                      "'{}', ARRAY['g'])").fetchone()[0] >= 1


def test_postgresqls_own_errors_come_under_our_prefix(db, clicks):
    # a read-only transaction: 'spiexceptions.ReadOnlySqlTransaction: cannot execute INSERT ...'
    db.execute("SET default_transaction_read_only = on")
    try:
        state, msg, _ = sql_error(db, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', "
                                      "'logistic')")
    finally:
        db.execute("SET default_transaction_read_only = off")
    assert state == "25006" and msg.startswith("groupml: cannot execute INSERT in a read-only transaction"), msg


#: an option only worker backends take (its default value): strategy 'auto' then chooses among
#: the worker strategies, never one backend (tests/integration/test_backend_choice.py)
WORKERS_ONLY = '{"keep_snapshot": false}'


def test_workers_zero_lets_the_planner_choose_the_count(db, clicks):
    # the planner "chooses ... once workers exist, the worker count": the count was always
    # the caller's. Every count up to the server's CPUs (and free connections) is planned and
    # the fewest within 10% of the best estimate is taken
    import os
    import re
    rows = db.execute("SELECT chosen, worker, explanation FROM groupml.explain_train_groups('clicks', "
                      "ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', 'logistic', %s::jsonb, "
                      "options => %s::jsonb, workers => 0) WHERE chosen", [GRID, WORKERS_ONLY]).fetchall()
    m = re.match(r"workers => 0: the planner chose (\d+) worker\(s\) of up to (\d+) \(estimated makespan 1: ",
                 rows[0][2])
    assert m, rows[0][2]
    chosen, top = int(m.group(1)), int(m.group(2))
    assert 1 <= chosen <= top <= min(os.cpu_count(), 64) and len(rows) == chosen
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    run = db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', "
                     "'logistic', %s::jsonb, options => %s::jsonb, workers => 0)", [GRID, WORKERS_ONLY]).fetchone()[0]
    said = [n for n in notices if n.startswith("groupml: workers => 0: the planner chose")]
    assert len(said) == 1, notices
    got = int(re.search(r"chose (\d+) worker", said[0]).group(1))
    assert db.execute("SELECT workers FROM groupml.grouped_runs WHERE run_id = %s", [run]).fetchone()[0] == got
    assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s", [run]).fetchone() == \
        ("done", 4)
    # with workers the estimate is the planner's makespan of the training after the snapshot
    assert db.execute("SELECT estimated_seconds > 0 AND 0 < train_seconds AND train_seconds <= seconds FROM "
                      "groupml.runs WHERE run_id = %s", [run]).fetchone()[0]
    state, msg, _ = sql_error(db, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1'], 'clicked', "
                                  "'logistic', workers => -1)")
    assert (state, msg) == ("22023", "groupml: The 'workers' value of train_groups must be >= 0; got -1")


def test_rows_with_a_null_are_left_out_of_the_load_and_counted(db):
    # _pack_rows leaves a row with a NULL feature or label out of its group's block; the run
    # counts it as skipped. A table and a view over it (no row estimate: no helper processes)
    # load the same rows in the same order, so they train the same models
    data = grouped_classification(3000, 3, 3, seed=5)
    create_table(db, "loaded", data)
    db.execute("UPDATE loaded SET f2 = NULL WHERE ctid IN (SELECT ctid FROM loaded ORDER BY f1 LIMIT 7)")
    db.execute("UPDATE loaded SET clicked = NULL WHERE ctid IN (SELECT ctid FROM loaded ORDER BY f3 LIMIT 5)")
    db.execute("ANALYZE loaded")
    db.execute("CREATE VIEW loaded_view AS SELECT * FROM loaded")
    assert db.execute("SELECT reltuples > 0 FROM pg_class WHERE oid = 'loaded'::regclass").fetchone()[0]
    runs = [db.execute("CALL groupml.train_groups(%s, ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', "
                       "'logistic', %s::jsonb)", [src, GRID]).fetchone()[0] for src in ("loaded", "loaded_view")]
    got = [dict((k, v) for k, *v in db.execute(
        "SELECT group_key::text, (fit).n_train, (fit).n_validation, (fit).n_skipped, (fit).params, md5((fit).model) "
        "FROM groupml.models WHERE run_id = %s", [r]).fetchall()) for r in runs]
    assert got[0] == got[1] and len(got[0]) == 3
    assert sum(v[2] for v in got[0].values()) == 12
