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


class _Clock:
    """time.time() that advances one second a call."""
    def __init__(self):
        self.now = 0.0

    def time(self):
        self.now += 1.0
        return self.now


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
    monkeypatch.setattr(t, "time", _Clock())
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
    # the time budget is checked before each step (the clock advances a second a reading)
    assert _run_loop(monkeypatch, [T, W, T, T], max_seconds=2.5) == [T, W]
    assert _run_loop(monkeypatch, [T], max_seconds=0.5) == []


_SCHED, _CRON = t._check_scheduler_args, t._check_cron_args
_EVERY_MINUTE = ("* * * * *", 50, "hybrid", True, "db", "job")


def _cron(**changed):
    """schedule_with_cron's arguments, every minute, with ``changed`` ones replaced."""
    names = ["schedule", "max_seconds", "policy", "cost_aware", "database", "job_name"]
    return tuple(changed.get(n, v) for n, v in zip(names, _EVERY_MINUTE))


@pytest.mark.parametrize("check, args, message", [
    (_SCHED, (None, None, "best", True), "The 'policy' value of run_scheduler must be one of"),
    (_SCHED, (None, None, "hybrid", None), "The 'cost_aware' value of run_scheduler must be true or false; got null"),
    (_SCHED, (0, None, "hybrid", True), "The 'max_steps' value of run_scheduler must be >= 1; got 0"),
    (_SCHED, (1.5, None, "hybrid", True), "The 'max_steps' value of run_scheduler must be an integer"),
    (_SCHED, (None, 0, "hybrid", True), "The 'max_seconds' value of run_scheduler must be > 0; got 0"),
    (_CRON, _cron(schedule=" "), "The 'schedule' value of schedule_with_cron must be a cron schedule"),
    (_CRON, _cron(schedule="x" * (t.MAX_CRON_TEXT + 1)), "The 'schedule' value of schedule_with_cron"),
    (_CRON, _cron(max_seconds=0), "The 'max_seconds' value of schedule_with_cron must be > 0"),
    (_CRON, _cron(max_seconds=86401), "The 'max_seconds' value of schedule_with_cron must be <="),
    (_CRON, _cron(policy="nope"), "The 'policy' value of schedule_with_cron must be one of"),
    (_CRON, _cron(job_name=""), "The 'job_name' value of schedule_with_cron must be a non-empty"),
    (_CRON, _cron(database=""), "The 'database' value of schedule_with_cron must name a database"),
])
def test_arguments_are_checked_before_anything_is_read(check, args, message):
    with pytest.raises(InvalidParameterError) as e:
        check(*args)
    assert e.value.message.startswith(message)
    assert e.value.hint


def test_good_arguments_pass():
    _SCHED(None, None, "hybrid", True)
    _SCHED(5, 2.5, "eirate", False)
    _CRON(*_EVERY_MINUTE)


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
