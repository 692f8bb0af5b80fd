"""MLP and LightGBM through learn_over_groups and predict (sequential and sampling learners)."""

import json

import numpy as np
import pytest

from groupml.datagen import create_table, grouped_classification
from groupml.learners import load_model

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("model,search", [
    ("mlp", {"layers": ["8"], "epochs": [4], "lr": [0.01, 0.05], "seed": 3}),
    ("lightgbm", {"num_leaves": [7, 15], "num_boost_round": [20], "seed": 3}),
])
def test_nonlinear_learners_end_to_end(db, model, search):
    create_table(db, "clicks", grouped_classification(3000, 2, 4, seed=41))
    db.execute("CREATE TABLE m AS SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, %s, "
               "%s::jsonb) AS fit FROM clicks GROUP BY country", [model, json.dumps(search)])
    fits = db.execute("SELECT country, (fit).status, (fit).family, (fit).metric, (fit).trials, (fit).model "
                      "FROM m").fetchall()
    assert len(fits) == 2
    for _c, status, family, metric, trials, blob in fits:
        assert status == "ok" and family == model and metric == "logloss" and len(trials) == 2
        assert load_model(bytes(blob)).family == model
    rows = db.execute("SELECT c.f1, c.f2, c.f3, c.f4, (m.fit).model, groupml.predict_proba(m.fit, "
                      "ARRAY[c.f1, c.f2, c.f3, c.f4]) FROM clicks c JOIN m USING (country) LIMIT 50").fetchall()
    for f1, f2, f3, f4, blob, p in rows:
        expected = load_model(bytes(blob)).predict_proba(np.array([[f1, f2, f3, f4]]))[0]
        assert p == pytest.approx(float(expected), abs=1e-6)
    # same query, same result: both learners are deterministic under their seed
    again = dict(db.execute("SELECT country, (groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, %s, "
                            "%s::jsonb)).score FROM clicks GROUP BY country", [model, json.dumps(search)]).fetchall())
    first = dict(db.execute("SELECT country, (fit).score FROM m").fetchall())
    assert again == first
