"""The coordinator's loop and the argument and pg_cron checks of udf/tenancy.py, without a
database: the loop over fake steps, the checks over plain values."""

import pytest

from groupml.errors import InvalidParameterError
from groupml.udf import tenancy as t


class _Session:
    def __init__(self):
        self.commits = 0
        self.cancel_checks = 0

    def commit(self):
        self.commits += 1

    def check_cancel(self):
        self.cancel_checks += 1


def _run_loop(monkeypatch, outcomes, max_steps=None, max_seconds=None):
    """Run run_scheduler's body over a scripted sequence of step outcomes; returns the steps taken."""
    session, taken = _Session(), []
    script = iter(outcomes)

    def step(sess, policy, cost_aware, cached, cache):
        assert sess is session and (policy, cost_aware) == ("hybrid", True)
        assert cached == (len(taken) or None)            # each step gets the cache entry the last one left
        taken.append(next(script))
        return taken[-1], len(taken)

    monkeypatch.setattr(t, "backend_session", lambda: session)
    monkeypatch.setattr(t, "_require_admin", lambda sess, what: None)
    monkeypatch.setattr(t, "_refresh_best", lambda sess: None)
    monkeypatch.setattr(t, "_scheduler_step", step)
    body = t.run_scheduler.__wrapped__.__wrapped__      # without sql_entry and pinned (no plpy here)
    body(max_steps, max_seconds, "hybrid", True)
    assert session.commits == 1 and session.cancel_checks == len(taken)
    return taken


def test_the_loop_counts_trained_steps_only_and_stops_when_done(monkeypatch):
    T, W, D = t.STEP_TRAINED, t.STEP_WITHDRAWN, t.STEP_DONE
    # a withdrawn candidate trains nothing: it does not count against max_steps
    assert _run_loop(monkeypatch, [T, W, W, T, T, T], max_steps=3) == [T, W, W, T, T]
    assert _run_loop(monkeypatch, [T, W, D, T], max_steps=10) == [T, W, D]
    assert _run_loop(monkeypatch, [W, T, D]) == [W, T, D]
    # no time left: no step at all
    assert _run_loop(monkeypatch, [T], max_seconds=1e-9) == []


@pytest.mark.parametrize("args, message", [
    ((None, None, "best", True), "The 'policy' value of run_scheduler must be one of"),
    ((None, None, "hybrid", None), "The 'cost_aware' value of run_scheduler must be true or false; got null"),
    ((0, None, "hybrid", True), "The 'max_steps' value of run_scheduler must be >= 1; got 0"),
    ((1.5, None, "hybrid", True), "The 'max_steps' value of run_scheduler must be an integer"),
    ((None, 0, "hybrid", True), "The 'max_seconds' value of run_scheduler must be > 0; got 0"),
])
def test_run_scheduler_arguments_are_checked_first(args, message):
    with pytest.raises(InvalidParameterError) as e:
        t._check_scheduler_args(*args)
    assert e.value.message.startswith(message)
    assert e.value.hint


def test_good_run_scheduler_arguments_pass():
    t._check_scheduler_args(None, None, "hybrid", True)
    t._check_scheduler_args(5, 2.5, "eirate", False)


@pytest.mark.parametrize("args, message", [
    ((" ", 50, "hybrid", True, "db", "job"), "The 'schedule' value of schedule_with_cron must be a cron schedule"),
    (("x" * (t.MAX_CRON_TEXT + 1), 50, "hybrid", True, "db", "job"), "The 'schedule' value of schedule_with_cron"),
    (("* * * * *", 0, "hybrid", True, "db", "job"), "The 'max_seconds' value of schedule_with_cron must be > 0"),
    (("* * * * *", 86401, "hybrid", True, "db", "job"), "The 'max_seconds' value of schedule_with_cron must be <="),
    (("* * * * *", 50, "nope", True, "db", "job"), "The 'policy' value of schedule_with_cron must be one of"),
    (("* * * * *", 50, "hybrid", True, "db", ""), "The 'job_name' value of schedule_with_cron must be a non-empty"),
    (("* * * * *", 50, "hybrid", True, "", "job"), "The 'database' value of schedule_with_cron must name a database"),
])
def test_schedule_with_cron_arguments_are_checked_first(args, message):
    with pytest.raises(InvalidParameterError) as e:
        t._check_cron_args(*args)
    assert e.value.message.startswith(message)
    assert e.value.hint


def test_the_hint_when_pg_cron_is_missing_says_what_to_do_where():
    # the role may not read shared_preload_libraries
    hidden = t._cron_missing_hint("app", None, None)
    assert hidden.startswith("CREATE EXTENSION pg_cron; in the database pg_cron runs in") and "'app'" in hidden
    # pg_cron not preloaded: the server needs it first
    assert t._cron_missing_hint("app", "citus", None).startswith("Add pg_cron to shared_preload_libraries")
    # preloaded, running in another database
    other = t._cron_missing_hint("app", "pg_cron,citus", "postgres")
    assert other.startswith("pg_cron runs in database 'postgres' (cron.database_name)")
    assert "database => 'app'" in other
