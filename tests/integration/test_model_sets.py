"""Named model sets: versions published from train_groups runs, activation and rollback, routed
scoring per row (keys of several types and columns, matched by typed value) and per table, the
bad inputs, row-level security, and pg_dump / pg_restore."""

import os
import subprocess

import numpy as np
import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification
from groupml.devcluster import pg_bindir
from pg_helpers import cron_runs, sql_error

pytestmark = pytest.mark.integration

GRID = '{"l2": [0.001, 0.1]}'
FEATS = "ARRAY['f1', 'f2', 'f3']"


@pytest.fixture
def clicks(db):
    data = grouped_classification(3000, 4, 3, seed=11, exponent=0.7)
    create_table(db, "clicks", data)
    # more key types: a date, an integer and a boolean derived from the group, one per group
    db.execute("ALTER TABLE clicks ADD COLUMN day date, ADD COLUMN region integer, ADD COLUMN mobile boolean")
    db.execute("UPDATE clicks SET day = DATE '2024-01-01' + (ascii(country) - 65), region = ascii(country) % 3, "
               "mobile = id % 2 = 0")
    return data


def train(db, group_by="ARRAY['country']", extra=""):
    return db.execute(f"CALL groupml.train_groups('clicks', {group_by}, {FEATS}, 'clicked', 'logistic', "
                      f"'{GRID}'{extra})").fetchone()[0]


def by_fit(db, run_id, key_sql):
    """{id: prediction} of every row scored with its run's model by the fit form (the reference)."""
    return dict(db.execute(
        f"SELECT c.id, groupml.predict(m.fit, ARRAY[c.f1, c.f2, c.f3]) FROM clicks c JOIN groupml.models m "
        f"ON m.run_id = %s AND m.group_key = {key_sql} WHERE (m.fit).status = 'ok'", [run_id]).fetchall())


def test_train_groups_with_a_name_makes_an_active_version_and_predict_routes_rows(db, clicks):
    run_id = train(db, extra=", model_set => 'churn'")
    assert db.execute("SELECT active_version, owner = current_user FROM groupml.model_sets WHERE name = 'churn'"
                      ).fetchone() == (1, True)
    v = db.execute("SELECT version, run_id, status, group_by, group_types, n_features, family, summary->>'groups' "
                   "FROM groupml.model_set_versions WHERE set_name = 'churn'").fetchone()
    assert v == (1, run_id, "ready", ["country"], ["text"], 3, "logistic", "4")
    want = by_fit(db, run_id, "jsonb_build_object('country', c.country)")
    got = dict(db.execute("SELECT id, groupml.predict('churn', ARRAY[f1, f2, f3], country) FROM clicks").fetchall())
    assert got == want and len(got) == 3000
    # a varchar key compares with the text column the set was trained on
    n = db.execute("SELECT count(*) FROM clicks WHERE groupml.predict('churn', ARRAY[f1, f2, f3], "
                   "country::varchar) IS NOT NULL").fetchone()[0]
    assert n == 3000


def test_a_retrain_is_a_new_version_activated_when_done_and_one_call_rolls_back(db, clicks):
    first = train(db, extra=", model_set => 'churn'")
    db.execute("UPDATE clicks SET f1 = f1 * 3 + 1")          # tomorrow's data: other models
    second = train(db, extra=", model_set => 'churn'")
    assert db.execute("SELECT active_version FROM groupml.model_sets WHERE name = 'churn'").fetchone()[0] == 2
    q = "SELECT id, groupml.predict('churn', ARRAY[f1, f2, f3], country) FROM clicks"
    assert dict(db.execute(q).fetchall()) == by_fit(db, second, "jsonb_build_object('country', c.country)")
    assert db.execute("SELECT groupml.rollback_model_set('churn')").fetchone()[0] == 1
    assert dict(db.execute(q).fetchall()) == by_fit(db, first, "jsonb_build_object('country', c.country)")
    assert db.execute("SELECT groupml.activate_model_set('churn', 2)").fetchone()[0] == 1
    assert dict(db.execute(q).fetchall()) == by_fit(db, second, "jsonb_build_object('country', c.country)")
    # older versions stay until dropped; the active one cannot be
    assert sql_error(db, "SELECT groupml.drop_model_set_version('churn', 2)")[0] == "55006"
    assert db.execute("SELECT groupml.drop_model_set_version('churn', 1)").fetchone()[0] is True
    assert db.execute("SELECT array_agg(version) FROM groupml.model_set_versions WHERE set_name = 'churn'"
                      ).fetchone()[0] == [2]
    assert sql_error(db, "SELECT groupml.rollback_model_set('churn')")[0] == "55000"
    # the version outlives its run
    db.execute("DELETE FROM groupml.runs WHERE run_id = %s", [second])
    assert dict(db.execute(q).fetchall()) and db.execute(
        "SELECT count(*) FROM groupml.model_set_models").fetchone()[0] == 4
    assert db.execute("SELECT groupml.drop_model_set('churn')").fetchone()[0] is True
    assert db.execute("SELECT count(*) FROM groupml.model_set_versions").fetchone()[0] == 0


def test_publish_of_an_unfinished_run_activates_in_the_transaction_that_finishes_it(db, clicks):
    run_id = train(db)
    db.execute("UPDATE groupml.runs SET status = 'failed' WHERE run_id = %s", [run_id])
    assert db.execute("SELECT groupml.publish(%s, 'later')", [run_id]).fetchone()[0] == 1
    assert db.execute("SELECT status FROM groupml.model_set_versions WHERE set_name = 'later'").fetchone()[0] == \
        "pending"
    assert db.execute("SELECT active_version FROM groupml.model_sets WHERE name = 'later'").fetchone()[0] is None
    assert sql_error(db, "SELECT groupml.predict('later', ARRAY[1.0, 2, 3], 'AB')")[0] == "55000"
    assert sql_error(db, "SELECT groupml.activate_model_set('later', 1)")[0] == "55000"
    with db.transaction():
        db.execute("UPDATE groupml.runs SET status = 'done' WHERE run_id = %s", [run_id])
        assert db.execute("SELECT status, summary->>'with_model' FROM groupml.model_set_versions "
                          "WHERE set_name = 'later'").fetchone() == ("ready", "4")
    assert db.execute("SELECT active_version FROM groupml.model_sets WHERE name = 'later'").fetchone()[0] == 1
    # a finished run's publish is ready at once, as the next version
    assert db.execute("SELECT groupml.publish(%s, 'later')", [run_id]).fetchone()[0] == 2
    assert db.execute("SELECT active_version FROM groupml.model_sets WHERE name = 'later'").fetchone()[0] == 2


def test_keys_of_several_columns_and_types_match_by_typed_value_under_any_settings(db, clicks):
    run_id = train(db, "ARRAY['day', 'region', 'mobile']", ", model_set => 'multi'")
    want = by_fit(db, run_id, "jsonb_build_object('day', c.day, 'region', c.region, 'mobile', c.mobile)")
    q = "SELECT id, groupml.predict('multi', ARRAY[f1, f2, f3], ROW(day, region, mobile)) FROM clicks"
    assert dict(db.execute(q).fetchall()) == want
    # other date and float settings, and integer keys of other widths: the same groups
    db.execute("SET DateStyle = 'SQL, DMY'; SET TimeZone = 'Pacific/Kiritimati'; SET extra_float_digits = -3")
    q2 = "SELECT id, groupml.predict('multi', ARRAY[f1, f2, f3], ROW(day, region::bigint, mobile)) FROM clicks"
    assert dict(db.execute(q2).fetchall()) == want
    # a date given as text is another type than at training: refused with the cast to write
    state, msg, hint = sql_error(db, "SELECT groupml.predict('multi', ARRAY[f1, f2, f3], ROW(day::text, region, "
                                     "mobile)) FROM clicks")
    assert state == "42804" and "day" in msg and "date" in msg and "::date" in hint, (msg, hint)
    state, msg, _ = sql_error(db, "SELECT groupml.predict('multi', ARRAY[f1, f2, f3], ROW(day, region)) FROM clicks")
    assert state == "42804" and "3 group columns" in msg and "2 values" in msg, msg
    state, msg, _ = sql_error(db, "SELECT groupml.predict('multi', ARRAY[f1, f2, f3], day) FROM clicks")
    assert state == "42804" and "1 value" in msg, msg


def test_a_group_without_a_model_is_an_error_or_null_as_asked(db, clicks):
    train(db, extra=", model_set => 'churn'")
    state, msg, hint = sql_error(db, "SELECT groupml.predict('churn', ARRAY[1.0, 2, 3], 'ZZ')")
    assert state == "22000" and "country = 'ZZ'" in msg and "on_missing" in hint, msg
    assert db.execute("SELECT groupml.predict('churn', ARRAY[1.0, 2, 3], 'ZZ', on_missing => 'null')"
                      ).fetchone()[0] is None
    assert db.execute("SELECT groupml.predict('churn', ARRAY[1.0, 2, 3], NULL::text, on_missing => 'null')"
                      ).fetchone()[0] is None
    assert sql_error(db, "SELECT groupml.predict('churn', ARRAY[1.0, 2, 3], 'ZZ', on_missing => 'skip')")[0] == \
        "22023"


def test_bad_inputs_of_the_routed_predict(db, clicks):
    train(db, extra=", model_set => 'churn'")
    state, msg, _ = sql_error(db, "SELECT groupml.predict('nope', ARRAY[1.0, 2, 3], 'AB')")
    assert state == "42704" and "nope" in msg
    assert sql_error(db, "SELECT groupml.predict(NULL::text, ARRAY[1.0, 2, 3], 'AB')")[0] == "22004"
    country = db.execute("SELECT country FROM clicks LIMIT 1").fetchone()[0]
    state, msg, _ = sql_error(db, "SELECT groupml.predict('churn', ARRAY[1.0, 2], %s::text)", [country])
    assert state == "2202E" and "3 features" in msg, msg
    assert sql_error(db, "SELECT groupml.predict('churn', ARRAY[1.0, 2, 3], 7)")[0] == "42804"
    assert db.execute("SELECT groupml.predict('churn', NULL::float8[], %s::text)", [country]).fetchone()[0] is None
    assert sql_error(db, "SELECT groupml.publish(NULL, 'x')")[0] == "22023"
    assert sql_error(db, "SELECT groupml.publish(123456, 'x')")[0] == "42704"
    assert sql_error(db, "SELECT groupml.activate_model_set('churn', 9)")[0] == "42704"
    assert sql_error(db, "SELECT groupml._predict_in_set('churn', ARRAY[1.0, 2, 3], NULL, 'error')")[0] == "22000"
    # an array group column cannot route rows: refused before a run is made
    db.execute("ALTER TABLE clicks ADD COLUMN tags text[]; UPDATE clicks SET tags = ARRAY[country]")
    runs = db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0]
    state, msg, _ = sql_error(db, f"CALL groupml.train_groups('clicks', ARRAY['tags'], {FEATS}, 'clicked', "
                                  f"'logistic', model_set => 'arr')")
    assert state == "0A000" and "tags" in msg, msg
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == runs


def test_predict_table_scores_every_row_like_predict(db, clicks):
    run_id = train(db, "ARRAY['country', 'mobile']", ", model_set => 'two'")
    want = by_fit(db, run_id, "jsonb_build_object('country', c.country, 'mobile', c.mobile)")
    db.execute("UPDATE clicks SET f2 = NULL WHERE id % 500 = 0")
    db.execute("UPDATE clicks SET f3 = 'NaN' WHERE id % 700 = 1")
    got = dict(db.execute(f"SELECT row_key, prediction FROM groupml.predict_table('two', 'clicks', 'id', {FEATS})"
                          ).fetchall())
    assert len(got) == 3000
    nulls = {i for i, p in got.items() if p is None}
    assert nulls == {i for i in range(1, 3001) if i % 500 == 0 or i % 700 == 1}
    assert {i: p for i, p in got.items() if i not in nulls} == {i: p for i, p in want.items() if i not in nulls}
    # the same under a forced parallel plan (the groups are scored by the leader)
    db.execute("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; "
               "SET max_parallel_workers_per_gather = 2")
    assert dict(db.execute(f"SELECT * FROM groupml.predict_table('two', 'clicks', 'id', {FEATS})").fetchall()) == got


def test_bad_inputs_of_predict_table(db, clicks):
    train(db, extra=", model_set => 'churn'")
    db.execute("CREATE TABLE other AS SELECT id, country::varchar AS c, region AS country, f1, f2, f3 FROM clicks")
    assert sql_error(db, f"SELECT * FROM groupml.predict_table('nope', 'clicks', 'id', {FEATS})")[0] == "42704"
    state, msg, _ = sql_error(db, "SELECT * FROM groupml.predict_table('churn', 'clicks', 'id', ARRAY['f1', 'f2'])")
    assert state == "2202E" and "3 features" in msg
    state, msg, _ = sql_error(db, f"SELECT * FROM groupml.predict_table('churn', 'other', 'id', {FEATS})")
    assert state == "42804" and "country" in msg and "text" in msg, msg
    # the same keys under another column name
    n = db.execute(f"SELECT count(prediction) FROM groupml.predict_table('churn', 'other', 'id', {FEATS}, "
                   f"group_by => ARRAY['c'])").fetchone()[0]
    assert n == 3000
    assert sql_error(db, f"SELECT * FROM groupml.predict_table('churn', 'clicks', 'country', {FEATS})")[0] == "42804"
    assert sql_error(db, f"SELECT * FROM groupml.predict_table('churn', 'clicks', 'nope', {FEATS})")[0] == "42703"
    assert sql_error(db, f"SELECT * FROM groupml.predict_table('churn', 'clicks', 'id', {FEATS}, "
                         f"on_missing => NULL)")[0] == "22023"
    db.execute("SELECT groupml.publish(run_id, 'churn') FROM groupml.runs")  # version 2, not cached yet
    db.execute("DELETE FROM groupml.model_set_models m USING groupml.model_set_versions v WHERE v.version_id = "
               "m.version_id AND v.version = 2 AND m.group_key = (SELECT group_key FROM groupml.models "
               "ORDER BY group_key::text LIMIT 1)")
    state, msg, _ = sql_error(db, f"SELECT * FROM groupml.predict_table('churn', 'clicks', 'id', {FEATS})")
    assert state == "22000" and "country = " in msg
    n = db.execute(f"SELECT count(*), count(prediction) FROM groupml.predict_table('churn', 'clicks', 'id', {FEATS}, "
                   f"on_missing => 'null')").fetchone()
    assert n[0] == 3000 and 0 < n[1] < 3000
    assert sql_error(db, "SELECT groupml._score_block(1, '\\x00'::bytea, 'error', false, '\\x00'::bytea)")[0] == "55000"
    # a group whose every row has a NULL feature needs no model: NULL predictions, no error
    db.execute("UPDATE clicks SET f1 = NULL WHERE country = (SELECT group_key->>'country' FROM groupml.models "
               "ORDER BY group_key::text LIMIT 1)")
    got = db.execute(f"SELECT count(*), count(prediction) FROM groupml.predict_table('churn', 'clicks', 'id', {FEATS})"
                     ).fetchone()
    assert got[0] == 3000 and 0 < got[1] < 3000, got


@pytest.fixture
def roles(cluster, dbname, db, clicks):
    """Two roles with the rights to train and publish, and one with none; their connections."""
    names = ("ms_owner", "ms_other", "ms_reader")
    for r in names:
        db.execute(f"CREATE ROLE {r} LOGIN")
        db.execute(f"GRANT SELECT ON clicks TO {r}")
    for r in names[:2]:
        db.execute(f"GRANT SELECT, INSERT, UPDATE ON groupml.runs TO {r}; GRANT SELECT, INSERT ON groupml.models TO {r}; "
                   f"GRANT INSERT ON groupml.trials, groupml.cost_runs TO {r}; GRANT USAGE ON SEQUENCE "
                   f"groupml.runs_run_id_seq, groupml.models_model_id_seq, groupml.cost_runs_run_id_seq, "
                   f"groupml.model_set_versions_version_id_seq TO {r}; GRANT INSERT, UPDATE, DELETE ON "
                   f"groupml.model_sets, groupml.model_set_versions, groupml.model_set_models TO {r}")
    conns = [psycopg.connect(cluster.dsn(dbname, user=r), autocommit=True) for r in names]
    try:
        yield conns
    finally:
        for c in conns:
            c.close()
        for r in names:
            db.execute(f"DROP OWNED BY {r}")
            db.execute(f"DROP ROLE {r}")


def test_row_security_owner_readers_and_admin(db, roles):
    owner, other, reader = roles
    train(owner, extra=", model_set => 'mine'")
    q = "SELECT count(groupml.predict('mine', ARRAY[f1, f2, f3], country)) FROM clicks"
    assert owner.execute(q).fetchone()[0] == 3000
    q_proba = "SELECT count(groupml.predict_proba('mine', ARRAY[f1, f2, f3], country)) FROM clicks"
    for conn in (other, reader):
        for query in (q, q_proba):
            state, msg, hint = sql_error(conn, query)
            assert state == "42501" and "mine" in msg and "grant_model_set" in hint, msg
        for fn in ("predict_table", "predict_proba_table"):
            assert sql_error(conn, f"SELECT * FROM groupml.{fn}('mine', 'clicks', 'id', {FEATS})")[0] == "42501"
        assert conn.execute("SELECT count(*) FROM groupml.model_set_models").fetchone()[0] == 0
    # another role can neither publish into the set, activate, grant nor drop it
    run_other = train(other)
    assert sql_error(other, "SELECT groupml.publish(%s, 'mine')", [run_other])[0] == "42501"
    assert sql_error(other, "SELECT groupml.activate_model_set('mine', 1)")[0] == "42501"
    assert sql_error(other, "SELECT groupml.grant_model_set('mine', 'ms_other')")[0] == "42501"
    assert sql_error(other, "SELECT groupml.drop_model_set('mine')")[0] == "42501"
    assert sql_error(other, "CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], "
                            "'clicked', 'logistic', model_set => 'mine')")[0] == "42501"
    assert sql_error(reader, "SELECT groupml.publish(1, 'x')")[0] == "42501"     # no table rights
    # granted: the reader scores, sees the set, cannot change it; revoked: refused again
    assert owner.execute("SELECT groupml.grant_model_set('mine', 'ms_reader')").fetchone()[0] is True
    assert reader.execute(q).fetchone()[0] == 3000
    assert reader.execute(q_proba).fetchone()[0] == 3000
    assert reader.execute(f"SELECT count(*) FROM groupml.predict_table('mine', 'clicks', 'id', {FEATS})"
                          ).fetchone()[0] == 3000
    assert reader.execute("SELECT name, active_version FROM groupml.model_sets").fetchall() == [("mine", 1)]
    assert sql_error(reader, "UPDATE groupml.model_sets SET active_version = NULL")[0] == "42501"
    assert sql_error(reader, "SELECT groupml.activate_model_set('mine', 1)")[0] == "42501"
    assert sql_error(other, "SELECT groupml.activate_model_set('mine', 1)")[0] == "42501"
    assert owner.execute("SELECT groupml.revoke_model_set('mine', 'ms_reader')").fetchone()[0] is True
    assert sql_error(reader, q)[0] == "42501"            # the next statement sees the revoke
    # groupml_admin sees and changes every set
    db.execute("GRANT groupml_admin TO ms_other")
    assert other.execute(q).fetchone()[0] == 3000
    assert other.execute("SELECT groupml.activate_model_set('mine', 1)").fetchone()[0] == 1
    db.execute("REVOKE groupml_admin FROM ms_other")


def test_pg_dump_and_restore_keep_the_sets(cluster, dbname, db, clicks, tmp_path):
    train(db, extra=", model_set => 'churn'")
    q = "SELECT id, groupml.predict('churn', ARRAY[f1, f2, f3], country) FROM clicks ORDER BY id"
    want = db.execute(q).fetchall()
    bindir = pg_bindir()                        # the server's own (a pg_ctl on PATH may be a link elsewhere)
    dump = tmp_path / "db.dump"
    env = dict(os.environ)
    user = ["-U", "postgres", "-h", "127.0.0.1", "-p", str(cluster.port)]
    subprocess.run([os.path.join(bindir, "pg_dump"), *user, "-Fc", "-f", str(dump), dbname], check=True, env=env)
    restored = dbname + "_r"
    db.execute(f"CREATE DATABASE {restored} TEMPLATE template0")
    try:
        subprocess.run([os.path.join(bindir, "pg_restore"), *user, "-d", restored, str(dump)], check=True, env=env)
        with psycopg.connect(cluster.dsn(restored), autocommit=True) as conn:
            assert conn.execute("SELECT name, active_version FROM groupml.model_sets").fetchall() == [("churn", 1)]
            assert conn.execute(q).fetchall() == want
            # the version sequence continues after the restored ids
            run_id = conn.execute("SELECT run_id FROM groupml.runs").fetchone()[0]
            assert conn.execute("SELECT groupml.publish(%s, 'churn')", [run_id]).fetchone()[0] == 2
    finally:
        db.execute(f"DROP DATABASE {restored}")


def test_numpy_scores_agree(db, clicks):
    # the table scorer's classes equal the model's own decision on the client
    from groupml.learners import load_model

    train(db, extra=", model_set => 'churn'")
    models = {k: load_model(bytes(m)) for k, m in db.execute(
        "SELECT group_key->>'country', (fit).model FROM groupml.model_set_models").fetchall()}
    rows = db.execute("SELECT c.id, c.country, c.f1, c.f2, c.f3, p.prediction FROM clicks c JOIN "
                      f"groupml.predict_table('churn', 'clicks', 'id', {FEATS}) p ON p.row_key = c.id").fetchall()
    for _, country, f1, f2, f3, p in rows:
        assert models[country].predict(np.array([[f1, f2, f3]]))[0] == p


def test_a_run_on_worker_backends_activates_its_version_too(db, clicks):
    run_id = train(db, extra=", workers => 2, model_set => 'churn'")
    assert db.execute("SELECT v.run_id, v.status, s.active_version FROM groupml.model_set_versions v JOIN "
                      "groupml.model_sets s ON s.name = v.set_name").fetchone() == (run_id, "ready", 1)
    want = by_fit(db, run_id, "jsonb_build_object('country', c.country)")
    assert dict(db.execute(f"SELECT * FROM groupml.predict_table('churn', 'clicks', 'id', {FEATS})").fetchall()) == want


def test_retraining_activates_a_new_version_only_when_it_is_no_worse(db, clicks):
    train(db, extra=", model_set => 'churn'")
    db.execute("CALL groupml.retrain_model_set('churn')")         # the same rows: the same scores
    assert db.execute("SELECT active_version FROM groupml.model_sets").fetchone()[0] == 2
    assert db.execute("SELECT decision FROM groupml.model_set_versions WHERE version = 2").fetchone()[0].startswith(
        "activated: mean validation accuracy")
    db.execute("UPDATE clicks SET clicked = (id * 7919) % 13 < 6")   # labels the features cannot predict
    db.execute("CALL groupml.retrain_model_set('churn', margin => 0.01)")
    v3 = db.execute("SELECT status, decision FROM groupml.model_set_versions WHERE version = 3").fetchone()
    assert v3[0] == "ready" and v3[1].startswith("kept version 2: the new mean validation accuracy"), v3
    assert db.execute("SELECT active_version FROM groupml.model_sets").fetchone()[0] == 2
    db.execute("CALL groupml.retrain_model_set('churn', margin => 1)")
    assert db.execute("SELECT active_version FROM groupml.model_sets").fetchone()[0] == 4
    # it repeats the active version's run: the same source, columns and search
    assert db.execute("SELECT count(DISTINCT (source, group_by, features, label, family, search)) FROM groupml.runs"
                      ).fetchone()[0] == 1
    assert sql_error(db, "CALL groupml.retrain_model_set('churn', margin => -1)")[0] == "22023"
    assert sql_error(db, "CALL groupml.retrain_model_set('nope')")[0] == "42704"


def test_pg_cron_retrains_a_model_set(cluster, db, dbname, clicks):
    train(db, extra=", model_set => 'churn'")
    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as pg:
        pg.execute("CREATE EXTENSION IF NOT EXISTS groupml CASCADE")
        pg.execute("CREATE EXTENSION IF NOT EXISTS pg_cron")
        jobid = None
        try:
            assert sql_error(pg, "SELECT groupml.schedule_retraining('churn', 'bogus', database => %s)",
                             [dbname])[0] == "22023"
            jobid = pg.execute("SELECT groupml.schedule_retraining('churn', '* * * * *', margin => 0.5, "
                               "database => %s)", [dbname]).fetchone()[0]
            assert pg.execute("SELECT command, database, jobname FROM cron.job WHERE jobid = %s", [jobid]
                              ).fetchone() == ("CALL groupml.retrain_model_set('churn', margin => 0.5)", dbname,
                                               "groupml_retrain_churn")
            runs = cron_runs(pg, jobid)
            pg.execute("SELECT cron.unschedule(%s)", [jobid])
            jobid = None
            assert runs and runs[0] == ("succeeded", "CALL"), runs
        finally:
            if jobid is not None:
                pg.execute("SELECT cron.unschedule(%s)", [jobid])
            pg.execute("DROP EXTENSION IF EXISTS pg_cron")
            pg.execute("DROP EXTENSION IF EXISTS groupml")
    assert db.execute("SELECT v.version, v.decision LIKE 'activated%%', s.active_version FROM groupml.model_sets s "
                      "JOIN groupml.model_set_versions v ON v.set_name = s.name ORDER BY v.version DESC LIMIT 1"
                      ).fetchone() == (2, True, 2)


def test_parallel_labels_are_honest_and_parallel_settings_do_not_break_scoring(db, clicks):
    # predict with a set reads the catalog on first use (PARALLEL UNSAFE: never in a parallel
    # plan); _score_block uses the models predict_table loaded into this backend (RESTRICTED)
    labels = dict(db.execute(
        "SELECT p.oid::regprocedure::text, p.proparallel FROM pg_proc p WHERE p.pronamespace = 'groupml'::regnamespace "
        "AND p.proname IN ('predict', '_predict_in_set', 'predict_proba', '_predict_proba_in_set', '_score_block', "
        "'predict_table', 'predict_proba_table')").fetchall())
    assert labels == {"groupml.predict(groupml.fit,double precision[])": "s",
                      "groupml.predict(text,double precision[],anycompatible,text)": "u",
                      "groupml._predict_in_set(text,double precision[],bytea,text)": "u",
                      "groupml.predict_proba(groupml.fit,double precision[])": "s",
                      "groupml.predict_proba(text,double precision[],anycompatible,text)": "u",
                      "groupml._predict_proba_in_set(text,double precision[],bytea,text)": "u",
                      "groupml._score_block(bigint,bytea,text,boolean,bytea)": "r",
                      "groupml.predict_table(text,regclass,text,text[],text[],text)": "u",
                      "groupml.predict_proba_table(text,regclass,text,text[],text[],text)": "u"}, labels
    run_id = train(db, extra=", model_set => 'churn'")
    db.execute("SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; "
               "SET max_parallel_workers_per_gather = 2")
    q = "SELECT id, groupml.predict('churn', ARRAY[f1, f2, f3], country) FROM clicks"
    plan = "\n".join(r[0] for r in db.execute("EXPLAIN " + q))
    assert "Gather" not in plan, plan
    assert dict(db.execute(q).fetchall()) == by_fit(db, run_id, "jsonb_build_object('country', c.country)")


def by_fit_proba(db, run_id):
    """{id: probability} of every row by the fit form of predict_proba (the reference)."""
    return dict(db.execute(
        "SELECT c.id, groupml.predict_proba(m.fit, ARRAY[c.f1, c.f2, c.f3]) FROM clicks c JOIN groupml.models m "
        "ON m.run_id = %s AND m.group_key = jsonb_build_object('country', c.country) WHERE (m.fit).status = 'ok'",
        [run_id]).fetchall())


def same_values(got, want):
    """The same rows with the same values up to rounding (a block of rows and one row may take
    different BLAS paths)."""
    keys = sorted(want)
    return sorted(got) == keys and np.allclose([got[k] for k in keys], [want[k] for k in keys], rtol=1e-12, atol=0)


def test_predict_proba_with_a_set_routes_rows_like_predict(db, clicks):
    run_id = train(db, extra=", model_set => 'churn'")
    want = by_fit_proba(db, run_id)
    got = dict(db.execute("SELECT id, groupml.predict_proba('churn', ARRAY[f1, f2, f3], country) FROM clicks"
                          ).fetchall())
    assert got == want and len(got) == 3000
    assert all(0.0 < p < 1.0 for p in got.values())
    # a varchar key compares with the text column; several key columns as ROW(...)
    assert db.execute("SELECT count(groupml.predict_proba('churn', ARRAY[f1, f2, f3], country::varchar)) FROM clicks"
                      ).fetchone()[0] == 3000
    train(db, "ARRAY['day', 'region']", ", model_set => 'multi'")
    n = db.execute("SELECT count(groupml.predict_proba('multi', ARRAY[f1, f2, f3], ROW(day, region::smallint))) "
                   "FROM clicks").fetchone()[0]
    assert n == 3000
    # the table form gives the same probabilities, a NULL for a row with a NULL feature
    db.execute("UPDATE clicks SET f2 = NULL WHERE id % 500 = 0")
    table = dict(db.execute(f"SELECT row_key, probability FROM groupml.predict_proba_table('churn', 'clicks', 'id', "
                            f"{FEATS})").fetchall())
    assert {i for i, p in table.items() if p is None} == set(range(500, 3001, 500))
    assert same_values({i: p for i, p in table.items() if p is not None}, {i: p for i, p in want.items() if i % 500})


def test_bad_inputs_of_predict_proba_with_a_set(db, clicks):
    train(db, extra=", model_set => 'churn'")
    country = db.execute("SELECT country FROM clicks LIMIT 1").fetchone()[0]
    state, msg, _ = sql_error(db, "SELECT groupml.predict_proba('nope', ARRAY[1.0, 2, 3], 'AB')")
    assert state == "42704" and "nope" in msg
    assert sql_error(db, "SELECT groupml.predict_proba(NULL::text, ARRAY[1.0, 2, 3], 'AB')")[0] == "22004"
    state, msg, _ = sql_error(db, "SELECT groupml.predict_proba('churn', ARRAY[1.0, 2], %s::text)", [country])
    assert state == "2202E" and "3 features" in msg, msg
    state, msg, hint = sql_error(db, "SELECT groupml.predict_proba('churn', ARRAY[1.0, 2, 3], 7)")
    assert state == "42804" and "country" in msg and "text" in hint, msg
    state, msg, _ = sql_error(db, "SELECT groupml.predict_proba('churn', ARRAY[1.0, 2, 3], ROW(%s::text, 1))",
                              [country])
    assert state == "42804" and "2 values" in msg, msg
    state, msg, hint = sql_error(db, "SELECT groupml.predict_proba('churn', ARRAY[1.0, 2, 3], 'ZZ')")
    assert state == "22000" and "country = 'ZZ'" in msg and "predict_proba" in hint, msg
    assert db.execute("SELECT groupml.predict_proba('churn', ARRAY[1.0, 2, 3], 'ZZ', on_missing => 'null')"
                      ).fetchone()[0] is None
    assert sql_error(db, "SELECT groupml.predict_proba('churn', ARRAY[1.0, 2, 3], 'ZZ', on_missing => 'skip')"
                     )[0] == "22023"
    assert db.execute("SELECT groupml.predict_proba('churn', NULL::float8[], %s::text)", [country]
                      ).fetchone()[0] is None
    assert sql_error(db, "SELECT groupml.predict_proba('churn', ARRAY[1.0, 'NaN', 3], %s::text)", [country]
                     )[0] == "22000"
    assert sql_error(db, "SELECT groupml._predict_proba_in_set('churn', ARRAY[1.0, 2, 3], NULL, 'error')")[0] == \
        "22000"
    assert sql_error(db, f"SELECT * FROM groupml.predict_proba_table('nope', 'clicks', 'id', {FEATS})")[0] == "42704"
    state, msg, _ = sql_error(db, "SELECT * FROM groupml.predict_proba_table('churn', 'clicks', 'id', "
                                  "ARRAY['f1', 'f2'])")
    assert state == "2202E" and "3 features" in msg
    state, msg, _ = sql_error(db, f"SELECT * FROM groupml.predict_proba_table('churn', 'clicks', 'country', "
                                  f"{FEATS})")
    assert state == "42804" and "predict_proba_table" in msg, msg
    # a set of regressors has no probabilities (0A000), per row and per table
    db.execute("ALTER TABLE clicks ADD COLUMN spend float8; UPDATE clicks SET spend = f1 * 2 + f2")
    db.execute(f"CALL groupml.train_groups('clicks', ARRAY['country'], {FEATS}, 'spend', 'linear', "
               f"model_set => 'spend')")
    assert sql_error(db, "SELECT groupml.predict_proba('spend', ARRAY[1.0, 2, 3], %s::text)", [country])[0] == \
        "0A000"
    assert sql_error(db, f"SELECT * FROM groupml.predict_proba_table('spend', 'clicks', 'id', {FEATS})")[0] == \
        "0A000"
    # predict_table of the regressors: full-precision values, equal to the fit form's
    want = dict(db.execute("SELECT c.id, groupml.predict(m.fit, ARRAY[c.f1, c.f2, c.f3]) FROM clicks c JOIN "
                           "groupml.models m ON m.run_id = (SELECT max(run_id) FROM groupml.runs) AND m.group_key = "
                           "jsonb_build_object('country', c.country)").fetchall())
    assert same_values(dict(db.execute(f"SELECT * FROM groupml.predict_table('spend', 'clicks', 'id', {FEATS})"
                                       ).fetchall()), want)
