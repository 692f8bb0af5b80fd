"""Search spec parsing: schema, defaults, exact error texts."""

import json

import pytest

from groupml.errors import SearchSpecError
from groupml.fitting import UNLIMITED_EPOCHS
from groupml.search import make_procedure, iter_grid, parse_search
from groupml.search._space import Categorical, Fixed, IntRange, LogUniform, Uniform


def err(spec, **kw):
    with pytest.raises(SearchSpecError) as info:
        parse_search(spec, **kw)
    assert info.value.sqlstate == "22023"
    assert info.value.hint
    return info.value


def test_shorthand_is_a_grid_with_defaults():
    spec = parse_search({"lr": [0.01, 0.1, 1], "l2": [0, 0.001]})
    assert spec.method == "grid"
    assert spec.grid_size == 6
    assert (spec.n_trials, spec.seed, spec.epoch_iters, spec.max_epochs, spec.min_epochs, spec.eta) == \
        (20, 0, 10, 10, 1, 3)
    assert spec.early_stopping is None and spec.slots is None
    assert spec.space == (Categorical("lr", (0.01, 0.1, 1)), Categorical("l2", (0, 0.001)))


def test_distributions_default_to_random_and_parse_each_kind():
    spec = parse_search({"space": {"a": {"uniform": [-1, 1]}, "b": {"loguniform": [1e-3, 10]},
                                   "c": {"int": [2, 5]}, "d": {"choice": ["x", "y"]}, "e": 7},
                         "n_trials": 5, "seed": 3})
    assert spec.method == "random" and spec.n_trials == 5 and spec.seed == 3
    assert spec.space == (Uniform("a", -1.0, 1.0), LogUniform("b", 1e-3, 10.0), IntRange("c", 2, 5),
                          Categorical("d", ("x", "y"), grid=False), Fixed("e", 7))
    assert spec.grid_size is None


def test_spec_round_trips_through_json():
    raw = {"method": "hyperband", "space": {"lr": {"loguniform": [1e-3, 1]},
                                            "fam": {"choice": [{"fam": "a", "k": [1, 2]}, "b"]}},
           "early_stopping": {"method": "bandit", "epsilon": 0.25, "partial_iters": 25},
           "epoch_iters": 10, "max_epochs": 27, "eta": 3, "slots": 8}
    spec = parse_search(raw)
    again = parse_search(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    assert spec.partial_epochs == 3   # ceil(25 / 10)


def test_spec_without_dimensions_round_trips():
    # '{}' is train_groups' default search: a checkpointed run must be able to parse its spec back
    spec = parse_search({})
    assert "space" not in spec.to_dict()
    assert parse_search(json.loads(json.dumps(spec.to_dict()))) == spec


def test_nested_grid_items_expand_in_order():
    spec = parse_search({"fam": [{"fam": "lin", "l2": [0, 1]}, {"fam": "svm", "c": [5]}], "lr": [1, 2]})
    assert spec.grid_size == 6
    assert list(iter_grid(spec.space)) == [
        {"fam": "lin", "l2": 0, "lr": 1}, {"fam": "lin", "l2": 0, "lr": 2},
        {"fam": "lin", "l2": 1, "lr": 1}, {"fam": "lin", "l2": 1, "lr": 2},
        {"fam": "svm", "c": 5, "lr": 1}, {"fam": "svm", "c": 5, "lr": 2}]


def test_unknown_method():
    e = err({"method": "bayes", "lr": [1]})
    assert e.message == ("The 'method' value of search must be one of 'grid', 'random', 'tpe', "
                         "'successive_halving', 'hyperband', 'asha', 'pbt'; got 'bayes'")


def test_unknown_parameter_with_suggestion():
    e = err({"lrr": [1], "l2": [0]}, param_names=["lr", "l2"])
    assert e.message == "Unknown parameter 'lrr' in search; allowed parameters are l2, lr"
    assert e.hint == "Did you mean 'lr'?"
    # nested sub-space names are checked too
    e = err({"m": {"choice": [{"lr": [1], "momentum": 0.9}]}}, param_names=["lr", "l2"])
    assert e.message.startswith("Unknown parameter 'momentum' in search")


def test_unknown_top_level_key_when_space_given():
    e = err({"space": {"lr": [1]}, "n_trial": 5})
    assert e.message == ("Unknown key 'n_trial' in search; allowed keys are early_stopping, epoch_iters, "
                         "eta, max_epochs, method, min_epochs, n_trials, perturbation_interval, population, quantile, "
                         "resample_probability, seed, slots, space")


def test_empty_space_and_empty_list():
    assert err({"space": {}}).message == \
        "The 'space' value of search must be a non-empty object of parameter dimensions; got {}"
    # the shorthand with no parameters at all means one configuration with the learner's defaults
    spec = parse_search({"seed": 1})
    assert spec.method == "grid" and spec.grid_size == 1
    assert [t.params for t in make_procedure(spec).ask(5)] == [{}]
    assert err({"lr": []}).message == "The 'lr' value of search must be a non-empty list; got []"
    assert err({"lr": {"choice": []}}).message == "The 'lr' value of search must be a non-empty list; got []"


@pytest.mark.parametrize("method", ["random", "tpe", "successive_halving", "hyperband", "asha"])
def test_sampling_methods_need_dimensions(method):
    e = err({"method": method, "max_epochs": 81})
    assert e.message == (f"The 'space' value of search must be a non-empty object of parameter dimensions "
                         f"for method '{method}'; got {{}}")
    assert "copies of one configuration" in e.hint and '"method"' in e.hint
    # grid without dimensions is one configuration, the learner's defaults
    assert parse_search({"method": "grid", "max_epochs": 81}) == parse_search({"max_epochs": 81})


def test_ranges():
    assert err({"lr": {"uniform": [1, 0.1]}}).message == \
        "The 'lr' value of search must be a range [lo, hi] with lo <= hi for uniform; got [1, 0.1]"
    assert err({"lr": {"loguniform": [0, 1]}}).message == \
        "The 'lr' value of search must be a range [lo, hi] with 0 < lo <= hi for loguniform; got [0, 1]"
    assert err({"k": {"int": [1.5, 3]}}).message == \
        "The 'k' value of search must be a range [lo, hi] of two integers for int; got [1.5, 3]"
    assert err({"lr": {"normal": [0, 1]}}).message.startswith(
        "The 'lr' value of search must be a list, a scalar, or one of {\"uniform\": [lo, hi]}")


def test_budgets():
    assert err({"lr": {"uniform": [0, 1]}, "n_trials": -5}).message == \
        "The 'n_trials' value of search must be > 0; got -5"
    assert err({"lr": [1], "n_trials": 0}).message == "The 'n_trials' value of search must be > 0; got 0"
    assert err({"lr": [1], "max_epochs": 0}).message == "The 'max_epochs' value of search must be >= 1; got 0"
    assert err({"lr": [1], "eta": 1}).message == "The 'eta' value of search must be >= 2; got 1"
    assert err({"lr": [1], "seed": -1}).message == "The 'seed' value of search must be >= 0; got -1"
    assert err({"lr": [1], "min_epochs": 5, "max_epochs": 3}).message == \
        "The 'min_epochs' value of search must be <= max_epochs (3); got 5"
    assert err({"lr": [1], "early_stopping": {"epsilon": -1}}).message == \
        "The 'epsilon' value of search early_stopping must be >= 0; got -1"
    assert err({"lr": [1], "early_stopping": {"partial_iters": 0}}).message == \
        "The 'partial_iters' value of search early_stopping must be >= 1; got 0"


def test_tpe_slots_are_bounded():
    space = {"l2": {"loguniform": [1e-6, 1]}}
    assert err({"method": "tpe", "n_trials": 100000, "slots": 100000, "space": space}).message == \
        "The 'slots' value of search must be <= 1000 for method 'tpe'; got 100000"
    assert parse_search({"method": "tpe", "n_trials": 5000, "slots": 1000, "space": space}).slots == 1000


def test_hyperband_brackets_are_bounded():
    # 2**30 epochs with eta 2 would start 2.2e9 configurations: planning alone exhausted the
    # server's memory. The bound names the count; the same budget with fewer rungs passes
    space = {"lr": {"uniform": [0.1, 1]}}
    e = err({"method": "hyperband", "max_epochs": 2 ** 30, "eta": 2, "space": space})
    assert e.message == ("The 'max_epochs' value of search must be small enough that Hyperband's brackets start at "
                         "most 100000 configurations (eta 2, min_epochs 1); they would start 2224630924; "
                         "got 1073741824")
    assert "Lower max_epochs" in e.hint
    ok = parse_search({"method": "hyperband", "max_epochs": 2 ** 30, "min_epochs": 2 ** 20, "eta": 2, "space": space})
    assert ok.max_epochs == 2 ** 30
    assert parse_search({"method": "hyperband", "max_epochs": 81, "space": space}).eta == 3


@pytest.mark.parametrize("key", ["n_trials", "seed", "epoch_iters", "max_epochs", "min_epochs", "eta"])
def test_null_is_not_a_default_for_numeric_keys(key):
    e = err({"lr": {"uniform": [0, 1]}, "method": "hyperband", key: None})
    assert e.message == f"The '{key}' value of search must be an integer; got null"
    assert err({"lr": [1], "early_stopping": {"epsilon": None}}).message == \
        "The 'epsilon' value of search early_stopping must be a number; got null"
    assert err({"lr": [1], "early_stopping": {"partial_iters": None}}).message == \
        "The 'partial_iters' value of search early_stopping must be an integer; got null"
    # slots is the one numeric key where null means something: the planner chooses
    assert parse_search({"lr": [1], "slots": None}).slots is None


BIG = 10 ** 400      # a 401-digit JSON integer: float() of it overflows
BIG_SHOWN = "1e+400"  # how messages show it (not 401 digits)


def test_ranges_must_be_finite_and_samplable():
    assert err({"x": {"uniform": [0, BIG]}}).message == \
        f"The 'x' value of search must be a range [lo, hi] of two finite numbers for uniform; got [0, {BIG_SHOWN}]"
    assert err({"x": {"loguniform": [1, float("inf")]}}).message == \
        "The 'x' value of search must be a range [lo, hi] of two finite numbers for loguniform; got [1, Infinity]"
    assert err({"x": {"uniform": [-1e308, 1e308]}}).message == \
        "The 'x' value of search must be a range [lo, hi] whose width hi - lo is finite for uniform; " \
        "got [-1e+308, 1e+308]"
    rule = "a range [lo, hi] with -2^63 <= lo <= hi < 2^63 for int"
    assert err({"x": {"int": [0, 1e19]}}).message == f"The 'x' value of search must be {rule}; got [0, 1e+19]"
    assert err({"x": {"int": [0, BIG]}}).message == f"The 'x' value of search must be {rule}; got [0, {BIG_SHOWN}]"
    assert err({"x": {"int": [-2 ** 63 - 1, 0]}}).message.endswith(f"{rule}; got [-9223372036854775809, 0]")
    # the extremes that are allowed can be sampled
    spec = parse_search({"x": {"int": [-2 ** 63, 2 ** 63 - 1]}, "u": {"uniform": [-1e308, 0]}})
    point = make_procedure(spec).ask(1)[0].params
    assert -2 ** 63 <= point["x"] < 2 ** 63 and -1e308 <= point["u"] <= 0


def test_values_must_be_finite():
    assert err({"x": float("nan")}).message == \
        "The 'x' value of search must be finite (not NaN or infinity); got NaN"
    assert err({"x": [1, float("inf")]}).message == \
        "The 'x' value of search must be a list of finite values (no NaN or infinity); got [1, Infinity]"
    assert err({"m": {"choice": [{"x": -float("inf")}]}}).message == \
        "The 'x' value of search must be finite (not NaN or infinity); got -Infinity"
    # huge integers are exact JSON: the learner's own checks judge them
    assert parse_search({"x": [BIG]}).space == (Categorical("x", (BIG,)),)


def test_upper_bounds_of_budgets_and_seed():
    assert err({"lr": [1], "n_trials": 100001}).message == \
        "The 'n_trials' value of search must be <= 100000; got 100001"
    assert err({"lr": [1], "max_epochs": 2 ** 30 + 1}).message == \
        "The 'max_epochs' value of search must be <= 1073741824; got 1073741825"
    assert err({"method": "hyperband", "x": {"uniform": [0, 1]}, "max_epochs": BIG}).message == \
        f"The 'max_epochs' value of search must be <= 1073741824; got {BIG_SHOWN}"
    assert err({"lr": [1], "epoch_iters": 10 ** 6 + 1}).message == \
        "The 'epoch_iters' value of search must be <= 1000000; got 1000001"
    assert err({"lr": [1], "seed": 2 ** 63}).message == \
        "The 'seed' value of search must be <= 9223372036854775807; got 9223372036854775808"
    assert err({"lr": [1], "slots": 100001}).message == \
        "The 'slots' value of search must be <= 100000; got 100001"
    assert err({"lr": [1], "early_stopping": {"epsilon": 1001}}).message == \
        "The 'epsilon' value of search early_stopping must be <= 1000; got 1001"
    assert err({"lr": [1], "early_stopping": {"epsilon": BIG}}).message == \
        f"The 'epsilon' value of search early_stopping must be a finite number; got {BIG_SHOWN}"
    # the limits themselves are fine, and so is the max_epochs plan_search writes into
    # checkpointed specs of grid/random/tpe without max_epochs
    spec = parse_search({"lr": [1], "n_trials": 100000, "max_epochs": UNLIMITED_EPOCHS, "epoch_iters": 10 ** 6,
                         "seed": 2 ** 63 - 1, "slots": 100000, "early_stopping": {"epsilon": 1000,
                                                                                 "partial_iters": BIG}})
    assert parse_search(json.loads(json.dumps(spec.to_dict(), allow_nan=False))) == spec
    assert spec.partial_epochs == BIG // 10 ** 6


def test_grid_with_distributions_and_grid_too_large():
    e = err({"method": "grid", "lr": {"loguniform": [1e-3, 1]}})
    assert e.message == ("The 'method' value of search must be one of 'random', 'tpe', 'successive_halving', "
                         "'hyperband', 'asha', 'pbt' when the space has distributions (parameter 'lr'); got 'grid'")
    assert "random" in e.hint and "'lr' as a list" in e.hint
    e = err({"a": list(range(101)), "b": list(range(100))})
    assert e.message == "The 'space' value of search must be a grid of at most 10000 points; got 10100"
    # exactly the limit is fine
    assert parse_search({"a": list(range(100)), "b": list(range(100))}).grid_size == 10000


def test_early_stopping_defaults():
    spec = parse_search({"lr": [1, 2], "early_stopping": {"method": "bandit"}, "epoch_iters": 4})
    assert (spec.early_stopping.epsilon, spec.early_stopping.partial_iters) == (0.5, 10)
    assert spec.partial_epochs == 3
    assert parse_search({"lr": [1], "early_stopping": None}).early_stopping is None


def test_sampling_methods_check_the_space_against_the_learner_up_front():
    # TPE and the halving methods draw configs as they go: a range reaching outside what the
    # learner accepts fails before anything trains, with the offending end in the message
    from groupml.errors import InvalidParameterError
    from groupml.fitting import plan_search
    from groupml.learners import get_learner_family

    fam = get_learner_family("logistic")
    assert plan_search(fam, {"method": "tpe", "n_trials": 5,
                             "space": {"l2": {"uniform": [0, 1]}, "solver": "gd",
                                       "lr": {"loguniform": [1e-3, 1]}}}).method == "tpe"
    with pytest.raises(InvalidParameterError, match=r"The 'l2' value of model 'logistic' must be >= 0; got -1.0"):
        plan_search(fam, {"method": "tpe", "n_trials": 5, "space": {"l2": {"uniform": [-1, 1]}}})
    with pytest.raises(InvalidParameterError, match=r"The 'solver' value of model 'logistic' must be one of"):
        plan_search(fam, {"method": "hyperband", "max_epochs": 27,
                          "space": {"solver": {"choice": ["lbfgs", "nope"]}}})
    with pytest.raises(InvalidParameterError, match=r"The 'l2' value of model 'logistic' must be >= 0"):
        plan_search(fam, {"method": "asha", "n_trials": 4, "max_epochs": 9,
                          "space": {"x": {"choice": [{"l2": 0.1}, {"l2": -2.0}]}}})


def test_huge_integers_are_shown_short_in_messages():
    from groupml.validation import short_int

    assert short_int(10 ** 308) == "1e+308"          # what jsonb makes of 1e308
    assert short_int(-123456789 * 10 ** 40) == "-1.234567e+48"     # six digits kept, not rounded
    assert short_int(2 ** 100) == "1.26765e+30"
    assert err({"lr": [1], "seed": 10 ** 40}).message == \
        "The 'seed' value of search must be <= 9223372036854775807; got 1e+40"


def test_messages_show_values_in_sql_words_and_cut_long_texts():
    # messages said "got None", "got nan" and echoed a 1 MB name whole
    from groupml.errors import InvalidParameterError
    from groupml.validation import check_number, shown

    assert [shown(v) for v in (None, True, float("nan"), float("inf"), -float("inf"), ["a", None])] == \
        ["null", "true", "NaN", "Infinity", "-Infinity", "['a', null]"]
    assert shown("x" * 1_000_000) == repr("x" * 100) + "... (1,000,000 characters)"
    with pytest.raises(InvalidParameterError, match=r"must be a finite number; got NaN$"):
        check_number(float("nan"), "max_seconds", "run_scheduler", gt=0)


def test_unknown_names_are_cut_short_in_messages():
    # an unknown key, parameter, family or column of 100 kB is not echoed whole
    from groupml.errors import GroupmlError
    from groupml.learners import get_family, get_learner_family
    from groupml.sourcesql import check_columns
    from groupml.validation import check_keys

    long = "k" * 100_000
    cut = "k" * 100 + "... (100,000 characters)"
    calls = [lambda: check_keys({long: 1}, "search", ["lr"]), lambda: parse_search({long: [1]}, param_names=["lr"]),
             lambda: get_family("logistic").validate_params({long: 1}), lambda: get_family(long),
             lambda: get_learner_family(long),
             lambda: check_columns({"a": "integer"}, [long], "features", "t", numeric=True, owner="explain_search")]
    for call in calls:
        with pytest.raises(GroupmlError) as info:
            call()
        msg = info.value.message.replace("'... (", "... (")       # shown() quotes the cut text
        assert cut in msg and len(msg) < 400, msg[:300]


@pytest.mark.parametrize("raw, shown", [
    ({"l2": [0, 0.001, 0.0]}, "0.0"),
    ({"solver": ["lbfgs", "gd", "lbfgs"]}, "'lbfgs'"),
    ({"space": {"l2": {"choice": [None, 1, None]}}}, "null"),
    ({"fam": [{"fam": "a", "k": [3, 3]}]}, "3"),
])
def test_a_value_listed_twice_is_refused(raw, shown):
    # {"l2": [0, 0]} trained the same configuration twice and reported both trials
    e = err(raw)
    assert "must be a list of distinct values; got [" in str(e)
    assert e.hint == f"{shown} is listed twice; list each value once."


def test_true_and_one_are_different_values():
    assert parse_search({"a": [True, 1], "b": [False, 0]}).grid_size == 4


def test_the_json_examples_of_docs_search_md_train_a_logistic_model():
    # an example with made-up parameters ('penalty', 'fam') failed with every model
    import pathlib
    import re

    import numpy as np

    from groupml.fitting import fit_group
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "search.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(float)
    for raw in blocks:
        spec = json.loads(raw)
        spec.update({"n_trials": 3} if "n_trials" in spec else {})
        fit = fit_group(X, y, "logistic", spec, {})
        assert fit.status == "ok", (raw, fit.message)


@pytest.mark.parametrize("model, raw, shown", [
    ("logistic", {"solver": [{"solver": "lbfgs", "l2": [0, 1]}, {"solver": "lbfgs", "l2": [0, 1]}]},
     '{"l2": 0, "solver": "lbfgs"} and {"l2": 0, "solver": "lbfgs"}'),
    ("logistic", {"solver": ["lbfgs", {"solver": "lbfgs"}]}, '{"solver": "lbfgs"} and {"solver": "lbfgs"}'),
    ("mlp", {"layers": ["4", 4], "epochs": [2]}, '{"epochs": 2, "layers": "4"} and {"epochs": 2, "layers": 4}'),
])
def test_a_grid_that_names_one_model_twice_is_refused(model, raw, shown):
    # written two ways, the same configuration was trained and reported twice
    from groupml.fitting import validate_request
    with pytest.raises(SearchSpecError) as info:
        validate_request(model, raw, {})
    assert info.value.message == f"The grid of search lists one configuration twice: {shown} are the same model"
    assert info.value.sqlstate == "22023" and "List each configuration once" in info.value.hint


def test_the_halving_rate_is_bounded():
    # eta 1e308 was taken
    with pytest.raises(SearchSpecError) as info:
        parse_search({"method": "hyperband", "max_epochs": 27, "eta": 1e308, "lr": [1]})
    assert info.value.message == "The 'eta' value of search must be <= 1000; got 1e+308"


def test_every_help_topic_a_message_names_exists():
    # a hint pointed to help('learners'), which has no topic (it is 'models')
    import pathlib
    import re

    from groupml.helptopics import TOPICS
    root = pathlib.Path(__file__).resolve().parents[2]
    named = set()
    for path in list((root / "pyudf" / "groupml").rglob("*.py")) + list((root / "docs").glob("*.md")) + \
            [root / "README.md"]:
        named |= set(re.findall(r"help\('([a-z_]+)'\)", path.read_text()))
    assert named and named <= set(TOPICS), sorted(named - set(TOPICS))
