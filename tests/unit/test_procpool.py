"""groupml.procpool: helper processes that train groups for one backend."""

import functools
import os
import signal
import time

import numpy as np
import pytest

from groupml.errors import InvalidParameterError
from groupml.fitting import fit_group, fit_packed
from groupml.procpool import HelperPool, SharedBlock, helper_python


def _pool(n=2):
    python = helper_python()
    assert python and os.access(python, os.X_OK)
    return HelperPool(n, python)


def _children():
    """PIDs of this process's multiprocessing pool workers that are still alive."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if ppid == os.getpid() and b"spawn_main" in cmd:
            out.append(int(pid))
    return out


def test_helpers_run_tasks_in_other_processes_and_return_results_by_key():
    with _pool() as pool:
        for key in ("a", "b", "c"):
            pool.submit(key, os.getpid)
        got = dict(pool.results(lambda: None))
    assert set(got) == {"a", "b", "c"}
    assert os.getpid() not in got.values()
    assert not _children()                      # closed and joined


def test_a_helper_ignores_sigint_and_runs_blas_on_one_thread():
    from threadpoolctl import threadpool_info

    with _pool(1) as pool:
        pool.submit("sig", signal.getsignal, signal.SIGINT)
        pool.submit("blas", threadpool_info)
        got = dict(pool.results(lambda: None))
    assert got["sig"] == signal.SIG_IGN
    blas = [lib for lib in got["blas"] if lib["user_api"] == "blas"]
    assert blas and all(lib["num_threads"] == 1 for lib in blas)


def test_fit_packed_in_a_helper_equals_fit_group_in_this_process():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((600, 4))
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0]) + rng.standard_normal(600) > 0).astype(float)
    raw = np.column_stack([X, y]).astype(">f8").tobytes()
    search, options = {"l2": [0.0, 0.01, 1.0]}, {}
    with _pool(1) as pool:
        pool.submit(0, fit_packed, raw, 602, 4, "logistic", search, options)
        (_, remote), = list(pool.results(lambda: None))
    local = fit_group(X, y, "logistic", search, options, n_skipped=2)
    assert remote.n_skipped == 2 and remote.params == local.params and remote.score == local.score
    assert remote.model == local.model                 # the same bytes: same arithmetic in both processes


def _memory_file(chunks):
    """A memory file holding ``chunks`` one after another; (fd, [SharedBlock per chunk])."""
    fd = os.memfd_create("test blocks", os.MFD_CLOEXEC)
    blocks, offset = [], 0
    for c in chunks:
        os.pwrite(fd, c, offset)
        blocks.append(SharedBlock(fd, offset, len(c)))
        offset += len(c)
    return fd, blocks


def _bytes_of(view, tag):
    return tag, bytes(view)


def test_shared_blocks_reach_helpers_as_their_bytes_without_the_pipe():
    rng = np.random.default_rng(5)
    # ranges that start and end off page boundaries, one larger than a pipe's buffer, an empty one
    chunks = [rng.bytes(n) for n in (10, 70_001, 4096 * 3 + 5, 0, 1_000_003)]
    fd, blocks = _memory_file(chunks)
    try:
        with _pool() as pool:
            for i, b in enumerate(blocks):
                pool.submit(i, _bytes_of, b, i)
            got = dict(pool.results(lambda: None))
        assert {i: v for i, (_, v) in got.items()} == dict(enumerate(chunks))
        assert all(tag == i for i, (tag, _) in got.items())
        assert not _children()
        with blocks[1].view() as view:              # in this process too, read-only
            assert bytes(view) == chunks[1] and view.readonly
    finally:
        os.close(fd)


def test_fit_packed_on_a_shared_block_equals_it_on_bytes():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((500, 3))
    y = (X[:, 0] - X[:, 1] + rng.standard_normal(500) > 0).astype(float)
    raw = np.column_stack([X, y]).tobytes()
    fd, (block,) = _memory_file([raw])
    try:
        search = {"l2": [0.0, 0.1]}
        with _pool(1) as pool:
            pool.submit(0, functools.partial(fit_packed, dtype="=f8"), block, 500, 3, "logistic", search, {})
            (_, remote), = list(pool.results(lambda: None))
        local = fit_packed(raw, 500, 3, "logistic", search, {}, dtype="=f8")
        assert remote.params == local.params and remote.model == local.model
    finally:
        os.close(fd)


def test_an_error_in_a_helper_reaches_the_caller_with_its_hint():
    raw = np.zeros((10, 3)).astype(">f8").tobytes()
    with pytest.raises(InvalidParameterError) as err:
        with _pool(1) as pool:
            pool.submit(0, fit_packed, raw, 10, 2, "logistic", {"l2": [-1]}, {})
            list(pool.results(lambda: None))
    assert "l2" in str(err.value) and err.value.hint
    assert not _children()


def test_leaving_with_an_exception_terminates_busy_helpers_at_once():
    polls = []

    def poll():
        polls.append(1)
        if len(polls) >= 2:
            raise KeyboardInterrupt("cancel")    # what the backend's cancel check raises, in kind

    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        with _pool(2) as pool:
            for i in range(2):
                pool.submit(i, time.sleep, 60)
            list(pool.results(poll, every=0.05))
    assert time.perf_counter() - t0 < 20
    assert not _children()


def test_more_tasks_than_helpers_queue_and_all_finish():
    with _pool(2) as pool:
        for i in range(7):
            pool.submit(i, pow, i, 2)
        got = dict(pool.results(lambda: None))
    assert got == {i: i * i for i in range(7)}
    assert not _children()


def _sleep_then_pid(seconds):
    time.sleep(seconds)
    return os.getpid()


def test_a_killed_helper_ends_the_wait_with_its_own_error():
    # multiprocessing.Pool replaced a killed worker and lost its task: results() waited for ever
    from groupml.procpool import HelperLostError

    with pytest.raises(HelperLostError) as err:
        with _pool(2) as pool:
            pool.submit("slow", _sleep_then_pid, 60)
            pool.submit("quick", os.getpid)
            for key, pid in pool.results(lambda: None, every=0.05):
                assert key == "quick"
                victim = [p for p in _children() if p != pid]
                assert len(victim) == 1
                os.kill(victim[0], signal.SIGKILL)
    assert err.value.sqlstate == "58000"
    assert "killed by signal 9" in err.value.message and "OOM killer" in err.value.message
    assert "resume" in err.value.hint
    assert not _children()


def test_closing_never_waits_long_for_a_helper_that_does_not_exit():
    pool = _pool(1)
    pool.submit(0, os.getpid)
    list(pool.results(lambda: None))
    os.kill(pool._helpers[0].process.pid, signal.SIGSTOP)      # cannot read its exit request
    t0 = time.perf_counter()
    pool.close(grace=0.5)
    assert time.perf_counter() - t0 < 10
    assert not _children()


_STARTING_HELPERS = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from groupml.procpool import HelperPool, SharedBlock, helper_python
with HelperPool(2, helper_python()) as pool:
    starting = [h.process.pid for h in pool._helpers]
    for pid in starting:
        os.kill(pid, signal.SIGINT)
    for i in range(4):
        pool.submit(i, os.getpid)
    got = dict(pool.results(lambda: None))
print(sorted(set(got.values())) == sorted(starting))
"""


def test_a_cancel_that_reaches_helpers_while_they_start_does_not_kill_them():
    # pg_cancel_backend signals the backend's process group; a helper still importing (before
    # it set SIGINT to ignored) died of it, and its group was lost. A fresh interpreter: the
    # first pool of a process also starts multiprocessing's resource tracker, which unblocked
    # SIGINT before the first helper was spawned
    import subprocess
    import sys

    pyudf = os.path.join(os.path.dirname(__file__), "..", "..", "pyudf")
    out = subprocess.run([sys.executable, "-c", _STARTING_HELPERS, pyudf], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_a_helper_that_reads_nothing_never_blocks_the_backend():
    # a group's bytes fill the pipe until the helper reads them: sent from the backend's own
    # thread, a stopped or still-starting helper kept the backend in that write, deaf to cancel
    polls = []

    def poll():
        polls.append(1)
        if len(polls) >= 3:
            raise KeyboardInterrupt("cancel")

    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        with _pool(1) as pool:
            os.kill(pool._helpers[0].process.pid, signal.SIGSTOP)
            pool.submit(0, len, b"x" * (8 << 20))           # far beyond a pipe's buffer
            assert time.perf_counter() - t0 < 5
            list(pool.results(poll, every=0.05))
    assert time.perf_counter() - t0 < 15
    assert not _children()


class _Unpicklable:
    def __reduce__(self):
        raise MemoryError("simulated: the task does not fit")


def test_a_task_that_cannot_be_sent_fails_the_call():
    # the sender thread lost such an error, and the call waited for a result until cancelled
    t0 = time.perf_counter()
    with pytest.raises(MemoryError, match="simulated"):
        with _pool(1) as pool:
            pool.submit(0, len, _Unpicklable())
            list(pool.results(lambda: None, every=0.05))
    assert time.perf_counter() - t0 < 15
    assert not _children()
