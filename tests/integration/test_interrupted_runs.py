"""A call that is cancelled, times out or loses its backend: the cancel arrives while the call
is still loading torch, and its run reads 'cancelled' to whoever looks (groupml.runs,
groupml.progress, the next call), with the hint to resume it."""

import json
import threading
import time

import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification

pytestmark = pytest.mark.integration

#: A search that does not end by itself within a test (tol 0 never converges): every call of
#: it is interrupted.
ENDLESS = json.dumps({"l2": [10 ** -k for k in range(1, 5)], "max_iter": 100000, "tol": 1e-300})
FEATS = "ARRAY[" + ", ".join(f"'f{j + 1}'" for j in range(6)) + "]"
TRAIN = ("CALL groupml.train_groups('slow', ARRAY['country'], " + FEATS + ", 'clicked', 'logistic', %s::jsonb, "
         "%s::jsonb, NULL, workers => %s)")


def _args(workers: int):
    """TRAIN's arguments: with 2 workers an option only worker backends take, so that strategy
    'auto' runs on them (it would train this endless search in one backend, which it prices
    cheaper)."""
    return [ENDLESS, json.dumps({"keep_snapshot": False} if workers > 1 else {}), workers]


@pytest.fixture
def slow(db):
    create_table(db, "slow", grouped_classification(12000, 2, 6, seed=5, exponent=0.2))
    create_table(db, "small", grouped_classification(400, 2, 2, seed=6, exponent=0.5))


def _trained_by(db, pid, timeout=60.0):
    """Wait until backend ``pid`` trains a run (its row is committed and the run is claimed)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if db.execute("SELECT count(*) FROM groupml.progress WHERE trained_by = %s", [pid]).fetchone()[0]:
            return True
        time.sleep(0.02)
    return False


def _interrupt(dsn, db, how, workers):
    """Start an endless run in a new session and end its call by ``how``; (run id, the error)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        conn.execute("SELECT groupml.help('fit')")          # groupml loaded: the run starts at once
        started, sent = threading.Event(), threading.Event()
        if how == "statement_timeout":
            conn.execute("SET statement_timeout = '2s'")
        else:
            def stop():
                with psycopg.connect(dsn, autocommit=True) as other:
                    if _trained_by(other, pid):
                        started.set()
                        time.sleep(0.5)                    # well into the run: snapshot or training
                        fn = "pg_cancel_backend" if how == "cancel" else "pg_terminate_backend"
                        other.execute(f"SELECT {fn}(%s)", [pid])
                        sent.set()
            watcher = threading.Thread(target=stop)
            watcher.start()
        with pytest.raises(psycopg.Error) as info:
            conn.execute(TRAIN, _args(workers))
        if how != "statement_timeout":
            watcher.join()
            assert started.is_set() and sent.is_set()
    if how == "terminate":                # the lock goes when the process has exited
        deadline = time.time() + 30
        while db.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]:
            assert time.time() < deadline
            time.sleep(0.05)
    run_id = db.execute("SELECT run_id FROM groupml.runs WHERE source = 'public.slow'").fetchone()[0]
    return run_id, info.value


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("how", ["cancel", "statement_timeout"])
def test_a_cancelled_run_is_stored_as_cancelled(dsn, db, slow, how, workers):
    # the cancel aborted the call's writes, so the run stayed 'running' for ever (finished_at
    # NULL, its elapsed time counting on), although help('catalog') names a status 'cancelled'
    run_id, err = _interrupt(dsn, db, how, workers)
    assert err.sqlstate == "57014", (err.sqlstate, str(err))
    why = "user request" if how == "cancel" else "statement timeout"
    assert err.diag.message_primary == (f"groupml: canceling statement due to {why}; run {run_id} keeps the groups "
                                        f"it committed")
    again = f"run_id => {run_id}" + (", workers => 2" if workers == 2 else "")
    assert err.diag.message_hint == f"Call train_groups again with {again} to resume it."
    assert db.execute("SELECT status, finished_at IS NOT NULL FROM groupml.runs WHERE run_id = %s",
                      [run_id]).fetchone() == ("cancelled", True)
    status, holder, e1 = db.execute("SELECT status, trained_by, elapsed FROM groupml.progress WHERE run_id = %s",
                                    [run_id]).fetchone()
    assert (status, holder) == ("cancelled", None)
    time.sleep(0.05)
    assert db.execute("SELECT elapsed FROM groupml.progress WHERE run_id = %s", [run_id]).fetchone()[0] == e1
    # resumable: a resumed call sets it running again (and is itself cancelled here)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '1s'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(TRAIN.replace("NULL", str(run_id)), _args(workers))
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "cancelled"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_whose_backend_was_terminated_reads_cancelled(dsn, db, slow, workers):
    # a terminated coordinator writes nothing more: its run read 'running' with trained_by NULL
    # for ever, in groupml.progress and in groupml.runs
    run_id, err = _interrupt(dsn, db, "terminate", workers)
    assert isinstance(err, psycopg.OperationalError), err
    # groupml.progress reads it as cancelled at once: no session trains it
    status, holder, finished, e1 = db.execute(
        "SELECT p.status, p.trained_by, r.finished_at, p.elapsed FROM groupml.progress p "
        "JOIN groupml.runs r USING (run_id) WHERE run_id = %s", [run_id]).fetchone()
    assert (status, holder, finished) == ("cancelled", None, None)
    time.sleep(0.05)
    assert db.execute("SELECT elapsed FROM groupml.progress WHERE run_id = %s", [run_id]).fetchone()[0] == e1
    # the next call stores it, saying so
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    db.execute("CALL groupml.train_groups('small', ARRAY['country'], ARRAY['f1', 'f2'], 'clicked', 'logistic')")
    assert (f"groupml: run {run_id} was left running by a call that ended without finishing it (cancelled, or its "
            f"session ended); it is marked cancelled and resumes with run_id => {run_id}") in notices, notices
    assert db.execute("SELECT status, finished_at IS NOT NULL FROM groupml.runs WHERE run_id = %s",
                      [run_id]).fetchone() == ("cancelled", True)
    assert db.execute("SELECT status FROM groupml.runs WHERE source = 'public.small'").fetchone()[0] == "done"
    assert db.execute("SELECT status FROM groupml.progress WHERE run_id = %s", [run_id]).fetchone()[0] == "cancelled"


def test_a_run_being_trained_reads_running(dsn, db, slow):
    # the read-time rule must not take a live call for a gone one: while the call trains, its
    # run reads 'running' everywhere, and another call leaves it alone
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        conn.execute("SET statement_timeout = '20s'")
        seen = {}

        def look():
            with psycopg.connect(dsn, autocommit=True) as other:
                assert _trained_by(other, pid)
                other.execute("CALL groupml.train_groups('small', ARRAY['country'], ARRAY['f1', 'f2'], 'clicked', "
                              "'logistic')")
                seen["progress"] = other.execute("SELECT status, trained_by FROM groupml.progress WHERE "
                                                 "run_id = (SELECT run_id FROM groupml.runs WHERE source = "
                                                 "'public.slow')").fetchone()
                seen["runs"] = other.execute("SELECT status FROM groupml.runs WHERE source = 'public.slow'"
                                             ).fetchone()[0]
                other.execute("SELECT pg_cancel_backend(%s)", [pid])

        watcher = threading.Thread(target=look)
        watcher.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(TRAIN, _args(1))
        watcher.join()
    assert seen == {"progress": ("running", pid), "runs": "running"}, seen


def _mapped(pid, name):
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return name in fh.read()
    except OSError:
        return False


MLP_SPEC = json.dumps({"epochs": 1000})


def _loader_state(conn, loader: str, done: str) -> str:
    """'loaded', 'loading' or 'not loaded': how far the connection's backend got with an import
    in the helper thread ``loader`` of groupml's MLP module (``done``: the module global set
    once it is in)."""
    notices = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary))
    conn.execute("DO LANGUAGE plpython3u $$\n"
                 "from groupml.learners import _mlp\n"
                 f"t = getattr(_mlp, '{loader}', None)\n"
                 f"plpy.notice('loaded' if getattr(_mlp, '{done}') else 'loading' if t is not None "
                 f"and t.is_alive() else 'not loaded')\n$$")
    return notices[-1]


def _torch_state(conn):
    """'loaded', 'loading' or 'not loaded': how far the connection's backend got with torch."""
    return _loader_state(conn, "_loader", "_torch_mod")


@pytest.fixture
def mlp_rows(db):
    create_table(db, "rows", grouped_classification(4000, 1, 6, seed=8, exponent=0.5))
    return "SELECT groupml.learn_over_groups(ARRAY[f1, f2, f3, f4, f5, f6], clicked, 'mlp', %s::jsonb) FROM rows"


def test_a_cancel_while_torch_loads_is_not_held_until_it_has_loaded(dsn, db, mlp_rows):
    # a new session's first MLP imports torch (seconds), and a cancel waited for the whole
    # import: the backend notices a cancel only when it calls into plpy. The cancel is sent as
    # soon as torch's shared library is mapped into the backend, so it arrives while torch loads;
    # afterwards the same session shows torch had not finished loading when the call ended
    # (a backend idle between statements runs no Python, so the import is where it stopped)
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        conn.execute("SELECT groupml.help('fit')")
        sent = threading.Event()

        def watch():
            with psycopg.connect(dsn, autocommit=True) as other:
                deadline = time.time() + 60
                while time.time() < deadline and not _mapped(pid, "libtorch_cpu"):
                    time.sleep(0.002)
                other.execute("SELECT pg_cancel_backend(%s)", [pid])
                sent.set()

        watcher = threading.Thread(target=watch)
        watcher.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(mlp_rows, [MLP_SPEC])
        watcher.join()
        assert sent.is_set()
        assert _torch_state(conn) == "loading"
        # the next call waits for that import (cancellable as well) and trains
        assert conn.execute(mlp_rows, [json.dumps({"epochs": 2})]).fetchone()[0] is not None


def test_statement_timeout_ends_a_new_sessions_first_mlp_while_torch_loads(dsn, db, mlp_rows):
    # a statement_timeout that expires during a new session's first MLP waited for torch's whole
    # import (seconds) before the statement ended. The session has groupml loaded already, so the
    # call reaches torch's import at once; the import takes far longer than the timeout on any
    # host (a second or more), so the timeout lands while torch loads, and the call ends there
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT groupml.help('fit')")
        conn.execute("SET statement_timeout = '250ms'")
        with pytest.raises(psycopg.errors.QueryCanceled) as info:
            conn.execute(mlp_rows, [MLP_SPEC])
        assert info.value.diag.message_primary == "groupml: canceling statement due to statement timeout", \
            info.value.diag.message_primary
        conn.execute("SET statement_timeout = 0")
        assert _torch_state(conn) == "loading"
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_timeout_while_a_sessions_first_optimizer_imports_ends_the_call_there(dsn, db, mlp_rows):
    # with torch loaded, a session's first MLP training still imports what torch's first
    # optimizer needs (torch._dynamo: most of a second), and a timeout waited for that import.
    # It loads in the helper thread too, so the call ends while it is still loading
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT groupml.help('fit')")          # groupml loaded (and on the session's path)
        conn.execute("DO LANGUAGE plpython3u $$\nfrom groupml.learners import _mlp\n_mlp.torch_module()\n$$")
        conn.execute("SET statement_timeout = '250ms'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(mlp_rows, [MLP_SPEC])
        conn.execute("SET statement_timeout = 0")
        assert _loader_state(conn, "_optim_loader", "_optim_ready") == "loading"
        # the next call waits for that import (cancellable as well) and trains
        assert conn.execute(mlp_rows, [json.dumps({"epochs": 2})]).fetchone()[0] is not None


@pytest.mark.parametrize("delay", [0.0, 0.2, 0.5])
def test_terminating_a_backend_while_torch_loads_ends_only_that_backend(cluster, dsn, db, mlp_rows, delay):
    # the backend exits while its helper thread is still loading torch (``delay`` seconds after
    # the library is mapped: its relocations, its initialisers, torch's Python modules): it
    # crashed in its exit (signal 11), which restarts the server and ends every other session
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.info.backend_pid
        conn.execute("SELECT groupml.help('fit')")

        def watch():
            with psycopg.connect(dsn, autocommit=True) as other:
                deadline = time.time() + 60
                while time.time() < deadline and not _mapped(pid, "libtorch_cpu"):
                    time.sleep(0.002)
                time.sleep(delay)
                other.execute("SELECT pg_terminate_backend(%s)", [pid])

        watcher = threading.Thread(target=watch)
        watcher.start()
        with pytest.raises(psycopg.OperationalError):
            conn.execute(mlp_rows, [MLP_SPEC])
        watcher.join()
    deadline = time.time() + 30                 # gone: its exit waited for the import
    while db.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()[0]:
        assert time.time() < deadline
        time.sleep(0.05)
    with open(cluster.logfile, errors="replace") as fh:
        log = fh.read()
    assert f"({pid}) was terminated by signal" not in log, log[-2000:]
    assert db.execute("SELECT 1").fetchone() == (1,)           # this session lived through it
