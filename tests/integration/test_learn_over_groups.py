"""learn_over_groups end to end on a real server."""

import json
import time

import numpy as np
import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification

from pg_helpers import sql_error

pytestmark = pytest.mark.integration

GRID = {"l2": [0.0001, 0.01, 1.0], "class_weight": [None, "balanced"]}
FEATS = "ARRAY[f1, f2, f3, f4]"


@pytest.fixture
def clicks(db):
    data = grouped_classification(6000, 4, 4, seed=3, exponent=0.8)
    create_table(db, "clicks", data)
    return data


def fits(db, sql, *params):
    cols = ("status", "family", "params", "metric", "score", "metrics", "n_train", "n_validation", "n_skipped",
            "n_features", "trials", "message", "model")
    out = {}
    for key, *vals in db.execute(sql, params).fetchall():
        out[key] = dict(zip(cols, vals))
    return out


def test_grid_per_group(db, clicks):
    res = fits(db, f"""SELECT country, (f).* FROM (SELECT country, groupml.learn_over_groups({FEATS}, clicked,
                   'logistic', %s::jsonb) AS f FROM clicks GROUP BY country) s""", json.dumps(GRID))
    sizes = dict(zip(*np.unique(clicks["grp"], return_counts=True)))
    assert set(res) == set(sizes)
    for country, fit in res.items():
        assert fit["status"] == "ok", fit["message"]
        assert fit["family"] == "logistic"
        assert fit["metric"] == "accuracy"
        assert fit["n_train"] + fit["n_validation"] == sizes[country]
        assert 0.12 < fit["n_validation"] / sizes[country] < 0.28  # default 20% holdout
        assert fit["n_skipped"] == 0 and fit["n_features"] == 4
        assert len(fit["trials"]) == 6
        best = max(t["score"] for t in fit["trials"])
        assert fit["score"] == pytest.approx(best)
        assert fit["params"]["l2"] in GRID["l2"] and fit["params"]["class_weight"] in GRID["class_weight"]
        assert 0.5 < fit["score"] <= 1.0
        assert set(fit["metrics"]) >= {"accuracy", "auc", "logloss"}
        assert bytes(fit["model"])[:4] != b"\x80\x04"  # not a pickle


def test_result_is_deterministic_and_independent_of_row_order(db, clicks):
    q = f"""SELECT country, (f).params, (f).score, (f).n_validation FROM (SELECT country,
            groupml.learn_over_groups({FEATS}, clicked, 'logistic', %s::jsonb) AS f FROM {{}} GROUP BY country) s
            ORDER BY country"""
    a = db.execute(q.format("clicks"), [json.dumps(GRID)]).fetchall()
    db.execute("CREATE TABLE clicks_rev AS SELECT * FROM clicks ORDER BY id DESC")
    b = db.execute(q.format("clicks_rev"), [json.dumps(GRID)]).fetchall()
    assert [r[:2] for r in a] == [r[:2] for r in b]
    for ra, rb in zip(a, b):
        assert ra[2] == pytest.approx(rb[2], abs=1e-12) and ra[3] == rb[3]


def test_null_and_nan_rows_are_skipped_and_counted(db):
    db.execute("CREATE TABLE t (g int, x1 float8, x2 float8, y float8)")
    db.execute("""INSERT INTO t SELECT 1, random(), random(), (i % 2) FROM generate_series(1, 200) i""")
    db.execute("INSERT INTO t VALUES (1, NULL, 1, 1), (1, 'NaN', 1, 0), (1, 1, 1, NULL), (1, 'Infinity', 0, 1)")
    fit = fits(db, "SELECT g, (f).* FROM (SELECT g, groupml.learn_over_groups(ARRAY[x1, x2], y, 'logistic', "
                   "'{}') AS f FROM t GROUP BY g) s")[1]
    assert fit["status"] == "ok"
    assert fit["n_skipped"] == 4
    assert fit["n_train"] + fit["n_validation"] == 200


def test_ragged_arrays_are_an_error_naming_both_lengths(db):
    db.execute("CREATE TABLE t (x float8[], y float8)")
    db.execute("INSERT INTO t VALUES (ARRAY[1,2,3], 1), (ARRAY[1,2], 0)")
    state, msg, hint = sql_error(db, "SELECT groupml.learn_over_groups(x, y, 'logistic', '{}') FROM t")
    assert state == "2202E"
    assert msg == "groupml: Every features array of a group must have the same length; expected 3 values, found 2"
    assert "same columns" in hint


def test_small_and_single_class_groups_say_so(db):
    db.execute("CREATE TABLE t (g text, x float8, y float8)")
    db.execute("INSERT INTO t VALUES ('tiny', 1, 1)")
    db.execute("INSERT INTO t SELECT 'one', i, 1 FROM generate_series(1, 50) i")
    db.execute("INSERT INTO t SELECT 'ok', i, (i % 3 = 0)::int FROM generate_series(1, 60) i")
    res = fits(db, "SELECT g, (f).* FROM (SELECT g, groupml.learn_over_groups(ARRAY[x], y, 'logistic', '{}') "
                   "AS f FROM t GROUP BY g) s")
    assert res["tiny"]["status"] == "too_small" and res["tiny"]["model"] is None
    assert "usable rows" in res["tiny"]["message"]
    assert res["one"]["status"] == "single_class" and res["one"]["model"] is None
    assert res["ok"]["status"] == "ok"


def test_linear_and_svm_families(db):
    data = grouped_classification(3000, 2, 3, seed=5, task="regression")
    create_table(db, "reg", data, bool_label=False, label_col="y")
    res = fits(db, "SELECT country, (f).* FROM (SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, f3], y, "
                   "'linear', '{\"l2\": [0, 0.1]}') AS f FROM reg GROUP BY country) s")
    for fit in res.values():
        assert fit["status"] == "ok" and fit["metric"] == "rmse"
        assert set(fit["metrics"]) >= {"rmse", "mae", "r2"}
        assert fit["metrics"]["r2"] > 0.3
    data = grouped_classification(3000, 2, 3, seed=6)
    create_table(db, "cls", data)
    res = fits(db, "SELECT country, (f).* FROM (SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, f3], "
                   "clicked, 'svm', '{\"l2\": [0.001, 0.1]}', '{\"metric\": \"auc\"}') AS f FROM cls "
                   "GROUP BY country) s")
    for fit in res.values():
        assert fit["status"] == "ok" and fit["family"] == "svm" and fit["metric"] == "auc"
        assert fit["score"] == pytest.approx(fit["metrics"]["auc"])


def test_random_search_spec(db, clicks):
    spec = {"method": "random", "n_trials": 5, "seed": 11, "space": {"l2": {"loguniform": [1e-5, 1]}}}
    res = fits(db, f"SELECT country, (f).* FROM (SELECT country, groupml.learn_over_groups({FEATS}, clicked, "
                   "'logistic', %s::jsonb) AS f FROM clicks GROUP BY country) s", json.dumps(spec))
    for fit in res.values():
        assert len(fit["trials"]) == 5
        l2s = [t["params"]["l2"] for t in fit["trials"]]
        assert all(1e-5 <= v <= 1 for v in l2s) and len(set(l2s)) == 5
    again = fits(db, f"SELECT country, (f).* FROM (SELECT country, groupml.learn_over_groups({FEATS}, clicked, "
                     "'logistic', %s::jsonb) AS f FROM clicks GROUP BY country) s", json.dumps(spec))
    assert {k: [t["params"] for t in v["trials"]] for k, v in res.items()} == \
           {k: [t["params"] for t in v["trials"]] for k, v in again.items()}


@pytest.mark.parametrize("model,search,options,state,message", [
    ("forest", "{}", "{}", "42704", "Unknown model family 'forest'"),
    ("logistic", '{"lr": [-1]}', "{}", "22023", "The 'lr' value of model 'logistic' must be > 0; got -1"),
    ("logistic", '{"l2": [-0.5]}', "{}", "22023", "The 'l2' value of model 'logistic' must be >= 0; got -0.5"),
    ("logistic", '{"method": "magic"}', "{}", "22023", "The 'method' value of search must be one of"),
    ("logistic", "{}", '{"validation_fraction": 1.5}', "22023",
     "The 'validation_fraction' value of learn_over_groups options must be < 1; got 1.5"),
    ("logistic", "{}", '{"colour": 1}', "22023", "Unknown key 'colour' in learn_over_groups options"),
    ("linear", "{}", '{"metric": "auc"}', "22023", "The 'metric' value of learn_over_groups options must be one of"),
    ("logistic", "[1, 2]", "{}", "22023", "The 'search' value of learn_over_groups must be a JSON object"),
])
def test_bad_input_errors(db, model, search, options, state, message):
    db.execute("CREATE TABLE t (x float8, y float8)")
    db.execute("INSERT INTO t VALUES (1, 0), (2, 1)")
    got_state, msg, hint = sql_error(
        db, "SELECT groupml.learn_over_groups(ARRAY[x], y, %s::text, %s::jsonb, %s::jsonb) FROM t",
        [model, search, options])
    assert got_state == state
    assert msg.startswith("groupml: " + message), msg
    assert hint


def test_model_as_a_literal_a_text_value_or_a_column(db):
    """The model argument is a groupml.model_family: a literal is read as one, a text value (a
    column, a text parameter) converts; an unknown literal is the enum's ERROR naming the type."""
    db.execute("CREATE TABLE t (x float8, y float8, m text)")
    db.execute("INSERT INTO t SELECT i % 7, i % 2, 'linear' FROM generate_series(1, 200) i")
    for model in ("'linear'", "'linear'::text", "%s", "m", "'linear'::groupml.model_family"):
        params = ["linear"] if model == "%s" else []
        fam = db.execute(f"SELECT (groupml.learn_over_groups(ARRAY[x], y, {model}, '{{}}')).family FROM t",
                         params).fetchone()[0]
        assert fam == "linear", model
    state, msg, _ = sql_error(db, "SELECT groupml.learn_over_groups(ARRAY[x], y, 'forest', '{}') FROM t")
    assert state == "22P02" and 'invalid input value for enum groupml.model_family: "forest"' in msg
    db.execute("UPDATE t SET m = 'forest'")
    state, msg, hint = sql_error(db, "SELECT groupml.learn_over_groups(ARRAY[x], y, m, '{}') FROM t")
    assert state == "42704" and msg.startswith("groupml: Unknown model family 'forest'") and "logistic" in hint


def test_boolean_label_and_integer_features(db):
    db.execute("CREATE TABLE t (a int, b int, y boolean)")
    db.execute("INSERT INTO t SELECT i % 7, i % 5, (i % 7) > 3 FROM generate_series(1, 300) i")
    fit = db.execute("SELECT (f).status, (f).score FROM (SELECT groupml.learn_over_groups(ARRAY[a, b], y, "
                     "'logistic', '{}') AS f FROM t) s").fetchone()
    assert fit[0] == "ok" and fit[1] > 0.9


def test_cancel_within_a_second(cluster, dsn, db):
    data = grouped_classification(60000, 1, 10, seed=9)
    create_table(db, "big", data)
    spec = json.dumps({"l2": [10 ** -k for k in range(1, 13)], "max_iter": 100000, "tol": 1e-300,
                       "class_weight": [None, "balanced"]})
    feats = "ARRAY[" + ", ".join(f"f{j + 1}" for j in range(10)) + "]"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '2500ms'")
        t0 = time.time()
        with pytest.raises(psycopg.errors.QueryCanceled) as got:
            conn.execute(f"SELECT groupml.learn_over_groups({feats}, clicked, 'logistic', %s::jsonb) FROM big",
                         [spec])
        assert time.time() - t0 < 2.5 + 1.2
        # PostgreSQL's message under our prefix, not PL/Python's spiexceptions.QueryCanceled
        assert got.value.diag.message_primary == "groupml: canceling statement due to statement timeout", \
            got.value.diag.message_primary
        # the backend is healthy afterwards and nothing is left buffered
        conn.execute("SET statement_timeout = 0")
        assert conn.execute("SELECT groupml.help('fit') IS NOT NULL").fetchone()[0]
