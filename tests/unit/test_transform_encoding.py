"""The raw-column transform: fit, transform, JSON round trip, NULLs, unseen categories, the cap."""

import datetime as dt
import json
from decimal import Decimal

import numpy as np
import pytest

from groupml.errors import DatatypeMismatchError, InvalidParameterError, ModelFormatError
from groupml.learners import GLMModel, TransformedModel, load_model
from groupml.learners._transformed import wrap
from groupml.transforms import Transform, apply, check_spec, kind_of_type
from groupml.transforms.sql import encode_exprs, stats_of

SPECS = [{"name": "amount", "kind": "numeric", "type": "numeric"},
         {"name": "vip", "kind": "boolean", "type": "boolean"},
         {"name": "country", "kind": "category", "type": "text"},
         {"name": "day", "kind": "date", "type": "date"}]
COLS = {"amount": [1.0, 3.0, None, Decimal("4")],
        "vip": [True, False, False, None],
        "country": ["FR", "DE", "FR", None],
        "day": ["2024-03-04", dt.date(2024, 3, 5), None, "2024-03-09"]}


def rows(cols):
    n = len(next(iter(cols.values())))
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


def test_kinds_follow_the_sql_type():
    assert kind_of_type("integer") == kind_of_type("numeric(10,2)") == "numeric"
    assert kind_of_type("boolean") == "boolean"
    assert kind_of_type("character varying(20)") == kind_of_type("text") == "category"
    assert kind_of_type("mood", is_enum=True) == "category"
    assert kind_of_type("date") == "date"
    assert kind_of_type("timestamp with time zone") == "timestamp"
    assert kind_of_type("jsonb") is None and kind_of_type("integer[]") is None


def test_fit_imputes_encodes_and_flags_missing_values():
    t = Transform.fit(SPECS, COLS, {"scale": "none"})
    assert t.output_names() == ["amount", "amount:missing", "vip", "vip:missing", "country=FR", "country=DE",
                                "country:missing", "day:epoch_days", "day:month", "day:dow", "day:missing"]
    X = t.transform(rows(COLS))
    mean = (1 + 3 + 4) / 3
    assert X[2, 0] == pytest.approx(mean) and X[2, 1] == 1.0 and X[0, 1] == 0.0
    assert X[3, 2] == 0.0 and X[3, 3] == 1.0          # NULL boolean: the most frequent (false)
    assert list(X[3, 4:7]) == [1.0, 0.0, 1.0]          # NULL category: the most frequent (FR), flagged
    assert X[0, 7] == (dt.date(2024, 3, 4) - dt.date(1970, 1, 1)).days
    assert X[0, 8] == 3.0 and X[0, 9] == 1.0 and X[3, 9] == 6.0    # Monday = 1, Saturday = 6
    assert X[2, 7] == pytest.approx(np.mean(X[[0, 1, 3], 7])) and X[2, 10] == 1.0


def test_unseen_category_goes_to_other_or_to_all_zeros():
    cols = {"c": ["a", "a", "a", "b", "b", "c"]}
    spec = [{"name": "c", "kind": "category", "type": "text"}]
    capped = Transform.fit(spec, cols, {"max_categories": 2})
    assert capped.output_names() == ["c=a", "c=b", "c:other"]
    assert capped.transform([{"c": "c"}, {"c": "zzz"}, {"c": "b"}]).tolist() == [[0, 0, 1], [0, 0, 1], [0, 1, 0]]
    full = Transform.fit(spec, cols)
    assert full.output_names() == ["c=a", "c=b", "c=c"]
    assert full.transform([{"c": "zzz"}]).tolist() == [[0, 0, 0]]
    # a NULL at scoring in a column without NULLs in training: imputed, no indicator column
    assert full.transform([{"c": None}]).tolist() == [[1, 0, 0]]


def test_a_column_without_values_keeps_one_output():
    t = Transform.fit([{"name": "c", "kind": "category", "type": "text"}], {"c": [None, None]},
                      {"missing_indicators": False})
    assert t.output_names() == ["c:other"] and t.width == 1
    assert t.transform([{"c": None}, {"c": "new"}]).tolist() == [[1.0], [1.0]]
    assert Transform.fit([{"name": "c", "kind": "category", "type": "text"}], {"c": []}).width == 1


def test_cap_ties_are_broken_by_value():
    t = Transform.fit([{"name": "c", "kind": "category", "type": "text"}], {"c": ["z", "y", "x", "x"]},
                      {"max_categories": 2})
    assert t.columns[0]["categories"] == ["x", "y"] and t.columns[0]["other"]


def test_scaling_follows_the_family_and_the_setting():
    spec = [{"name": "x", "kind": "numeric", "type": "integer"}]
    cols = {"x": [1, 2, 3, 4]}
    assert Transform.fit(spec, cols, family="lightgbm").transform([{"x": 4}])[0, 0] == 4.0
    # the GLMs standardise inside their solvers: 'auto' leaves their inputs unscaled
    for glm in ("logistic", "linear", "svm"):
        assert not Transform.fit(spec, cols, family=glm).settings["scaled"]
    assert Transform.fit(spec, cols, {"scale": "standard"}, family="logistic").settings["scaled"]
    mlp = Transform.fit(spec, cols, family="mlp")
    assert mlp.transform([{"x": 2.5}])[0, 0] == pytest.approx(0.0)
    assert mlp.transform([{"x": 4}])[0, 0] == pytest.approx(1.5 / np.std([1, 2, 3, 4]))
    assert Transform.fit(spec, cols, {"scale": "standard"}, family="lightgbm").settings["scaled"]
    assert not Transform.fit(spec, cols, {"scale": "none"}, family="mlp").settings["scaled"]
    const = Transform.fit(spec, {"x": [5, 5]}, {"scale": "standard"})
    assert const.transform([{"x": 6}])[0, 0] == 1.0    # a constant column keeps std 1


def test_json_round_trip_keeps_the_encoding():
    t = Transform.fit(SPECS + [{"name": "ts", "kind": "timestamp", "type": "timestamp with time zone"}],
                      dict(COLS, ts=["2024-03-05T10:00:00+02:00", None, "2024-03-05T23:30:00", "infinity"]),
                      {"max_categories": 1, "scale": "standard"})
    back = Transform.from_json(t.to_json())
    assert back.to_json() == t.to_json()
    r = rows(dict(COLS, ts=["2024-03-05T10:00:00+02:00", None, "2024-03-05 23:30:00", "infinity"]))
    assert np.array_equal(apply(back, r), t.transform(r))
    assert json.loads(t.to_json())["format"] == 1


def test_timestamps_are_taken_in_utc_and_infinity_is_missing():
    spec = [{"name": "ts", "kind": "timestamp", "type": "timestamp with time zone"}]
    t = Transform.fit(spec, {"ts": ["2024-03-05T01:00:00+02:00", "infinity"]}, {"scale": "none"})
    x = t.transform([{"ts": "2024-03-05T01:00:00+02:00"}, {"ts": "infinity"}])
    assert x[0, 3] == 23.0 and x[0, 1] == 3.0 and x[0, 2] == 1.0     # 2024-03-04 23:00 UTC, a Monday
    assert x[1, -1] == 1.0 and x[0, -1] == 0.0


def test_wrong_types_at_scoring_are_refused():
    t = Transform.fit(SPECS, COLS)
    good = rows(COLS)[0]
    for col, bad in (("amount", "12"), ("vip", 1), ("country", 3), ("day", "03/05/2024"), ("amount", True)):
        with pytest.raises(DatatypeMismatchError, match=col if col != "day" else "ISO"):
            t.transform([dict(good, **{col: bad})])


def test_bad_settings_and_bad_json_are_refused():
    for bad in ({"max_categories": 0}, {"max_categories": True}, {"scale": "minmax"}, {"missing_indicators": 1},
                {"cap": 3}, "yes"):
        with pytest.raises(InvalidParameterError):
            check_spec(bad)
    for text in ("{}", '{"format": 2, "settings": {}, "columns": []}', "not json",
                 '{"format": 1, "settings": {}, "columns": [{"name": "x", "kind": "blob"}]}'):
        with pytest.raises(ModelFormatError):
            Transform.from_json(text)


def test_char_padding_matches_the_text_form():
    t = Transform.fit([{"name": "c", "kind": "category", "type": "character(4)"}], {"c": ["ab  ", "cd  "]})
    assert t.columns[0]["categories"] == ["ab", "cd"]
    assert t.transform([{"c": "cd  "}]).tolist() == [[0.0, 1.0]]


def test_sql_statistics_build_the_same_transform_as_python():
    py = Transform.fit(SPECS, COLS, {"max_categories": 1})
    row = {"m0_0": 8 / 3, "s0_0": float(np.std([1, 3, 4])), "n0": 1, "t1": 1, "f1": 2, "n1": 1, "n2": 1,
           "n3": 1}
    days = [(dt.date(2024, 3, d) - dt.date(1970, 1, 1)).days for d in (4, 5, 9)]
    for j, vals in enumerate((days, [3, 3, 3], [1, 2, 6])):
        row[f"m3_{j}"], row[f"s3_{j}"] = float(np.mean(vals)), float(np.std(vals))
    sql = Transform.from_stats(SPECS, stats_of(row, SPECS, {2: [{"v": "FR", "n": 2}, {"v": "DE", "n": 1}]}),
                               py.settings, py.settings["scaled"])
    assert sql.output_names() == py.output_names()
    r = rows(COLS)
    assert np.allclose(sql.transform(r), py.transform(r))
    exprs = encode_exprs(sql)
    assert len(exprs) == sql.width
    assert '"country"' in exprs[4] and "'FR'" in exprs[4] and "pg_catalog" in exprs[5]


def test_a_wrapped_model_scores_encoded_rows_and_keeps_its_transform():
    t = Transform.fit(SPECS, COLS)
    m = GLMModel("logistic", np.arange(t.width, dtype=float) / 10, 0.5, {"l2": 0.1})
    blob = wrap(m.to_bytes(), t)
    back = load_model(blob)
    assert isinstance(back, TransformedModel) and back.n_features == t.width
    X = t.transform(rows(COLS))
    assert np.array_equal(back.decision_function(X), m.decision_function(X))
    assert back.transform.to_json() == t.to_json()
    with pytest.raises(ModelFormatError):
        load_model(blob[:20])
    # the models of one run share the transform: the cache's key (length, first 2 kB) still
    # tells two of them apart
    from groupml.udf.predict import KEY_PREFIX
    m2 = GLMModel("logistic", np.arange(t.width, dtype=float) / 20, 0.5, {"l2": 0.1})
    assert wrap(m2.to_bytes(), t)[:KEY_PREFIX] != blob[:KEY_PREFIX]
    other = Transform.fit(SPECS[:1], COLS)
    with pytest.raises(ModelFormatError):
        load_model(wrap(m.to_bytes(), other))
