"""learn_over_groups under a hashed plan: the groups trained ahead in helper processes give
the same fits as groups trained one after another in the backend."""

import json

import pytest

from groupml.datagen import create_table, grouped_classification

pytestmark = pytest.mark.integration

GRID = json.dumps({"l2": [0.001, 0.1], "class_weight": [None, "balanced"]})
QUERY = ("SELECT country, (f).status, (f).params, (f).score, (f).model FROM (SELECT country, "
         "groupml.learn_over_groups(ARRAY[f1, f2, f3], clicked, 'logistic', %s::jsonb, %s::jsonb) AS f "
         "FROM clicks GROUP BY country) s ORDER BY country")


@pytest.fixture
def clicks(db):
    create_table(db, "clicks", grouped_classification(30000, 5, 3, seed=11, exponent=1.1))
    db.execute("ANALYZE clicks")


def fits(db, options):
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    rows = db.execute(QUERY, [GRID, json.dumps(options)]).fetchall()
    return [(c, s, p, sc, bytes(m) if m is not None else None) for c, s, p, sc, m in rows], notices


def test_hashed_plan_trains_in_helpers_with_the_same_fits(db, clicks):
    db.execute("SET enable_sort = off")         # a hashed plan: every group's rows before the first final call
    plan = "\n".join(r[0] for r in db.execute("EXPLAIN " + QUERY, [GRID, "{}"]).fetchall())
    assert "HashAggregate" in plan, plan
    ahead, said = fits(db, {"threads": 2, "progress": True})
    assert "groupml: training 5 groups ahead in helper processes" in said, said
    alone, said = fits(db, {"threads": 1, "progress": True})
    assert not any("ahead" in n for n in said)
    assert len(ahead) == 5 and all(r[1] == "ok" for r in ahead)
    assert ahead == alone                       # params, scores and model bytes equal


def test_little_work_stays_in_threads(db, clicks):
    db.execute("SET enable_sort = off")
    # one iteration per configuration: starting helpers would cost more than it saves
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    rows = db.execute(QUERY, [json.dumps({"l2": [0.001], "max_iter": 1}),
                              json.dumps({"threads": 2, "progress": True})]).fetchall()
    assert len(rows) == 5 and not any("ahead" in n for n in notices), notices


def test_sorted_plan_still_trains_every_group(db, clicks):
    db.execute("SET enable_hashagg = off")      # GroupAggregate: one buffer at a time, nothing ahead
    plan = "\n".join(r[0] for r in db.execute("EXPLAIN " + QUERY, [GRID, "{}"]).fetchall())
    assert "GroupAggregate" in plan, plan
    sorted_fits, said = fits(db, {"threads": 2, "progress": True})
    assert not any("ahead" in n for n in said)
    db.execute("RESET enable_hashagg")
    db.execute("SET enable_sort = off")
    hashed, _ = fits(db, {"threads": 2})
    assert sorted_fits == hashed
