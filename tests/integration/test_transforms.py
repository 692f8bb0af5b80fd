"""Raw columns in: train_groups on int, numeric, bool, text, enum, date and timestamptz columns
with NULLs; the transform stored with each model; predict_row on the same raw columns."""

import json

import numpy as np
import pytest

from groupml.learners import TransformedModel, load_model
from groupml.transforms import Transform
from groupml.transforms.sql import encode_exprs
from pg_helpers import sql_error

pytestmark = pytest.mark.integration

GRID = '{"l2": [0.01, 1.0]}'
FEATS = ["qty", "amount", "vip", "device", "mood", "day", "seen"]
OPTS = '{"transform": {"max_categories": 3}}'


@pytest.fixture
def shop(db):
    db.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')")
    db.execute("CREATE TABLE shop (id int PRIMARY KEY, country text, qty int, amount numeric, vip bool, device text, "
               "mood mood, day date, seen timestamptz, bought int)")
    rng = np.random.default_rng(5)
    rows = []
    devices = ["phone", "desktop", "tablet", "tv", "watch"]
    moods = ["sad", "ok", "happy"]
    for i in range(1600):
        country = "FR" if i % 2 else "DE"
        qty = int(rng.integers(0, 10))
        amount = round(float(rng.normal(50, 20)), 2)
        vip = bool(rng.random() < 0.3)
        device = devices[min(int(rng.exponential(1.2)), 4)]
        mood = moods[int(rng.integers(0, 3))]
        day = f"2024-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 28)):02d}"
        seen = f"{day} {int(rng.integers(0, 24)):02d}:30:00+02"
        z = 0.3 * qty + 0.03 * (amount - 50) + (1.5 if vip else 0) + (1.0 if device == "phone" else -0.5) \
            + (0.8 if mood == "happy" else 0) - 2 + rng.normal(0, 1)
        r = [i, country, qty, amount, vip, device, mood, day, seen, int(z > 0)]
        for j in range(2, 9):          # about 5% NULLs in every feature column
            if rng.random() < 0.05:
                r[j] = None
        rows.append(r)
    with db.cursor() as cur:
        cur.executemany("INSERT INTO shop VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
    db.execute("ANALYZE shop")


def train(db, features=FEATS, options=OPTS, extra="", source="shop"):
    arr = "ARRAY[" + ", ".join(f"'{f}'" for f in features) + "]"
    return db.execute(f"CALL groupml.train_groups('{source}', ARRAY['country'], {arr}, 'bought', 'logistic', "
                      f"%s::jsonb, %s::jsonb{extra})", [GRID, options]).fetchone()[0]


def fits(db, run_id):
    return {k: load_model(bytes(m)) for k, m in db.execute(
        "SELECT group_key->>'country', (fit).model FROM groupml.models WHERE run_id = %s", [run_id]).fetchall()}


def test_raw_columns_train_and_score_with_the_stored_transform(db, shop):
    run_id = train(db)
    stored = db.execute("SELECT transform FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0]
    t = Transform.from_json(stored)
    names = t.output_names()
    assert names[:2] == ["qty", "qty:missing"]
    assert [n for n in names if n.startswith("device")] == ["device=phone", "device=desktop", "device=tablet",
                                                            "device:other", "device:missing"]
    assert "mood=happy" in names and "day:dow" in names and "seen:hour" in names
    models = fits(db, run_id)
    assert set(models) == {"FR", "DE"}
    for m in models.values():
        assert isinstance(m, TransformedModel) and m.transform.to_json() == t.to_json()
        assert m.n_features == t.width
    n_features = db.execute("SELECT DISTINCT (fit).n_features FROM groupml.models WHERE run_id = %s",
                            [run_id]).fetchall()
    assert n_features == [(t.width,)]
    # the training scan's SQL encoding equals the Python encoding applied at scoring
    enc = db.execute(f"SELECT id, ARRAY[{', '.join(encode_exprs(t))}]::float8[], to_jsonb(s) FROM shop s "
                     f"ORDER BY id").fetchall()
    X_sql = np.array([e for _, e, _ in enc])
    X_py = t.transform([r for _, _, r in enc])
    np.testing.assert_allclose(X_sql, X_py, rtol=1e-12, atol=1e-9)
    # predict_row on the raw columns == predict on the encoded vector, in every form
    cols = ", ".join(f"c.{f}" for f in FEATS)
    by_id = {i: e for i, e, _ in enc}
    rows = db.execute(
        f"SELECT c.id, groupml.predict_row(m.fit, c), groupml.predict_row(m.fit, to_jsonb(c)), "
        f"groupml.predict_row(m.fit, ROW({cols})), groupml.predict_proba_row(m.fit, c), m.fit "
        f"FROM shop c JOIN groupml.models m ON m.run_id = %s AND m.group_key->>'country' = c.country "
        f"ORDER BY c.id LIMIT 400", [run_id]).fetchall()
    assert len(rows) == 400
    for i, a, b, c, p, _fit in rows:
        assert a == b == c
        label, proba = db.execute("SELECT groupml.predict(m.fit, %s::float8[]), groupml.predict_proba(m.fit, "
                                  "%s::float8[]) FROM groupml.models m, shop s WHERE m.run_id = %s AND s.id = %s "
                                  "AND m.group_key->>'country' = s.country",
                                  [by_id[i], by_id[i], run_id, i]).fetchone()
        assert a == label and p == pytest.approx(proba, abs=1e-12)
    # the models learned something from the encoded columns
    acc = db.execute("SELECT avg((groupml.predict_row(m.fit, c) = c.bought)::int) FROM shop c JOIN groupml.models "
                     "m ON m.run_id = %s AND m.group_key->>'country' = c.country", [run_id]).fetchone()[0]
    assert acc > 0.7


def test_unseen_categories_and_nulls_at_scoring(db, shop):
    run_id = train(db)
    fit = "(SELECT fit FROM groupml.models WHERE run_id = %s AND group_key->>'country' = 'FR')"
    base = {"qty": 3, "amount": 40.5, "vip": False, "device": "tv", "mood": "ok", "day": "2024-05-06",
            "seen": "2024-05-06T10:00:00+00:00"}

    def p(row):
        return db.execute(f"SELECT groupml.predict_proba_row({fit}, %s::jsonb)", [run_id, json.dumps(row)]).fetchone()[0]

    t = fits(db, run_id)["FR"].transform
    # an unseen device falls into the 'other' column, like the capped-away 'tv'
    assert p(dict(base, device="fridge")) == p(base)
    assert t.transform([dict(base, device="fridge")])[0][t.output_names().index("device:other")] == 1.0
    # NULLs (and an unknown enum label) are imputed and flagged; the score is finite
    nulls = {k: None for k in base}
    assert 0.0 <= p(nulls) <= 1.0
    x = t.transform([nulls])[0]
    assert x[t.output_names().index("qty:missing")] == 1.0
    enc = db.execute(f"SELECT groupml.predict_proba({fit}, %s::float8[])", [run_id, list(x)]).fetchone()[0]
    assert p(nulls) == pytest.approx(enc, abs=1e-12)
    # a NULL row argument gives NULL (STRICT); extra keys are ignored
    assert db.execute(f"SELECT groupml.predict_row({fit}, NULL::jsonb)", [run_id]).fetchone()[0] is None
    assert p(dict(base, extra=1)) == p(base)


def test_the_executor_path_carries_the_transform(db, shop):
    # standardised inputs (scale 'auto' for a GLM): the solvers of both paths reach the same
    # optimum (raw epoch days near 20,000 beside 0/1 columns leave lbfgs far from it)
    opts = OPTS
    one = train(db, options=opts)
    two = train(db, options=opts, extra=", NULL, workers => 2")                  # a parallel snapshot build
    serial = train(db, options=opts, extra=", NULL, workers => 1, strategy => 'grouped'")   # a serial one
    a = fits(db, one)
    assert set(a) == {"FR", "DE"}
    for run in (two, serial):
        b = fits(db, run)
        assert set(b) == set(a)
        for k in a:
            assert isinstance(b[k], TransformedModel) and b[k].transform.to_json() == a[k].transform.to_json()
            np.testing.assert_allclose(b[k].coef, a[k].coef, atol=1e-5)
    got = db.execute("SELECT groupml.predict_proba_row(m.fit, c) FROM shop c JOIN groupml.models m ON m.run_id = %s "
                     "AND m.group_key->>'country' = c.country ORDER BY c.id LIMIT 50", [two]).fetchall()
    assert all(0.0 <= g[0] <= 1.0 for g in got)


def test_bad_inputs_are_refused(db, shop):
    db.execute("ALTER TABLE shop ADD COLUMN extra jsonb, ADD COLUMN tags int[]")
    runs = db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0]
    for col in ("extra", "tags"):
        e = sql_error(db, f"CALL groupml.train_groups('shop', ARRAY['country'], ARRAY['qty', '{col}'], 'bought', "
                          f"'logistic')")
        assert e[0] == "0A000", e
        assert col in e[1] and "Supported feature types" in e[2]
    for bad in ('{"transform": {"max_categories": 0}}', '{"transform": {"scale": "minmax"}}',
                '{"transform": "yes"}'):
        e = sql_error(db, "CALL groupml.train_groups('shop', ARRAY['country'], ARRAY['qty', 'device'], 'bought', "
                          "'logistic', '{}', %s::jsonb)", [bad])
        assert e[0] == "22023", (bad, e)
    # "transform": false keeps the numeric-only rule
    e = sql_error(db, "CALL groupml.train_groups('shop', ARRAY['country'], ARRAY['qty', 'device'], 'bought', "
                      "'logistic', '{}', '{\"transform\": false}')")
    assert e[0] == "42804"
    e = sql_error(db, "CALL groupml.train_groups('shop', ARRAY['country'], ARRAY['qty', 'device'], 'bought', "
                      "'logistic', '{}', '{\"snapshot\": 1}', NULL, workers => 2)")
    assert e[0] == "0A000" and "snapshot" in e[1]
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == runs     # nothing half-written
    # a numeric run stores no transform, and predict_row refuses its fit
    numeric = train(db, features=["qty", "amount"], options="{}")
    assert db.execute("SELECT transform FROM groupml.runs WHERE run_id = %s", [numeric]).fetchone()[0] is None
    fit = "(SELECT fit FROM groupml.models WHERE run_id = %s AND group_key->>'country' = 'FR')"
    e = sql_error(db, f"SELECT groupml.predict_row({fit}, '{{\"qty\": 1, \"amount\": 2}}'::jsonb)", [numeric])
    assert e[0] == "22023" and "predict(fit" in e[2]
    raw = train(db)
    e = sql_error(db, f"SELECT groupml.predict_row({fit}, '{{\"qty\": 1}}'::jsonb)", [raw])
    assert e[0] == "42703" and "amount" in e[1]
    e = sql_error(db, f"SELECT groupml.predict_row({fit}, ROW(1, 2.5))", [raw])
    assert e[0] == "42703"
    row = {"qty": "three", "amount": 1, "vip": True, "device": "tv", "mood": "ok", "day": "2024-01-01",
           "seen": None}
    e = sql_error(db, f"SELECT groupml.predict_row({fit}, %s::jsonb)", [raw, json.dumps(row)])
    assert e[0] == "42804" and "qty" in e[1]
    e = sql_error(db, f"SELECT groupml.predict_row({fit}, '[1, 2]'::jsonb)", [raw])
    assert e[0] == "42804"


def test_a_resumed_run_keeps_its_first_transform(db, shop):
    run_id = train(db)
    first = db.execute("SELECT transform::text FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0]
    # as if the call had stopped before group DE was committed
    for table in ("models", "trials"):
        db.execute(f"DELETE FROM groupml.{table} WHERE run_id = %s AND group_key->>'country' = 'DE'", [run_id])
    db.execute("INSERT INTO shop (id, country, qty, device, bought) SELECT 10000 + g, 'DE', 99, 'fridge', 1 "
               "FROM generate_series(1, 400) g")
    db.execute(f"CALL groupml.train_groups('shop', ARRAY['country'], ARRAY[{', '.join(repr(f) for f in FEATS)}], "
               f"'bought', 'logistic', %s::jsonb, %s::jsonb, {run_id})", [GRID, OPTS])
    assert db.execute("SELECT transform::text FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == first
    assert fits(db, run_id)["DE"].transform.to_json() == Transform.from_json(first).to_json()


def test_an_empty_source_trains_no_groups(db):
    db.execute("CREATE TABLE words (country text, f1 text, clicked boolean)")
    for extra in ("", ", NULL, workers => 2"):
        run_id = db.execute(f"CALL groupml.train_groups('words', ARRAY['country'], ARRAY['f1'], 'clicked', "
                            f"'logistic', '{{}}', '{{}}'{extra})").fetchone()[0]
        status, t = db.execute("SELECT status, transform FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()
        assert status == "done" and Transform.from_json(t).output_names() == ["f1:other"]


@pytest.mark.parametrize("model, spec, scaled", [
    ("mlp", {"method": "grid", "space": {"lr": [0.01], "layers": ["8"], "epochs": [4], "batch_size": [64]}}, True),
    ("lightgbm", {"num_leaves": [7], "num_boost_round": [20]}, False)])
def test_other_families_train_on_raw_columns(db, shop, model, spec, scaled):
    arr = "ARRAY[" + ", ".join(f"'{f}'" for f in FEATS) + "]"
    run_id = db.execute(f"CALL groupml.train_groups('shop', ARRAY['country'], {arr}, 'bought', %s, %s::jsonb, "
                        f"%s::jsonb)", [model, json.dumps(spec), OPTS]).fetchone()[0]
    t = Transform.from_json(db.execute("SELECT transform FROM groupml.runs WHERE run_id = %s",
                                       [run_id]).fetchone()[0])
    assert t.settings["scaled"] is scaled          # scale 'auto': MLPs standardised, trees not
    rows = db.execute("SELECT groupml.predict_proba_row(m.fit, c), groupml.predict_proba(m.fit, %s::float8[]) "
                      "FROM shop c JOIN groupml.models m ON m.run_id = %s AND m.group_key->>'country' = c.country "
                      "WHERE c.id = 7", [list(t.transform([{f: None for f in FEATS}])[0]), run_id]).fetchall()
    assert len(rows) == 1 and 0.0 <= rows[0][0] <= 1.0
    # an all-NULL row through predict_proba_row equals the imputed vector through predict_proba
    nulls = db.execute("SELECT groupml.predict_proba_row(m.fit, %s::jsonb) FROM groupml.models m WHERE m.run_id = %s "
                       "AND m.group_key->>'country' = 'FR'", [json.dumps({f: None for f in FEATS}), run_id]).fetchone()
    enc = db.execute("SELECT groupml.predict_proba(m.fit, %s::float8[]) FROM groupml.models m WHERE m.run_id = %s "
                     "AND m.group_key->>'country' = 'FR'", [list(t.transform([{f: None for f in FEATS}])[0]),
                                                            run_id]).fetchone()
    assert nulls[0] == pytest.approx(enc[0], abs=1e-12)


def test_explain_and_auto_workers_take_raw_columns(db, shop):
    arr = "ARRAY[" + ", ".join(f"'{f}'" for f in FEATS) + "]"
    rows = db.execute(f"SELECT strategy, chosen FROM groupml.explain_train_groups('shop', ARRAY['country'], {arr}, "
                      f"'bought', 'logistic', %s::jsonb, %s::jsonb, workers => 2)", [GRID, OPTS]).fetchall()
    assert any(chosen for _, chosen in rows)
    run_id = train(db, extra=", NULL, workers => 0")
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    assert isinstance(fits(db, run_id)["FR"], TransformedModel)


def test_predict_row_runs_in_parallel_workers(db, shop):
    # PARALLEL SAFE for real: scoring raw rows runs no statement in a parallel worker
    run_id = train(db)
    db.execute("CREATE TABLE pts WITH (fillfactor = 10) AS SELECT * FROM shop")
    db.execute("ANALYZE pts")
    sql = ("SELECT c.id, groupml.predict_row(m.fit, c), groupml.predict_proba_row(m.fit, to_jsonb(c)) FROM pts c "
           f"JOIN groupml.models m ON m.run_id = {int(run_id)} AND m.group_key->>'country' = c.country")
    serial = sorted(db.execute(sql).fetchall())
    for s in ("SET parallel_setup_cost = 0", "SET parallel_tuple_cost = 0", "SET min_parallel_table_scan_size = 0",
              "SET max_parallel_workers_per_gather = 2", "SET parallel_leader_participation = off"):
        db.execute(s)
    plan = db.execute(f"EXPLAIN (VERBOSE, FORMAT JSON) {sql}").fetchone()[0][0]["Plan"]

    def nodes(node):
        yield node
        for child in node.get("Plans", ()):
            yield from nodes(child)

    below = [out for g in nodes(plan) if g["Node Type"] in ("Gather", "Gather Merge")
             for n in nodes(g) if n is not g for out in n.get("Output", ())]
    assert any("groupml.predict_row(" in o for o in below) and any("groupml.predict_proba_row(" in o for o in below), \
        plan
    assert sorted(db.execute(sql).fetchall()) == serial
