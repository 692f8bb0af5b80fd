"""The structural check of LightGBM model text (groupml.learners._lgbm_text)."""

import re
import subprocess
import sys

import lightgbm as lgb
import numpy as np
import pytest

from groupml.errors import ModelFormatError
from groupml.learners import _lgbm
from groupml.learners._lgbm_text import check_model_text, split_text
from lgbm_forgery import join_trees as _join, set_tree_key as _set, unprobed_bad_split


def _train(X, y, objective="binary", categorical="auto", **params):
    ds = lgb.Dataset(X, y, categorical_feature=categorical)
    return lgb.train({"objective": objective, "verbosity": -1, "min_data_in_leaf": 5, "deterministic": True,
                      "force_row_wise": True, "num_threads": 1, **params}, ds, num_boost_round=4).model_to_string()


@pytest.fixture(scope="module")
def texts():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((600, 4))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(float)
    Xn = X.copy()
    Xn[rng.random(X.shape) < 0.2] = np.nan
    Xc = X.copy()
    Xc[:, 0] = rng.integers(0, 40, 600)
    yc = np.isin(Xc[:, 0], [1, 5, 7, 30]).astype(float)
    return {
        "binary": _train(X, y, num_leaves=7),
        "regression": _train(X, X[:, 0] * 2 + X[:, 3], "regression", num_leaves=15),
        "missing values": _train(Xn, y, num_leaves=7),
        "categorical": _train(Xc, yc, categorical=[0], num_leaves=5, max_cat_to_onehot=2),
        "stumps": _train(X, np.ones(600), "regression"),
    }


def _refused(text, match, n_features=4):
    with pytest.raises(ModelFormatError, match=match) as info:
        check_model_text(text.encode() if isinstance(text, str) else text, n_features)
    assert info.value.message.startswith("The lightgbm model is damaged: ") and info.value.hint
    assert info.value.sqlstate == "22P03"


def test_every_kind_of_model_lightgbm_writes_passes(texts):
    assert "num_cat=1" in texts["categorical"] and "num_leaves=1\n" in texts["stumps"]
    assert "decision_type=" in texts["missing values"]
    for name, text in texts.items():
        check_model_text(text.encode(), 4)
        assert _join(text, split_text(text)[1]) == text, name      # the test helper rewrites nothing else


def test_a_split_on_a_path_the_probes_miss_crashes_lightgbm_and_is_refused(texts, monkeypatch):
    """The gap this check closes: a bad index behind 0.3 < x0 <= 0.31 passes the child's
    probe rows, and LightGBM then reads far outside its arrays for x0 = 0.305."""
    forged = unprobed_bad_split(texts["binary"])
    _refused(forged, r"tree 0: split_feature 2000000000 of node 2 is not a feature index \(0\.\.3\)")
    # without the structural check the child's probes pass it ...
    monkeypatch.setattr(_lgbm, "check_model_text", lambda body, n, interrupt_check=None: None)
    _lgbm.check_in_child(forged.encode(), 4)
    _lgbm._TRUSTED_BODIES.clear()
    # ... and a row on the unprobed path kills the process that predicts it
    code = ("import sys, numpy as np, lightgbm as lgb\n"
            "b = lgb.Booster(model_str=sys.stdin.read())\n"
            "print(b.predict(np.array([[float(sys.argv[1]), 0, 0, 0]]), raw_score=True, num_threads=1))\n")
    for x, crashes in ((0.0, False), (0.305, True)):
        done = subprocess.run([sys.executable, "-c", code, str(x)], input=forged.encode(), capture_output=True)
        assert (done.returncode < 0) == crashes, (x, done.returncode, done.stderr[-300:])


@pytest.mark.parametrize("key, value, match", [
    ("left_child", "0 -2 -3 -4 -5 -6", "left_child 0 of node 0 is not a later internal node"),   # a loop
    ("right_child", "-100 -2 -3 -4 -5 -6", "right_child -100 of node 0 is not a leaf of the tree"),
    ("leaf_value", "1 2 3", "leaf_value has 3 values; num_leaves 7 needs 7"),
    ("decision_type", "64 2 2 2 2 2", "decision_type 64 of node 0 is not one LightGBM writes"),
    ("decision_type", "1 2 2 2 2 2", "categorical node 0 names bitset"),
    ("split_feature", "0 1 -1 2 3 0", "split_feature -1 of node 2"),
    ("split_feature", "0 1 x 2 3 0", "split_feature is not a list of integers"),
    ("threshold", "0 1 nope 2 3 0", "threshold is not a list of numbers"),
    ("num_leaves", "1000000000", "num_leaves 1000000000 or num_cat 0 is out of range"),
    ("is_linear", "1", "tree 0 is a linear tree"),
])
def test_trees_prediction_could_not_walk_safely_are_refused(texts, key, value, match):
    assert "num_leaves=7\n" in split_text(texts["binary"])[1][0]
    _refused(_set(texts["binary"], key, value), match)


def test_children_that_do_not_form_one_tree_are_refused(texts):
    tree = split_text(texts["binary"])[1][0]
    left = re.search(r"(?m)^left_child=(.*)$", tree).group(1).split()
    right = re.search(r"(?m)^right_child=(.*)$", tree).group(1).split()
    leaf = next(c for c in left + right if int(c) < 0)
    other = next(c for c in left + right if int(c) < 0 and c != leaf)
    twice = " ".join(leaf if c == other else c for c in right)                # one leaf twice, one never
    _refused(_set(texts["binary"], "right_child", twice) if other in right
             else _set(texts["binary"], "left_child", " ".join(leaf if c == other else c for c in left)),
             "tree 0: its nodes do not form one tree")


def test_categorical_bitsets_must_stay_inside_cat_threshold(texts):
    text = texts["categorical"]
    kinds = re.search(r"(?m)^decision_type=(.*)$", split_text(text)[1][0]).group(1).split()
    thresholds = re.search(r"(?m)^threshold=(.*)$", split_text(text)[1][0]).group(1).split()
    node = next(i for i, k in enumerate(kinds) if int(k) & 1)
    thresholds[node] = "1"                                                     # bitset 1 of 1
    _refused(_set(text, "threshold", " ".join(thresholds)), f"categorical node {node} names bitset 1.0 of 1")
    _refused(_set(text, "cat_boundaries", "0 7"), "cat_boundaries and cat_threshold do not describe 1 bitsets")
    _refused(_set(text, "cat_boundaries", "1 2"), "do not describe 1 bitsets")
    _refused(_set(text, "cat_threshold", "4294967296 2"), "do not describe 1 bitsets")


def test_text_outside_lightgbms_own_layout_is_refused(texts):
    text = texts["binary"]
    _refused(text, r"n_features does not match the trees \(4 features in the text, 5 stored\)", n_features=5)
    _refused(text.replace("tree_sizes=", "tree_sizes=1", 1), r"tree_sizes does not match the trees \(tree 1\)")
    _refused(re.sub(r"(?m)^tree_sizes=.*\n", "", text), "tree_sizes is missing")
    _refused(text.replace("num_class=1", "num_class=2"), "the header's num_class is not 1")
    _refused(text.replace("\n", "\r\n"), "carriage returns")
    _refused(text[:text.index("Tree=0")], "it holds no trees")
    _refused(b"\xff" + text.encode(), "it is not UTF-8 text")
    _refused(text.replace("version=v4\n", "version=v4\nversion=v4\n"), "the header names 'version' twice")
    tree = split_text(text)[1][0]
    _refused(_join(text, [tree.replace("shrinkage=", "num_leaves=3\nshrinkage=")] + split_text(text)[1][1:]),
             "'num_leaves' appears twice or is not a key LightGBM writes")
    _refused(_join(text, [tree.replace("shrinkage=", "leaf_const=1\nshrinkage=")] + split_text(text)[1][1:]),
             "'leaf_const' appears twice or is not a key")
    _refused(_join(text, [tree.replace("shrinkage=", "garbage\nshrinkage=")] + split_text(text)[1][1:]),
             "line 'garbage' is not key=value")
    _refused(_join(text, [tree.rstrip("\n") + "\n\nnum_leaves=2\n\n"] + split_text(text)[1][1:]),
             "tree 0 is not 22 or fewer key=value lines ended by an empty line")
    _refused(text.replace("end of trees", "end of tree"), "no 'end of trees' after them")
