"""The search engine's SQL surface: TPE / Hyperband / bandit end to end, trial_info,
explain_search, cost-model calibration in groupml.cost_runs, and spec ERRORs."""

import json

import numpy as np
import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification

from pg_helpers import sql_error

pytestmark = pytest.mark.integration

FEATS = "ARRAY[f1, f2, f3, f4]"
FEAT_NAMES = ["f1", "f2", "f3", "f4"]
TPE = {"method": "tpe", "n_trials": 8, "seed": 7, "epoch_iters": 5, "max_epochs": 6,
       "space": {"l2": {"loguniform": [1e-6, 1]}, "class_weight": {"choice": [None, "balanced"]}},
       "early_stopping": {"method": "bandit", "epsilon": 0.5, "partial_iters": 5}}
HYPERBAND = {"method": "hyperband", "max_epochs": 9, "eta": 3, "epoch_iters": 2, "seed": 3,
             "space": {"l2": {"loguniform": [1e-5, 10]}}}
TRIAL_COLS = ("trial_id", "params", "score", "epochs", "iterations", "status", "stop_reason", "epoch_losses",
              "passes", "seconds", "is_best")


@pytest.fixture
def clicks(db):
    data = grouped_classification(3000, 3, 4, seed=5, exponent=0.5)
    create_table(db, "clicks", data)
    return data


def _fits(db, spec, options=None):
    extra = ", %s::jsonb" if options is not None else ""
    args = (json.dumps(spec),) + ((json.dumps(options),) if options is not None else ())
    rows = db.execute(
        f"""CREATE TEMP TABLE m AS SELECT country, groupml.learn_over_groups({FEATS}, clicked, 'logistic',
            %s::jsonb{extra}) AS fit FROM clicks GROUP BY country""", args)
    del rows
    fits = {c: dict(status=s, params=p, score=sc, trials=t) for c, s, p, sc, t in db.execute(
        "SELECT country, (fit).status, (fit).params, (fit).score, (fit).trials FROM m")}
    info = {}
    for row in db.execute("SELECT country, t.* FROM m, groupml.trial_info(fit) t ORDER BY country, trial_id"):
        info.setdefault(row[0], []).append(dict(zip(TRIAL_COLS, row[1:])))
    return fits, info


def _check_trials(fits, info):
    for country, fit in fits.items():
        assert fit["status"] == "ok"
        rows = info[country]
        assert len(rows) == len(fit["trials"])
        best = [r for r in rows if r["is_best"]]
        assert len(best) == 1
        assert best[0]["params"] == fit["params"] and best[0]["score"] == pytest.approx(fit["score"])
        for r in rows:
            assert r["status"] in ("converged", "max_iter", "stalled", "diverged", "stopped", "failed")
            assert r["stop_reason"]
            assert len(r["epoch_losses"]) == r["epochs"] >= 1
            assert r["passes"] >= r["epochs"] and r["seconds"] >= 0
            assert r["iterations"] >= 1
            assert set(r["params"]) >= {"l2", "class_weight", "max_iter"}


def test_tpe_with_bandit_early_stopping_end_to_end(db, clicks):
    fits, info = _fits(db, TPE)
    assert len(fits) == 3
    _check_trials(fits, info)
    for rows in info.values():
        assert len(rows) == 8
        assert any(r["stop_reason"].startswith("bandit") for r in rows) or all(
            r["status"] in ("converged", "max_iter", "stalled") for r in rows)
    # deterministic under the seed
    db.execute("DROP TABLE m")
    again, _ = _fits(db, TPE)
    assert {c: (f["params"], f["score"]) for c, f in again.items()} == \
        {c: (f["params"], f["score"]) for c, f in fits.items()}


def test_bandit_stops_configs_early(db, clicks):
    spec = {"method": "grid", "space": {"l2": [1e-4, 1e-2, 10, 100, 1000]}, "epoch_iters": 2,
            "early_stopping": {"method": "bandit", "epsilon": 0.05, "partial_iters": 2}}
    fits, info = _fits(db, spec)
    _check_trials(fits, info)
    stopped = [r for rows in info.values() for r in rows if r["stop_reason"].startswith("bandit")]
    assert stopped, "heavily regularised configs must be eliminated by the bandit"
    for r in stopped:
        assert r["epochs"] < 50


def test_hyperband_end_to_end(db, clicks):
    fits, info = _fits(db, HYPERBAND)
    _check_trials(fits, info)
    for rows in info.values():
        # R = 9, eta = 3: brackets (9,1)(3,3)(1,9) | (5,3)(1,9) | (3,9): 9 + 5 + 3 first-rung trials,
        # at most 22 with retrained promotions (a promoted trial still in its slot keeps training)
        assert 17 <= len(rows) <= 22
        assert max(r["epochs"] for r in rows) <= 9
        assert any(r["stop_reason"].startswith("not promoted at rung 0") for r in rows)


def test_trial_info_of_null_and_failed_fits(db):
    assert db.execute("SELECT count(*) FROM groupml.trial_info(NULL::groupml.fit)").fetchone()[0] == 0
    row = db.execute("SELECT count(*) FROM groupml.trial_info(ROW('no_rows', 'logistic', NULL, NULL, NULL, NULL, "
                     "0, 0, 3, NULL, NULL, 'x', NULL)::groupml.fit)").fetchone()
    assert row[0] == 0
    # a fit built by hand with malformed trials: a clear 22023, not a Python TypeError
    # (messages in JSON's words: they named Python's str and dict; '{}' was taken for no trials;
    # values beyond bigint or float8 failed in PL/Python's return conversion without a hint)
    for trials, why in (('[1, 2]', "trial 0 is not an object"), ('"x"', "expected a JSON array; got a string"),
                        ('{"trials": []}', "expected a JSON array; got an object"),
                        ('{}', "expected a JSON array; got an object"),
                        ('[{"score": "x"}]', "'score' of trial 0 must be an integer or a number; got '\"x\"'"),
                        ('[{"score": 1e309}]', "'score' of trial 0 must be a finite float8; got 1e+309"),
                        ('[{"trial_id": 3000000000}]', "'trial_id' of trial 0 must fit in an integer; got 3000000000"),
                        ('[{"passes": 9223372036854775808}]', "'passes' of trial 0 must fit in a bigint; got "
                                                              "9223372036854775808")):
        st, msg, hint = sql_error(db, "SELECT * FROM groupml.trial_info(ROW('ok', 'logistic', '{}', 'accuracy', 1, "
                                      "'{}', 1, 1, 0, 3, %s::jsonb, '', NULL)::groupml.fit)", [trials])
        assert (st, msg) == ("22023", f"groupml: The 'fit' value of trial_info has malformed trials: {why}"), msg
        assert "learn_over_groups" in hint


def test_run_trial_info_view_after_train_groups(db, clicks):
    db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1','f2','f3','f4'], 'clicked', "
               "'logistic', %s::jsonb)", (json.dumps({"l2": [1e-4, 0.1, 10]}),))
    rows = db.execute("SELECT group_key, trial_id, params, score, epochs, status, stop_reason, is_best "
                      "FROM groupml.run_trial_info ORDER BY group_key::text, trial_id").fetchall()
    assert len(rows) == 9
    by_group = {}
    for g, *rest in rows:
        by_group.setdefault(json.dumps(g, sort_keys=True), []).append(rest)
    assert len(by_group) == 3
    best = db.execute("SELECT group_key, (fit).params, (fit).score FROM groupml.models").fetchall()
    for g, params, score in best:
        trials = by_group[json.dumps(g, sort_keys=True)]
        chosen = [t for t in trials if t[-1]]
        assert len(chosen) == 1 and chosen[0][1] == params and chosen[0][2] == pytest.approx(score)
        assert all(t[3] >= 1 for t in trials)
    # the same columns as trial_info(fit): iterations was missing from the view
    cols = [r[0] for r in db.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'groupml.run_trial_info'"
                                     "::regclass AND attnum > 0 ORDER BY attnum")]
    fn = [r[0] for r in db.execute("SELECT unnest(proargnames[2:]) FROM pg_proc WHERE proname = 'trial_info'")]
    assert cols == ["run_id", "group_key"] + fn, (cols, fn)
    assert db.execute("SELECT count(*) FROM groupml.run_trial_info WHERE iterations >= 1").fetchone()[0] == 9


# ---------------------------------------------------------------- cost model calibration
def test_calibrate_cost_model_stores_runs_and_refits(db):
    rows = db.execute("""SELECT n, d, k, measured_passes, seconds_per_pass, estimated_seconds_per_pass
                         FROM groupml.calibrate_cost_model(%s::jsonb, 'logistic', 3)""",
                      (json.dumps([{"n": 2000, "d": 5, "k": 1}, {"n": 2000, "d": 5, "k": 6},
                                   {"n": 8000, "d": 20, "k": 1}, {"n": 8000, "d": 20, "k": 6}]),)).fetchall()
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [(2000, 5, 1, 3), (2000, 5, 6, 3), (8000, 20, 1, 3),
                                                       (8000, 20, 6, 3)]
    assert all(r[4] > 0 and r[5] > 0 for r in rows)
    stored = db.execute("SELECT n, d, k, workers, passes, seconds > 0, family, source FROM groupml.cost_runs "
                        "ORDER BY run_id").fetchall()
    assert stored == [(2000, 5, 1, 1, 3, True, "logistic", "calibrate_cost_model"),
                      (2000, 5, 6, 1, 3, True, "logistic", "calibrate_cost_model"),
                      (8000, 20, 1, 1, 3, True, "logistic", "calibrate_cost_model"),
                      (8000, 20, 6, 1, 3, True, "logistic", "calibrate_cost_model")]
    # explain_search now uses the calibrated model
    db.execute("CREATE TABLE t AS SELECT g, random() AS a, random() AS b, (random() < 0.5) AS y "
               "FROM generate_series(1, 500) i, (VALUES (1), (2)) v(g)")
    plan = dict((i, (v, dt)) for i, v, dt in db.execute(
        "SELECT * FROM groupml.explain_search('t', ARRAY['a','b'], 'y', 'logistic', '{\"l2\": [0, 1]}', ARRAY['g'])"))
    assert plan["cost_model"][0] == "calibrated"
    assert "4 newest runs" in plan["cost_model"][1]


def test_calibrate_cost_model_rejects_bad_sizes(db):
    state, msg, hint = sql_error(db, "SELECT * FROM groupml.calibrate_cost_model('[]')")
    assert state == "22023"
    assert msg.startswith("groupml: The 'sizes' value of calibrate_cost_model must be a non-empty JSON array")
    state, msg, _ = sql_error(db, """SELECT * FROM groupml.calibrate_cost_model('[{"n": 100, "d": 0}]')""")
    assert msg == "groupml: The 'd' value of calibrate_cost_model sizes must be >= 1; got 0"
    # an unknown key's hint is about sizes (it pointed to help('search')); its message names the null model
    state, msg, hint = sql_error(db, """SELECT * FROM groupml.calibrate_cost_model('[{"n": 100, "d": 2, "x": 1}]')""")
    assert state == "22023" and hint == 'Each size is {"n": rows, "d": features, "k": configurations per pass}.'
    state, msg, _ = sql_error(db, "SELECT * FROM groupml.calibrate_cost_model(NULL, NULL)")
    assert msg == "groupml: The 'model' value of calibrate_cost_model must name a model family; got null", msg
    state, msg, _ = sql_error(db, "SELECT * FROM groupml.calibrate_cost_model(NULL, 'tree')")
    assert state == "42704" and "tree" in msg
    state, msg, _ = sql_error(db, "SELECT * FROM groupml.calibrate_cost_model(NULL, 'logistic', 0)")
    assert msg == "groupml: The 'passes' value of calibrate_cost_model must be >= 1; got 0"
    # n x k margins: 10 million rows x 1000 configurations was 80 GB of them
    state, msg, _ = sql_error(db, """SELECT * FROM groupml.calibrate_cost_model('[{"n": 10000000, "d": 5, "k": 1000}]')""")
    assert (state, msg) == ("22023", "groupml: A calibration size of calibrate_cost_model must have n*k <= 50000000 "
                                     "values; got n=10000000, k=1000")
    assert db.execute("SELECT count(*) FROM groupml.cost_runs").fetchone()[0] == 0
    # a long size notices a cancel after every pass (it was checked only between sizes)
    db.execute("SET statement_timeout = '1s'")
    try:
        with pytest.raises(psycopg.errors.QueryCanceled):
            db.execute("""SELECT * FROM groupml.calibrate_cost_model('[{"n": 2000000, "d": 20, "k": 20}]',
                          passes => 1000)""")
    finally:
        db.execute("SET statement_timeout = 0")
    assert db.execute("SELECT count(*) FROM groupml.cost_runs").fetchone()[0] == 0


# ---------------------------------------------------------------- explain_search
def _explain(db, spec, group_by="ARRAY['country']", options="'{}'"):
    rows = db.execute(f"SELECT item, value, detail FROM groupml.explain_search('clicks', %s, 'clicked', "
                      f"'logistic', %s::jsonb, {group_by}, {options}::jsonb)",
                      (FEAT_NAMES, json.dumps(spec))).fetchall()
    return {i: (v, d) for i, v, d in rows}


def test_explain_search_plan(db, clicks):
    plan = _explain(db, TPE)
    sizes = np.unique(clicks["grp"], return_counts=True)[1]
    assert plan["procedure"][0] == "tpe"
    assert plan["early_stopping"][0] == "bandit"
    assert plan["configurations"][0] == "8"
    assert plan["budget_epochs"][0] == "48"              # 8 configs x max_epochs 6
    assert plan["batch_size"][0] == "4" and plan["batch_size"][1]   # TPE: a quarter in flight, at least 4
    assert plan["groups"][0] == "3"
    assert plan["rows"][0] == str(int(sizes.sum()))
    assert plan["largest_group_rows"][0] == str(int(sizes.max()))
    assert plan["features"][0] == "4"
    assert plan["cost_model"][0] == "priors"
    total, largest = float(plan["estimated_seconds"][0]), float(plan["estimated_seconds_largest_group"][0])
    assert 0 < largest <= total
    # explain never trains nor records anything
    assert db.execute("SELECT count(*) FROM groupml.cost_runs").fetchone()[0] == 0
    # rows training skips (a NULL label) are not counted: the plan counted every row
    db.execute("UPDATE clicks SET clicked = NULL WHERE ctid IN (SELECT ctid FROM clicks LIMIT 100)")
    again = _explain(db, TPE)
    assert again["rows"][0] == str(int(sizes.sum()) - 100) and again["groups"][0] == "3"
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0


def test_explain_search_hyperband_slots_and_ungrouped(db, clicks):
    plan = _explain(db, dict(HYPERBAND, slots=4), group_by="'{}'")
    assert plan["configurations"][0] == "22"
    assert plan["budget_epochs"][0] == str(9 * 1 + 3 * 3 + 1 * 9 + 5 * 3 + 1 * 9 + 3 * 9)
    assert plan["batch_size"] == ("4", "slots = 4 given by the search spec")
    assert plan["groups"][0] == "1" and plan["rows"][0] == "3000"


def test_a_role_with_column_grants_reads_those_columns_only(cluster, dbname, db, clicks):
    # SELECT granted on the columns used is enough (no SELECT on the whole table needed);
    # a column outside the grant is named with its own 42501
    db.execute("CREATE ROLE colreader LOGIN")
    db.execute("GRANT SELECT (country, f1, f2, clicked) ON clicks TO colreader")
    try:
        with psycopg.connect(cluster.dsn(dbname, user="colreader"), autocommit=True) as conn:
            stmt = ("SELECT item, value FROM groupml.explain_search('clicks', {}, 'clicked', 'logistic', '{{}}', "
                    "ARRAY['country']) WHERE item IN ('groups', 'rows') ORDER BY item")
            got = conn.execute(stmt.format("ARRAY['f1', 'f2']")).fetchall()
            assert got == db.execute(stmt.format("ARRAY['f1', 'f2']")).fetchall() and len(got) == 2
            state, msg, hint = sql_error(conn, stmt.format("ARRAY['f1', 'f3']"))
            assert (state, msg, hint) == (
                "42501", "groupml: permission denied for column f3 of table public.clicks: explain_search needs "
                         "SELECT on the columns it reads", "GRANT SELECT (\"f3\") ON public.clicks TO the calling role.")
            state, msg, _ = sql_error(conn, "SELECT * FROM groupml.explain_train_groups('clicks', ARRAY['country'], "
                                            "ARRAY['f3', 'id'], 'clicked', 'logistic')")
            assert (state, msg) == ("42501", "groupml: permission denied for column f3 of table public.clicks: "
                                             "train_groups needs SELECT on the columns it reads")
    finally:
        db.execute("DROP OWNED BY colreader")
        db.execute("DROP ROLE colreader")


def test_explain_search_rejects_bad_columns(db, clicks):
    state, msg, hint = sql_error(db, "SELECT * FROM groupml.explain_search('clicks', ARRAY['f1', 'nope'], "
                                     "'clicked', 'logistic', '{}')")
    assert state == "42703"
    assert msg == "groupml: Column 'nope' of explain_search features does not exist in public.clicks"
    assert "Columns of public.clicks" in hint
    state, msg, _ = sql_error(db, "SELECT * FROM groupml.explain_search('clicks', ARRAY['f1'], 'clicked', "
                                  "'logistic', '{}', ARRAY['country', 'zz'])")
    assert msg == "groupml: Column 'zz' of explain_search group_by does not exist in public.clicks"
    state, msg, _ = sql_error(db, "SELECT * FROM groupml.explain_search('clicks', ARRAY['country'], 'clicked', "
                                  "'logistic', '{}')")
    assert state == "42804"
    state, msg, _ = sql_error(db, "SELECT * FROM groupml.explain_search('nosuch', ARRAY['f1'], 'clicked', "
                                  "'logistic', '{}')")
    assert state == "42P01"


BAD_SPECS = [
    ({"method": "bayes", "l2": [1]}, "groupml: The 'method' value of search must be one of 'grid', 'random', "
     "'tpe', 'successive_halving', 'hyperband', 'asha', 'pbt'; got 'bayes'"),
    ({"l3": [1]}, "groupml: Unknown parameter 'l3' in search; allowed parameters are batch_size, class_weight, "
     "fit_intercept, l1, l2, lr, max_iter, seed, solver, tol"),
    ({"method": "random", "space": {}}, "groupml: The 'space' value of search must be a non-empty object of "
     "parameter dimensions; got {}"),
    ({"l2": []}, "groupml: The 'l2' value of search must be a non-empty list; got []"),
    ({"method": "random", "space": {"l2": {"uniform": [1, 0]}}},
     "groupml: The 'l2' value of search must be a range [lo, hi] with lo <= hi for uniform; got [1, 0]"),
    ({"method": "random", "n_trials": -5, "space": {"l2": {"uniform": [0, 1]}}},
     "groupml: The 'n_trials' value of search must be > 0; got -5"),
    ({"method": "hyperband", "max_epochs": 0, "space": {"l2": {"uniform": [0, 1]}}},
     "groupml: The 'max_epochs' value of search must be >= 1; got 0"),
    ({"l2": [1], "early_stopping": {"method": "bandit", "epsilon": -1}},
     "groupml: The 'epsilon' value of search early_stopping must be >= 0; got -1"),
    ({"l2": [1], "early_stopping": {"method": "median"}},
     "groupml: The 'method' value of search early_stopping must be one of 'bandit'; got 'median'"),
    ({"l2": [1], "slots": 0}, "groupml: The 'slots' value of search must be >= 1; got 0"),
]


@pytest.mark.parametrize("spec,message", BAD_SPECS)
def test_bad_specs_are_errors_in_learn_over_groups_and_explain_search(db, clicks, spec, message):
    state, msg, hint = sql_error(db, f"SELECT groupml.learn_over_groups({FEATS}, clicked, 'logistic', %s::jsonb) "
                                     "FROM clicks GROUP BY country", (json.dumps(spec),))
    assert (state, msg) == ("22023", message)
    assert hint
    state2, msg2, hint2 = sql_error(db, "SELECT * FROM groupml.explain_search('clicks', %s, 'clicked', 'logistic', "
                                        "%s::jsonb, ARRAY['country'])", (FEAT_NAMES, json.dumps(spec)))
    assert (state2, msg2, hint2) == (state, msg, hint)


def test_help_topics_and_comments(db):
    for topic in ("explain_search", "trial_info", "run_trial_info", "calibrate_cost_model", "cost_runs"):
        text = db.execute("SELECT groupml.help(%s)", (topic,)).fetchone()[0]
        assert topic in text
    missing = db.execute("""
        SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'groupml' AND c.relname IN ('cost_runs', 'run_trial_info')
          AND obj_description(c.oid, 'pg_class') IS NULL
        UNION ALL
        SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'groupml' AND p.proname IN ('explain_search', 'trial_info', 'calibrate_cost_model')
          AND obj_description(p.oid, 'pg_proc') IS NULL""").fetchall()
    assert missing == []


def test_a_search_that_chooses_the_model_family(db):
    # TuPAQ's ChoiceP over families: a nested choice of model family; 'model' is a known
    # parameter of the search
    rng = np.random.default_rng(4)
    db.execute("CREATE TABLE inter (grp int, x1 float8, x2 float8, x3 float8, y boolean)")
    X = rng.normal(size=(4000, 3))
    rows = [(int(i % 2), *map(float, x), bool(x[0] * x[1] + 0.3 * x[2] > 0)) for i, x in enumerate(X)]
    with db.cursor() as cur:
        cur.executemany("INSERT INTO inter VALUES (%s, %s, %s, %s, %s)", rows)
    spec = json.dumps({"method": "random", "n_trials": 6, "seed": 5, "space": {"model": {"choice": [
        {"model": "logistic", "l2": {"loguniform": [1e-4, 1]}},
        {"model": "lightgbm", "num_leaves": {"int": [7, 31]}, "num_boost_round": [40]}]}}})
    db.execute("CREATE TABLE fam AS SELECT grp, groupml.learn_over_groups(ARRAY[x1, x2, x3], y, 'logistic', "
               "%s::jsonb) AS fit FROM inter GROUP BY grp", [spec])
    got = db.execute("SELECT grp, (fit).status, (fit).family, (fit).params->>'model', (fit).score FROM fam "
                     "ORDER BY grp").fetchall()
    assert [r[1:4] for r in got] == [("ok", "lightgbm", "lightgbm")] * 2 and all(r[4] > 0.85 for r in got), got
    families = db.execute("SELECT DISTINCT t.params->>'model' FROM fam, groupml.trial_info(fit) t "
                          "ORDER BY 1").fetchall()
    assert families == [("lightgbm",), ("logistic",)]
    # the fit predicts as the family it chose
    acc = db.execute("SELECT avg((groupml.predict(f.fit, ARRAY[x1, x2, x3]) = y::int::float8)::int) "
                     "FROM inter i JOIN fam f USING (grp)").fetchone()[0]
    assert acc > 0.85
    # the catalog-writing procedure takes the same spec in one backend; with workers it says so
    run = db.execute("CALL groupml.train_groups('inter', ARRAY['grp'], ARRAY['x1', 'x2', 'x3'], 'y', 'logistic', "
                     "%s::jsonb)", [spec]).fetchone()[0]
    assert db.execute("SELECT array_agg(DISTINCT (fit).family) FROM groupml.models WHERE run_id = %s",
                      [run]).fetchone()[0] == ["lightgbm"]
    state, msg, hint = sql_error(db, "CALL groupml.train_groups('inter', ARRAY['grp'], ARRAY['x1', 'x2', 'x3'], "
                                     "'y', 'logistic', %s::jsonb, workers => 2)", [spec])
    assert state == "0A000" and "chooses the model family" in msg and "workers => 1" in hint
    assert db.execute("SELECT count(*) FROM groupml.explain_search('inter', ARRAY['x1', 'x2', 'x3'], 'y', "
                      "'logistic', %s::jsonb, ARRAY['grp'])", [spec]).fetchone()[0] >= 1
