"""The checking child of groupml.learners._lgbm_check: one process for many checks, replaced
when a text crashes it or it has left idle."""

import os
import time

import lightgbm as lgb
import numpy as np
import pytest

from groupml.learners import _lgbm, _lgbm_check
from groupml.learners._lgbm_check import CheckTimeout, ModelChecker
from lgbm_forgery import set_tree_key


def _texts(n, d=4):
    rng = np.random.default_rng(5)
    out = []
    for _ in range(n):
        X = rng.standard_normal((300, d))
        y = (X[:, 0] + rng.standard_normal(300) > 0) * 1.0
        out.append(lgb.train({"objective": "binary", "verbosity": -1, "num_leaves": 7, "num_threads": 1},
                             lgb.Dataset(X, y), num_boost_round=10).model_to_string())
    return out


@pytest.fixture
def checker():
    c = ModelChecker(_lgbm._python_executable(), _lgbm._child_env())
    yield c
    c.close()


def test_one_child_checks_many_texts_and_a_crash_costs_only_that_child(checker):
    texts = _texts(6)
    assert [checker.check(t.encode(), 4) for t in texts] == [None] * 6
    assert checker.started == 1
    # what the loader or the probes crash on: the root reads far outside every row
    tree = texts[0][texts[0].index("Tree=0"):]
    n_nodes = len(tree[tree.index("split_feature=") + 14:].split("\n", 1)[0].split())
    crashing = set_tree_key(texts[0], "split_feature", " ".join(["2000000000"] * n_nodes))
    why = checker.check(crashing.encode(), 4)
    assert why.startswith("LightGBM crashed on it (signal "), why
    assert checker.check(texts[1].encode(), 4) is None and checker.started == 2     # a new child
    assert checker.check(texts[2].encode(), 3) == "n_features does not match the trees"
    bad_objective = texts[3].replace("objective=binary sigmoid:1", "objective=no_such_objective")
    assert "no_such_objective" in checker.check(bad_objective.encode(), 4)          # LightGBM's own error
    assert checker.started == 2


def test_the_child_is_outside_the_callers_process_group(checker):
    # PostgreSQL sends a cancel (SIGINT) to the backend's whole process group: a child in the
    # group died of it and the model was reported as "LightGBM crashed on it (signal 2)"
    assert checker.check(_texts(1)[0].encode(), 4) is None
    child = checker._proc.pid
    assert os.getpgid(child) != os.getpgid(0) and os.getsid(child) == child
    checker._proc.stdin.close()                         # its parent gone: it ends by itself
    assert checker._proc.wait(30) == 0
    checker._proc = None


def test_the_structural_check_runs_the_interrupt_check_between_trees():
    from groupml.learners._lgbm_text import check_model_text

    rng = np.random.default_rng(3)
    text = lgb.train({"objective": "binary", "verbosity": -1, "num_leaves": 3, "num_threads": 1,
                      "min_data_in_leaf": 1}, lgb.Dataset(rng.standard_normal((300, 2)), rng.random(300) < 0.5),
                     num_boost_round=600).model_to_string()
    assert text.count("\nTree=") == 600
    calls = []
    check_model_text(text.encode(), 2, lambda: calls.append(1))
    assert len(calls) == 3                              # trees 0, 256 and 512

    def cancel():
        raise KeyboardInterrupt("cancelled")
    with pytest.raises(KeyboardInterrupt):
        check_model_text(text.encode(), 2, cancel)


def test_an_idle_child_leaves_and_the_next_check_starts_another(checker, monkeypatch):
    monkeypatch.setattr(_lgbm_check, "IDLE_EXIT_S", 0.3)
    text = _texts(1)[0].encode()
    assert checker.check(text, 4) is None
    pid = checker._proc.pid
    deadline = time.time() + 30
    while checker._proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert checker._proc.poll() == 0                   # left by itself
    assert checker.check(text, 4) is None and checker.started == 2 and checker._proc.pid != pid


def test_a_child_that_does_not_answer_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(_lgbm_check, "CHECK_TIMEOUT_S", 0.5)
    silent = tmp_path / "python"
    silent.write_text("#!/bin/sh\nexec sleep 60\n")
    os.chmod(silent, 0o755)
    checker = ModelChecker(str(silent), dict(os.environ))
    with pytest.raises(CheckTimeout):
        checker.check(_texts(1)[0].encode(), 4)
    assert checker._proc is None                       # killed and reaped


def test_a_cancel_while_waiting_kills_the_child_and_is_raised(tmp_path):
    # the caller's interrupt check runs while the child has not answered; what it raises (a
    # backend's QueryCanceled) comes out at once, long before the timeout, and the child is
    # killed: its late answer must not be taken for the next text's
    silent = tmp_path / "python"
    silent.write_text("#!/bin/sh\nexec sleep 60\n")
    os.chmod(silent, 0o755)
    checker = ModelChecker(str(silent), dict(os.environ))
    calls = []

    def interrupt_check():
        calls.append(time.monotonic())
        if len(calls) == 3:
            raise KeyboardInterrupt("cancel")
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="cancel"):
        checker.check(_texts(1)[0].encode(), 4, interrupt_check)
    assert len(calls) == 3 and calls[0] - t0 >= _lgbm_check.POLL_S * 0.9
    assert checker._proc is None                       # killed and reaped


def test_a_check_that_polls_still_gets_the_answer(checker):
    calls = []
    texts = _texts(2)
    assert checker.check(texts[0].encode(), 4, lambda: calls.append(1)) is None     # the child starts: polls
    assert checker.check(texts[1].encode(), 4, lambda: calls.append(1)) is None
    assert checker.started == 1


def test_check_in_child_reports_what_the_child_found(monkeypatch):
    from groupml.errors import ModelFormatError

    text = _texts(1)[0]
    _lgbm._TRUSTED_BODIES.clear()
    bad = text.replace("objective=binary sigmoid:1", "objective=no_such_objective")
    with pytest.raises(ModelFormatError, match="The lightgbm model is damaged: .*no_such_objective"):
        _lgbm.check_in_child(bad.encode(), 4)
    monkeypatch.setattr(_lgbm._checker(), "check", lambda body, n, poll: (_ for _ in ()).throw(CheckTimeout()))
    with pytest.raises(ModelFormatError, match="could not be checked: loading it took over 120 s"):
        _lgbm.check_in_child(text.encode(), 4)
