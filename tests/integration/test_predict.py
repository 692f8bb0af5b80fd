"""predict, predict_proba and their batch forms against a stored fit."""


import os
import time

import numpy as np
import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification
from groupml.learners import load_model
from pg_helpers import cancel_when, children_of, sql_error

pytestmark = pytest.mark.integration


@pytest.fixture
def models(db):
    data = grouped_classification(4000, 3, 3, seed=21)
    create_table(db, "clicks", data)
    db.execute("""CREATE TABLE country_models AS SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, f3],
                  clicked, 'logistic', '{"l2": [0.001, 0.1]}') AS fit FROM clicks GROUP BY country""")
    return data


def test_predict_matches_the_stored_model(db, models):
    rows = db.execute("""SELECT c.id, c.f1, c.f2, c.f3, (m.fit).model,
                                groupml.predict(m.fit, ARRAY[c.f1, c.f2, c.f3]),
                                groupml.predict_proba(m.fit, ARRAY[c.f1, c.f2, c.f3])
                         FROM clicks c JOIN country_models m USING (country) ORDER BY c.id LIMIT 300""").fetchall()
    for _id, f1, f2, f3, blob, label, proba in rows:
        model = load_model(bytes(blob))
        x = np.array([[f1, f2, f3]])
        assert label == float(model.predict(x)[0])
        assert proba == pytest.approx(float(model.predict_proba(x)[0]), abs=1e-12)
        assert label == (1.0 if proba >= 0.5 else 0.0)


def test_batch_forms_equal_row_by_row(db, models):
    country = db.execute("SELECT country FROM country_models ORDER BY 1 LIMIT 1").fetchone()[0]
    batch, probas = db.execute("""
        SELECT groupml.predict_batch(m.fit, array_agg(ARRAY[c.f1, c.f2, c.f3] ORDER BY c.id)),
               groupml.predict_proba_batch(m.fit, array_agg(ARRAY[c.f1, c.f2, c.f3] ORDER BY c.id))
        FROM clicks c JOIN country_models m USING (country) WHERE country = %s GROUP BY m.fit""",
                               [country]).fetchone()
    single = db.execute("""SELECT groupml.predict(m.fit, ARRAY[c.f1, c.f2, c.f3]),
                                  groupml.predict_proba(m.fit, ARRAY[c.f1, c.f2, c.f3])
                           FROM clicks c JOIN country_models m USING (country) WHERE country = %s ORDER BY c.id""",
                        [country]).fetchall()
    assert batch == [s[0] for s in single]
    assert probas == pytest.approx([s[1] for s in single], abs=1e-12)
    # the form groupml.help('predict_batch') shows: aggregate the rows, then join the models
    shown = db.execute("""
        SELECT b.country, b.ids, groupml.predict_batch(m.fit, b.x)
        FROM (SELECT country, array_agg(id ORDER BY id) AS ids,
                     array_agg(ARRAY[f1, f2, f3] ORDER BY id) AS x
              FROM clicks GROUP BY country) b
        JOIN country_models m USING (country)""").fetchall()
    assert len(shown) == db.execute("SELECT count(*) FROM country_models").fetchone()[0]
    per_row = dict(db.execute("SELECT c.id, groupml.predict(m.fit, ARRAY[c.f1, c.f2, c.f3]) FROM clicks c "
                              "JOIN country_models m USING (country)").fetchall())
    assert all(per_row[i] == p for _, ids, preds in shown for i, p in zip(ids, preds))


def test_batch_forms_score_many_rows_in_chunks_like_one_call(db, models):
    # more rows than one chunk (BATCH_CHUNK_ROWS, a cancel check between chunks): same values
    from groupml.udf.predict import BATCH_CHUNK_ROWS

    n = 2 * BATCH_CHUNK_ROWS + 7
    X = np.random.default_rng(3).standard_normal((n, 3))
    one = "(SELECT fit FROM country_models ORDER BY country LIMIT 1)"
    model = load_model(bytes(db.execute(f"SELECT ({one}).model").fetchone()[0]))
    got = db.execute(f"SELECT groupml.predict_proba_batch({one}, %s::float8[])", [X.tolist()]).fetchone()[0]
    labels = db.execute(f"SELECT groupml.predict_batch({one}, %s::float8[])", [X.tolist()]).fetchone()[0]
    assert len(got) == len(labels) == n
    np.testing.assert_allclose(got, model.predict_proba(X), rtol=0, atol=1e-12)
    assert labels == model.predict(X).astype(float).tolist()
    # the features are not kept once the call returns: PL/Python held them in the function's
    # globals until its next call (a million rows held twice ran out of memory, once crashing)
    db.execute("CREATE TEMP TABLE live (n int)")
    db.execute(f"""DO $$
import gc
plpy.execute("INSERT INTO live VALUES (%d)" % sum(1 for o in gc.get_objects() if type(o) is list and len(o) == {n}))
$$ LANGUAGE plpython3u""")
    assert db.execute("SELECT n FROM live").fetchone()[0] == 0


def test_predict_errors(db, models):
    state, msg, hint = sql_error(db, "SELECT groupml.predict(fit, ARRAY[1.0, 2.0]) FROM country_models LIMIT 1")
    assert state == "2202E"
    assert msg == "groupml: The model expects 3 features; found 2"
    assert "same columns" in hint
    for fn in ("predict", "predict_proba"):
        state, msg, hint = sql_error(db, f"SELECT groupml.{fn}(fit, ARRAY[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]) "
                                         f"FROM country_models LIMIT 1")
        assert (state, msg) == ("2202E", f"groupml: The 'features' value of {fn} must be one row; got a "
                                         f"two-dimensional array of 2 rows")
        assert hint == (f"Pass one row as a one-dimensional array, or use groupml.{fn}_batch for many rows at once.")
    one = db.execute("SELECT groupml.predict(fit, ARRAY[[1.0, 2.0, 3.0]]) = groupml.predict(fit, ARRAY[1.0, 2.0, 3.0]) "
                     "FROM country_models LIMIT 1").fetchone()[0]
    assert one                                             # a 1 x d array is one row
    state, msg, hint = sql_error(db, "SELECT groupml.predict(fit, ARRAY[1.0, NULL, 2.0]) FROM country_models LIMIT 1")
    assert state == "22000"
    assert msg == "groupml: The 'features' value of predict must not contain NULL, NaN or infinite values"
    db.execute("CREATE TABLE one (x float8, y float8)")
    db.execute("INSERT INTO one VALUES (1, 1)")
    state, msg, hint = sql_error(db, "SELECT groupml.predict(groupml.learn_over_groups(ARRAY[x], y, 'logistic', "
                                     "'{}'), ARRAY[1.0]) FROM one")
    assert state == "22023"
    assert msg == ("groupml: The 'fit' value of predict must hold a trained model; "
                   "got a fit with status 'too_small' and no model")
    assert "status = 'ok'" in hint
    state, msg, _ = sql_error(db, "SELECT groupml.predict(ROW(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
                                  "NULL, NULL, NULL, NULL)::groupml.fit, ARRAY[1.0])")
    assert (state, msg) == ("22023", "groupml: The 'fit' value of predict must hold a trained model; got a fit "
                                     "with status NULL and no model")     # not Python's None
    state, msg, hint = sql_error(db, "SELECT groupml.learn_over_groups(ARRAY[x], y, NULL, '{}') FROM one")
    assert (state, hint) == ("22023", "Use one of lightgbm, lightgbm_regressor, linear, logistic, mlp, "
                                      "mlp_regressor, svm.")


#: A fit value holding given model bytes (the second parameter) of a family (the first).
FIT_OF = ("ROW('ok', %s, '{{}}'::jsonb, 'accuracy', 1, '{{}}'::jsonb, 1, 1, 0, {d}, '[]'::jsonb, NULL, %s)"
          "::groupml.fit")


def _overflow_error(db, sql, params, fn, row):
    state, msg, hint = sql_error(db, sql, params)
    assert (state, msg) == ("22003", f"groupml: The features of row {row} given to {fn} are too large for the "
                                     f"model: its score is not a finite number"), sql
    assert hint.startswith("Give features on the scale the model was trained on")


def test_scores_that_overflow_are_errors_not_a_silent_class_0(db):
    # A margin that overflows has no trustworthy sign: 1e308 * 619 - 1e308 * 619 + b is b, yet
    # the product is NaN with one BLAS kernel and +inf with another (a fused multiply-add keeps
    # the second product exact). The weights are set here, not trained, so the overflow happens
    # whatever the host: [1e308, 0, 0] overflows to +inf on every path, [1e308, -1e308, 0] to
    # +inf or NaN; both are 22003 for every family and scoring form, never class 1 or 0.
    from groupml.learners import GLMModel

    db.execute("CREATE TABLE fm (m text, f groupml.fit)")
    for fam in ("logistic", "svm", "linear"):
        blob = GLMModel(fam, [619.0, 619.0, 1.0], -4.18, {}).to_bytes()
        db.execute(f"INSERT INTO fm VALUES (%s, {FIT_OF.format(d=3)})", [fam, fam, blob])
    for x in ("ARRAY[1e308, 0, 0]", "ARRAY[1e308, -1e308, 0]", "ARRAY[-1e308, 0, 1e308]"):
        for m in ("logistic", "svm", "linear"):
            _overflow_error(db, f"SELECT groupml.predict(f, {x}::float8[]) FROM fm WHERE m = %s", [m], "predict", 1)
            _overflow_error(db, f"SELECT groupml.predict_batch(f, ARRAY[ARRAY[1, 2, 3], {x}]::float8[]) FROM fm "
                                f"WHERE m = %s", [m], "predict_batch", 2)
        _overflow_error(db, f"SELECT groupml.predict_proba(f, {x}::float8[]) FROM fm WHERE m = 'logistic'", None,
                        "predict_proba", 1)
        _overflow_error(db, f"SELECT groupml.predict_proba_batch(f, ARRAY[ARRAY[1, 2, 3], {x}]::float8[]) FROM fm "
                            f"WHERE m = 'logistic'", None, "predict_proba_batch", 2)
    # an MLP standardises in float64, then runs in float32 (max 3.4e38): 1e308 overflows there
    # on every host, whatever the trained weights; relu(-inf) = 0 and tanh(inf) = 1 must not
    # turn that into a finite score
    db.execute("CREATE TABLE small AS SELECT ((i % 7 > 3) <> (i % 11 = 0))::int AS y, (i % 7) * 1e-3 AS f1, "
               "(i % 5) * 1e-3 AS f2 FROM generate_series(1, 300) i")
    db.execute("INSERT INTO fm SELECT m || ' ' || a, groupml.learn_over_groups(ARRAY[f1, f2], y, m, "
               "jsonb_build_object('epochs', ARRAY[2], 'layers', ARRAY['4'], 'activation', ARRAY[a])) "
               "FROM small, unnest(ARRAY['mlp', 'mlp_regressor']) m, unnest(ARRAY['relu', 'tanh']) a GROUP BY m, a")
    for x in ("ARRAY[1e308, -1e308]", "ARRAY[1e308, 0]", "ARRAY[0, -1e308]"):
        for a in ("relu", "tanh"):
            for m, fn in (("mlp", "predict"), ("mlp", "predict_proba"), ("mlp_regressor", "predict")):
                _overflow_error(db, f"SELECT groupml.{fn}(f, {x}::float8[]) FROM fm WHERE m = %s", [f"{m} {a}"],
                                fn, 1)
            _overflow_error(db, f"SELECT groupml.predict_proba_batch(f, ARRAY[ARRAY[1, 2], ARRAY[3, 4], {x}]"
                                f"::float8[]) FROM fm WHERE m = %s", [f"mlp {a}"], "predict_proba_batch", 3)
    # large but harmless values still score: a logistic margin of 1e200 has a sign
    db.execute(f"INSERT INTO fm VALUES ('ones', {FIT_OF.format(d=3)})",
               ["logistic", GLMModel("logistic", [1.0, 1.0, 1.0], 0.0, {}).to_bytes()])
    assert db.execute("SELECT groupml.predict(f, ARRAY[1e200, 0, 0]::float8[]), "
                      "groupml.predict_proba(f, ARRAY[-1e200, 0, 0]::float8[]) FROM fm WHERE m = 'ones'"
                      ).fetchone() == (1.0, 0.0)


def test_predict_proba_is_for_logistic_only(db):
    db.execute("CREATE TABLE r (x float8, y float8)")
    db.execute("INSERT INTO r SELECT i, 2 * i + 1 FROM generate_series(1, 50) i")
    db.execute("CREATE TABLE m AS SELECT groupml.learn_over_groups(ARRAY[x], y, 'linear', '{}') AS fit FROM r")
    assert db.execute("SELECT groupml.predict(fit, ARRAY[10.0]) FROM m").fetchone()[0] == pytest.approx(21, abs=1e-3)
    state, msg, hint = sql_error(db, "SELECT groupml.predict_proba(fit, ARRAY[10.0]) FROM m")
    assert state == "0A000"
    assert hint


def test_corrupt_model_bytes_are_rejected_not_unpickled(db, models):
    import pickle
    evil = pickle.dumps({"x": 1})
    state, msg, hint = sql_error(db, "SELECT groupml.predict(ROW('ok','logistic','{}'::jsonb,'accuracy',1,'{}'::jsonb,"
                                     "1,1,0,1,'[]'::jsonb,NULL,%s)::groupml.fit, ARRAY[1.0])", [evil])
    assert state == "22P03"
    assert msg.startswith("groupml: ")


def test_a_damaged_lightgbm_model_is_refused_without_crashing_the_server(db):
    # LightGBM's loader aborts the process on truncated or altered model text: the backend
    # would die and the postmaster restart every session. The model's checksum refuses it first.
    db.execute("CREATE TABLE lg AS SELECT i, (i % 7)::float8 AS x, (i % 3)::float8 AS z, (i % 7 > 3) AS y "
               "FROM generate_series(1, 300) i")
    db.execute("CREATE TABLE lgfit AS SELECT groupml.learn_over_groups(ARRAY[x, z], y, 'lightgbm', "
               "'{\"num_boost_round\": [5]}') AS fit FROM lg")
    good = bytes(db.execute("SELECT (fit).model FROM lgfit").fetchone()[0])
    pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]
    for cut in (len(good) // 4, len(good) // 2, len(good) - 7):
        for damaged in (good[:cut], good[:cut] + bytes([good[cut] ^ 0x20]) + good[cut + 1:]):
            state, msg, hint = sql_error(
                db, "SELECT groupml.predict(ROW((fit).status, (fit).family, (fit).params, (fit).metric, (fit).score, "
                    "(fit).metrics, (fit).n_train, (fit).n_validation, (fit).n_skipped, (fit).n_features, "
                    "(fit).trials, (fit).message, %s)::groupml.fit, ARRAY[1.0, 2.0]) FROM lgfit", [damaged])
            assert state == "22P03" and msg.startswith("groupml: "), (cut, state, msg)
    assert db.execute("SELECT pg_backend_pid()").fetchone()[0] == pid          # the same backend, alive
    assert db.execute("SELECT groupml.predict(fit, ARRAY[1.0, 2.0]) FROM lgfit").fetchone()[0] in (0.0, 1.0)
    # a model altered by hand with its checksum recomputed: checked by a throwaway child first
    from groupml.learners import _container, load_model
    from groupml.learners._model import body_digest, pack_model

    text = load_model(good).model_text.encode()
    outcomes = []
    for cut in range(len(text) // 10, len(text), len(text) // 20):
        bad = text[:cut] + bytes([text[cut] ^ 0x20]) + text[cut + 1:]
        forged = pack_model("lightgbm", _container.pack(
            {"family": "lightgbm", "params": {"num_boost_round": 5}, "n_features": 2, "sha256": body_digest(bad)},
            bad))
        try:
            db.execute("SELECT groupml.predict(ROW((fit).status, (fit).family, (fit).params, (fit).metric, (fit).score, "
                       "(fit).metrics, (fit).n_train, (fit).n_validation, (fit).n_skipped, (fit).n_features, "
                       "(fit).trials, (fit).message, %s)::groupml.fit, ARRAY[1.0, 2.0]) FROM lgfit", [forged])
            outcomes.append("loaded")
            continue
        except psycopg.Error as e:
            state, msg = e.sqlstate, e.diag.message_primary
        assert state == "22P03" and msg.startswith("groupml: The lightgbm model is damaged: "), (cut, state, msg)
        outcomes.append("crashed" if "LightGBM crashed on it" in msg else "refused")
    assert "crashed" in outcomes, outcomes
    assert db.execute("SELECT pg_backend_pid()").fetchone()[0] == pid          # still the same backend


def test_a_forged_lightgbm_tree_that_passes_the_probes_is_refused_before_it_can_crash_the_server(db):
    # one split reads feature 2,000,000,000 for rows with 0.3 < f1 <= 0.31 only: the child's
    # probe rows miss that path, so only the structural check of the text stops this model
    # before a predict on f1 = 0.305 makes LightGBM read outside its arrays in the backend
    from lgbm_forgery import unprobed_bad_split
    from groupml.learners import _container, load_model
    from groupml.learners._model import body_digest, pack_model

    db.execute("CREATE TABLE lg AS SELECT i, (i % 7)::float8 AS x, (i % 3)::float8 AS z, (i % 7 > 3) AS y "
               "FROM generate_series(1, 300) i")
    db.execute("CREATE TABLE lgfit AS SELECT groupml.learn_over_groups(ARRAY[x, z], y, 'lightgbm', "
               "'{\"num_boost_round\": [5]}') AS fit FROM lg")
    text = unprobed_bad_split(load_model(bytes(db.execute("SELECT (fit).model FROM lgfit").fetchone()[0])).model_text)
    body = text.encode()
    forged = pack_model("lightgbm", _container.pack(
        {"family": "lightgbm", "params": {"num_boost_round": 5}, "n_features": 2, "sha256": body_digest(body)}, body))
    pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]
    for x in (0.305, 0.0):
        state, msg, hint = sql_error(
            db, "SELECT groupml.predict(ROW((fit).status, (fit).family, (fit).params, (fit).metric, (fit).score, "
                "(fit).metrics, (fit).n_train, (fit).n_validation, (fit).n_skipped, (fit).n_features, "
                "(fit).trials, (fit).message, %s)::groupml.fit, ARRAY[%s, 1.0]) FROM lgfit", [forged, x])
        assert state == "22P03"
        assert msg == ("groupml: The lightgbm model is damaged: tree 0: split_feature 2000000000 of node 2 "
                       "is not a feature index (0..1)")
        assert "as train_groups or learn_over_groups stored it" in hint
    assert db.execute("SELECT pg_backend_pid()").fetchone()[0] == pid          # the same backend, alive
    assert db.execute("SELECT groupml.predict(fit, ARRAY[0.305, 1.0]) FROM lgfit").fetchone()[0] in (0.0, 1.0)


def _checking_children(pid):
    """The LightGBM checking children (groupml.learners._lgbm_check) of backend ``pid``."""
    return children_of(pid, b"lgb.Booster(model_str=text)")


def test_a_new_session_checks_stored_lightgbm_models_in_one_child(dsn, db):
    # per-group LightGBM models read back by another session: each text is checked before the
    # backend loads it, by one checking child for all of them (a child per text cost 0.2 s each)
    db.execute("CREATE TABLE lg AS SELECT i, 'g' || (i % 6) AS g, (i % 7)::float8 AS x, (i % 3)::float8 AS z, "
               "(i % 7 > 3) AS y FROM generate_series(1, 1200) i")
    db.execute("CREATE TABLE lgfit AS SELECT g, groupml.learn_over_groups(ARRAY[x, z], y, 'lightgbm', "
               "'{\"num_boost_round\": [5]}') AS fit FROM lg GROUP BY g")
    want = db.execute("SELECT g, groupml.predict(fit, ARRAY[1.0, 2.0]) FROM lgfit ORDER BY g").fetchall()
    assert db.execute("SELECT count(DISTINCT (fit).model) FROM lgfit").fetchone()[0] == 6
    with psycopg.connect(dsn, autocommit=True) as other:
        pid = other.info.backend_pid
        assert other.execute("SELECT g, groupml.predict(fit, ARRAY[1.0, 2.0]) FROM lgfit ORDER BY g").fetchall() == want
        [child] = _checking_children(pid)
        # LightGBM was imported without its optional integrations (0.13 s instead of 0.69 s of the
        # session's first call), and the session can still import them itself
        other.execute("CREATE FUNCTION pg_temp.loaded(m text) RETURNS bool LANGUAGE plpython3u AS "
                      "$$ import sys; return sys.modules.get(m) is not None $$")
        assert other.execute("SELECT pg_temp.loaded('lightgbm'), pg_temp.loaded('pandas'), "
                             "pg_temp.loaded('sklearn')").fetchone() == (True, False, False)
        other.execute("DO $$ import pandas, sklearn.base $$ LANGUAGE plpython3u")
        assert other.execute("SELECT pg_temp.loaded('pandas')").fetchone() == (True,)
    deadline = time.time() + 30                        # it ends with its session (end of file on its stdin)
    while os.path.exists(f"/proc/{child}") and time.time() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{child}")


def test_a_cancel_while_a_lightgbm_model_is_checked_is_noticed(dsn, db):
    # the backend waits for its checking child's answer; a cancel must end the call at once
    # (it used to wait for the child's 120 s limit and then report the model unreadable), and
    # the child, whose answer would now be stale, is killed; the next call starts another
    import signal

    db.execute("CREATE TABLE lg AS SELECT i, 'g' || (i % 2) AS g, (i % 7)::float8 AS x, (i % 3)::float8 AS z, "
               "(i % 7 > 3) AS y FROM generate_series(1, 600) i")
    db.execute("CREATE TABLE lgfit AS SELECT g, groupml.learn_over_groups(ARRAY[x, z], y, 'lightgbm', "
               "'{\"num_boost_round\": [5]}') AS fit FROM lg GROUP BY g")
    want = db.execute("SELECT groupml.predict(fit, ARRAY[1.0, 2.0]) FROM lgfit WHERE g = 'g1'").fetchone()[0]
    with psycopg.connect(dsn, autocommit=True) as other:
        pid = other.info.backend_pid
        other.execute("SELECT groupml.predict(fit, ARRAY[1.0, 2.0]) FROM lgfit WHERE g = 'g0'")
        [child] = _checking_children(pid)
        os.kill(child, signal.SIGSTOP)                 # it will not answer the next text
        try:
            thread, fired = cancel_when(dsn, pid, f"SELECT state = 'active' AND wait_event IS NULL FROM "
                                                  f"pg_stat_activity WHERE pid = {pid}")
            with pytest.raises(psycopg.errors.QueryCanceled):
                other.execute("SELECT groupml.predict(fit, ARRAY[1.0, 2.0]) FROM lgfit WHERE g = 'g1'")
            thread.join()
            assert fired.is_set()
        finally:
            if os.path.exists(f"/proc/{child}"):
                os.kill(child, signal.SIGCONT)
        assert not os.path.exists(f"/proc/{child}")    # killed and reaped by the backend
        assert other.execute("SELECT groupml.predict(fit, ARRAY[1.0, 2.0]) FROM lgfit WHERE g = 'g1'").fetchone()[0] \
            == want
        assert len(_checking_children(pid)) == 1 and other.info.backend_pid == pid


def test_catalog_models_are_stored_out_of_line_uncompressed(db):
    # predict / infer read the whole model on every call: decompressing a LightGBM model of
    # ~90 KB made most of a row's cost, so the catalog keeps models uncompressed (EXTERNAL)
    storage = dict(db.execute(
        "SELECT attrelid::regclass::text, attstorage FROM pg_attribute WHERE (attrelid, attname) IN "
        "(('groupml.models'::regclass, 'fit'), ('groupml.observations'::regclass, 'model'))").fetchall())
    assert storage == {"groupml.models": "e", "groupml.observations": "e"}
    db.execute("CREATE TABLE lg AS SELECT i, (i % 7)::float8 AS x, (i % 3)::float8 AS z, (i % 7 > 3) AS y "
               "FROM generate_series(1, 3000) i")
    db.execute("CALL groupml.train_groups('lg', '{}', ARRAY['x', 'z'], 'y', 'lightgbm', "
               "'{\"num_boost_round\": [60], \"num_leaves\": [15], \"min_data_in_leaf\": [5]}')")
    size, compression = db.execute("SELECT length((fit).model), pg_column_compression(fit) "
                                   "FROM groupml.models").fetchone()
    assert size > 8000 and compression is None


#: Settings under which the planner picks a parallel plan for a table of any size.
FORCE_PARALLEL = ("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; "
                  "SET max_parallel_workers_per_gather = 2; SET parallel_leader_participation = off")
SERIAL = "SET max_parallel_workers_per_gather = 0"
#: every family, with a grid that trains in well under a second; True for a classifier with probabilities
PARALLEL_FAMILIES = {"logistic": ("{}", True), "svm": ("{}", False), "linear": ("{}", False),
                     "mlp": ('{"epochs": [2], "layers": ["4"]}', True),
                     "mlp_regressor": ('{"epochs": [2], "layers": ["4"]}', False),
                     "lightgbm": ('{"num_boost_round": [5]}', True),
                     "lightgbm_regressor": ('{"num_boost_round": [5]}', False)}


def _scored_by_parallel_workers(db, sql, fn):
    """EXPLAIN ``sql``: a Gather whose workers compute groupml.``fn`` below it."""
    plan = db.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {sql}").fetchone()[0][0]["Plan"]

    def nodes(node):
        yield node
        for child in node.get("Plans", ()):
            yield from nodes(child)

    gathers = [n for n in nodes(plan) if n["Node Type"] in ("Gather", "Gather Merge")]
    assert gathers, plan
    assert any(f"groupml.{fn}(" in out for g in gathers for n in nodes(g) if n is not g
               for out in n.get("Output", ())), plan


def test_every_scoring_form_and_family_runs_in_parallel_workers(db):
    # predict* are PARALLEL SAFE: a parallel worker (a new process for every query) and a leader
    # in parallel mode cannot start the subtransaction PL/Python wraps every statement in, so
    # scoring must run no statement there (a first call's catalog check, a cancel check, a
    # LightGBM model check's cancel check all did)
    db.execute("CREATE TABLE tr AS SELECT ((i % 7 > 3) <> (i % 11 = 0))::int AS y, (i % 7)::float8 AS f1, "
               "(i % 5)::float8 AS f2 FROM generate_series(1, 300) i")
    db.execute("CREATE TABLE fams (m text, fit groupml.fit, proba boolean)")
    for m, (spec, proba) in PARALLEL_FAMILIES.items():
        db.execute("INSERT INTO fams SELECT %s, groupml.learn_over_groups(ARRAY[f1, f2], y, %s, %s), %s FROM tr",
                   [m, m, spec, proba])
    # the rows to score carry their model's name (a join on it, as with per-group models; the
    # planner runs a cross join serially); fillfactor 10 spreads them over the pages two
    # workers are planned for
    db.execute("CREATE TABLE pts WITH (fillfactor = 10) AS SELECT m, i AS id, (i % 9) * 0.7::float8 AS f1, "
               "(i % 4) * 1.3::float8 AS f2 FROM fams, generate_series(1, 40) i")
    db.execute("CREATE TABLE bat WITH (fillfactor = 10) AS SELECT m, id % 3 AS b, array_agg(ARRAY[f1, f2] ORDER BY id) "
               "AS x FROM pts GROUP BY m, id % 3")
    db.execute("ANALYZE fams, pts, bat")
    rows = ("SELECT m, p.id, groupml.predict(f.fit, ARRAY[p.f1, p.f2]), CASE WHEN f.proba THEN "
            "groupml.predict_proba(f.fit, ARRAY[p.f1, p.f2]) END FROM pts p JOIN fams f USING (m)")
    batches = ("SELECT m, b.b, groupml.predict_batch(f.fit, b.x), CASE WHEN f.proba THEN "
               "groupml.predict_proba_batch(f.fit, b.x) END FROM bat b JOIN fams f USING (m)")
    db.execute(SERIAL)
    want = {q: sorted(db.execute(q).fetchall()) for q in (rows, batches)}
    assert len(want[rows]) == 40 * len(PARALLEL_FAMILIES) and len(want[batches]) == 3 * len(PARALLEL_FAMILIES)
    db.execute(FORCE_PARALLEL)
    for q, fns in ((rows, ("predict", "predict_proba")), (batches, ("predict_batch", "predict_proba_batch"))):
        for fn in fns:
            _scored_by_parallel_workers(db, q, fn)
        got = sorted(db.execute(q).fetchall())
        assert [r[:2] for r in got] == [r[:2] for r in want[q]]
        for g, w in zip(got, want[q]):
            for a, b in zip(g[2:], w[2:]):
                assert (a is None and b is None) or np.allclose(a, b, rtol=0, atol=1e-9), (g, w)
    # the leader is in parallel mode too, above the Gather: a batch of more than one chunk (a
    # cancel check between chunks) scored there
    from groupml.udf.predict import BATCH_CHUNK_ROWS

    db.execute(f"CREATE TABLE big AS SELECT i AS id, (i % 9) * 0.7 AS f1, (i % 4) * 1.3 AS f2 "
               f"FROM generate_series(1, {2 * BATCH_CHUNK_ROWS + 5}) i")
    db.execute("ANALYZE big")
    db.execute("SET parallel_leader_participation = on")
    big = ("SELECT groupml.predict_batch(f.fit, a.x) FROM fams f, (SELECT array_agg(ARRAY[f1, f2] ORDER BY id) AS x "
           "FROM big) a WHERE f.m = 'logistic'")
    assert "Gather" in "\n".join(r[0] for r in db.execute(f"EXPLAIN {big}").fetchall())
    got = db.execute(big).fetchone()[0]
    db.execute(SERIAL)
    assert got == db.execute(big).fetchone()[0]
