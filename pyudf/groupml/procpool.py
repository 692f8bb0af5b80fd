"""Helper processes that train groups in parallel for one backend.

A backend has one Python interpreter, and numpy releases the GIL only inside large
enough operations: a pass over a small group is many short numpy calls, so threads of
one backend trained the demo's groups barely faster than one after another (1.08x from
2 threads, measured with py-spy: the GIL was held about half of the time).
``train_groups`` therefore hands whole groups to a few helper processes.

* **Spawned, never forked.** Each helper is a fresh interpreter (the venv's ``python``,
  started with fork+exec by :mod:`multiprocessing`'s ``spawn`` method), so it inherits
  none of the backend's state: no shared memory, sockets, locks or signal handlers.
* **Plain Python.** A helper receives the packed bytes of one group and returns a
  :class:`groupml.fitting.FitResult`; it never connects to the database. Only the
  backend's main thread talks to PostgreSQL, checks for cancel and writes the catalog.
* **Cancel and termination.** PostgreSQL signals a backend's whole process group, which
  the helpers belong to. Helpers ignore SIGINT (``pg_cancel_backend``, which reaches
  them too): cancel is the backend's business, and on cancel or error the backend
  terminates its helpers. ``pg_terminate_backend`` (SIGTERM) and a server crash
  (SIGQUIT) end them with the backend; a helper whose backend vanished exits when its
  task pipe closes.
* **One BLAS thread each**, like the rest of a backend's training.
* **Large inputs by memory file.** A :class:`SharedBlock` argument (a byte range of a memory
  file, such as train_groups' load arena) does not go through the pipe: its file descriptor
  does (``SCM_RIGHTS``), and the helper maps the range read-only. That spares the pickling
  and the pipe's copies of a group's rows (about 0.13 s per 168 MB on two helpers).

* **A helper that dies** (the OOM killer, an operator's kill) is seen through its process
  sentinel: the call ends with :class:`HelperLostError` (58000) and its run resumes; the
  helpers never leave the backend waiting, and closing them never blocks past a few seconds.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import sys
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from .errors import GroupmlError

MAX_PROCESSES = 4


def helper_python() -> Optional[str]:
    """The Python executable helpers run: the venv's (found from ``sys.path``), else
    ``sys.executable`` when it is an interpreter of the same version; None when neither
    exists (then groups are trained in the backend itself)."""
    for p in sys.path:
        root = os.path.dirname(os.path.dirname(os.path.dirname(p))) if p.endswith("site-packages") else None
        if root and os.path.isfile(os.path.join(root, "pyvenv.cfg")):
            for name in ("python", f"python{sys.version_info[0]}.{sys.version_info[1]}", "python3"):
                exe = os.path.join(root, "bin", name)
                if os.access(exe, os.X_OK):
                    return exe
    exe = sys.executable
    if exe and os.access(exe, os.X_OK) and os.path.basename(exe).startswith("python"):
        return exe
    return None


def _init_helper(modules: Sequence[str]) -> None:
    import importlib

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # born with SIGINT blocked (HelperPool), so a cancel that reached the process group while
    # this interpreter started is pending, not fatal: ignored now, it is dropped on unblock
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    # BLAS reads these when it loads (numpy is not imported yet in a fresh helper);
    # threadpool_limits below covers a library that was loaded anyway
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    for name in modules:                 # import while the backend is still loading data
        importlib.import_module(name)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)          # process-wide, for the helper's whole life


class SharedBlock:
    """Bytes ``[offset, offset + nbytes)`` of the memory file open as ``fd`` in this process.

    A task argument of this type reaches a helper without being copied: the helper receives
    the descriptor and maps the range (:meth:`view`). The descriptor stays the creator's: it
    closes it once the helpers are done (they receive duplicates)."""

    __slots__ = ("fd", "offset", "nbytes")

    def __init__(self, fd: Optional[int], offset: int, nbytes: int):
        self.fd, self.offset, self.nbytes = fd, int(offset), int(nbytes)

    def __getstate__(self):
        return (self.offset, self.nbytes)       # the descriptor travels apart (SCM_RIGHTS)

    def __setstate__(self, state):
        self.fd, (self.offset, self.nbytes) = None, state

    @contextlib.contextmanager
    def view(self) -> Iterator[memoryview]:
        """The bytes as a read-only memoryview over a mapping of the file (unmapped on exit,
        or when the last array made from them goes)."""
        import mmap

        if self.nbytes == 0:
            yield memoryview(b"")
            return
        start = self.offset - self.offset % mmap.ALLOCATIONGRANULARITY
        m = mmap.mmap(self.fd, self.offset + self.nbytes - start, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ,
                      offset=start)
        try:
            with memoryview(m) as whole:
                yield whole[self.offset - start:]
        finally:
            try:
                m.close()
            except BufferError:                 # an array still uses the bytes: unmapped with it
                pass


def _shared_blocks(args: Sequence[Any]) -> List[SharedBlock]:
    return [a for a in args if isinstance(a, SharedBlock)]


def _run_task(conn, fn: Callable, args: Tuple[Any, ...]):
    """A task's result in a helper; its :class:`SharedBlock` arguments arrive as descriptors
    after the task and are passed to ``fn`` as memoryviews of their bytes."""
    from multiprocessing import reduction

    shared = _shared_blocks(args)
    for blk in shared:
        blk.fd = reduction.recv_handle(conn)
    try:
        with contextlib.ExitStack() as stack:
            views = {id(b): stack.enter_context(b.view()) for b in shared}
            return fn(*[views.get(id(a), a) if isinstance(a, SharedBlock) else a for a in args])
    finally:
        for blk in shared:
            os.close(blk.fd)


class HelperLostError(GroupmlError):
    """A helper process ended while it trained a group (killed: the OOM killer, an operator)."""
    sqlstate = "58000"  # system_error: an error external to PostgreSQL


def _helper_main(conn, warm: Sequence[str]) -> None:
    """A helper's loop: receive ``(fn, args)``, send back ``("ok", result)`` or
    ``("error", exception)``; ``None`` or a closed pipe ends it."""
    _init_helper(warm)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return                       # the backend is gone
        if job is None:
            return
        fn, args = job
        try:
            out = ("ok", _run_task(conn, fn, args))
        except BaseException as exc:     # reported to the backend, which raises it
            out = ("error", exc)
        try:
            conn.send(out)
        except (EOFError, OSError):
            return
        except Exception as exc:         # a result or exception that does not pickle
            conn.send(("error", RuntimeError(f"a helper's {out[0]} could not be sent back: {exc!r}")))


class _Helper:
    __slots__ = ("process", "conn", "key", "sender", "send_error")

    def __init__(self, process, conn):
        self.process, self.conn, self.key, self.sender, self.send_error = process, conn, None, None, None


def _send(h: _Helper, payload) -> None:
    """A sender thread's work: a group's bytes fill the pipe until the helper reads them, and a
    helper still starting (or stopped) reads nothing, so the backend's own thread must not wait
    in this write (it could not check for cancel). A dead helper's pipe fails here; its
    sentinel tells the backend. Any other failure (the task does not pickle, memory) is kept
    for :meth:`HelperPool.results` to raise: the helper never gets the task."""
    from multiprocessing import reduction

    try:
        h.conn.send(payload)
        for blk in _shared_blocks(payload[1]):
            reduction.send_handle(h.conn, blk.fd, h.process.pid)
    except (EOFError, OSError):
        pass
    except BaseException as exc:  # noqa: BLE001 - handed to the backend's thread, which raises it
        h.send_error = exc


class HelperPool:
    """``processes`` helper processes; :meth:`submit` tasks, :meth:`results` collects them.

    Each helper is a :mod:`multiprocessing` process of its own with a pipe to the backend
    and runs one task at a time, so the backend knows which task each helper holds: a
    helper that dies (killed by the OOM killer, say) is seen at once through its process
    sentinel and raises :class:`HelperLostError`, instead of its task waiting for ever
    (``multiprocessing.Pool`` replaces a dead worker but loses its task).

    Use as a context manager: leaving it normally asks the helpers to exit (and kills any
    that has not within a few seconds); leaving it with an exception (cancel, error) kills
    them at once.
    """

    def __init__(self, processes: int, python: str, warm: Sequence[str] = ("groupml.fitting",)):
        import multiprocessing

        from multiprocessing import resource_tracker

        ctx = multiprocessing.get_context("spawn")
        ctx.set_executable(python)
        # spawning starts multiprocessing's resource tracker first, and that UNBLOCKS SIGINT in
        # this thread when it is done: start it before blocking SIGINT below (measured: else the
        # first helper was born with SIGINT deliverable)
        resource_tracker.ensure_running()
        self._helpers = []
        try:
            for _ in range(processes):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_helper_main, args=(child, tuple(warm)), daemon=True)
                # a cancel signals the backend's whole process group: a helper still starting
                # (before _init_helper ignores SIGINT) died of it. The signal mask survives
                # fork and exec, so the helper starts with SIGINT blocked; the backend's own
                # mask is restored at once (a cancel meanwhile stays pending, never lost)
                before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
                try:
                    proc.start()
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, before)
                child.close()
                self._helpers.append(_Helper(proc, parent))
        except BaseException:
            self.close(terminate=True)
            raise
        self._waiting: "collections.deque" = collections.deque()

    @property
    def _pending(self) -> int:
        """Tasks submitted and not yet collected: waiting for a helper, or held by one."""
        return len(self._waiting) + sum(h.key is not None for h in self._helpers)

    @property
    def has_free_helper(self) -> bool:
        """True when a helper holds no task (a task submitted now starts at once)."""
        return self._pending < len(self._helpers)

    @property
    def pending(self) -> int:
        """Tasks submitted whose results were not collected yet."""
        return self._pending

    def submit(self, key: Any, fn: Callable, *args: Any) -> None:
        """Run ``fn(*args)`` (a module-level function; arguments are pickled, but for
        :class:`SharedBlock` ones: ``fn`` receives a memoryview of their bytes) in a helper."""
        self._waiting.append((key, fn, args))
        self._dispatch()

    def _dispatch(self) -> None:
        for h in self._helpers:
            if not self._waiting:
                return
            if h.key is None:
                key, fn, args = self._waiting.popleft()
                h.key = (key,)
                h.send_error = None
                h.sender = threading.Thread(target=_send, args=(h, (fn, args)), daemon=True,
                                            name="groupml-helper-send")
                h.sender.start()

    def _lost(self, h: _Helper) -> None:
        h.process.join(timeout=1.0)
        code = h.process.exitcode
        how = (f"killed by signal {-code}" if code is not None and code < 0 else
               f"exit code {code}" if code is not None else "its pipe closed")
        raise HelperLostError(
            f"A helper process of this backend (pid {h.process.pid}) ended while it trained a group ({how}; "
            f"SIGKILL usually means the kernel's OOM killer)",
            hint="Nothing of that group was stored. Call train_groups again with the run's run_id to resume; "
                 "with less memory per group, or option processes => 1 to train in the backend itself.")

    def results(self, poll: Callable[[], None], every: float = 0.25) -> Iterator[Tuple[Any, Any]]:
        """Yield ``(key, result)`` as tasks finish, calling ``poll()`` at least every
        ``every`` seconds while waiting (the backend's cancel check); a task's exception is
        raised here, and so is :class:`HelperLostError` for a helper that died."""
        from multiprocessing.connection import wait

        while self._pending:
            busy = [h for h in self._helpers if h.key is not None]
            for h in busy:
                if h.send_error is not None and not h.sender.is_alive():
                    raise h.send_error
            watched = {h.conn: h for h in busy}
            watched.update({h.process.sentinel: h for h in busy})
            ready = wait(list(watched), timeout=every)
            poll()
            for h in {id(watched[r]): watched[r] for r in ready}.values():
                if h.key is None:
                    continue
                try:
                    if not h.conn.poll():        # only the sentinel: the process ended
                        raise EOFError
                    status, payload = h.conn.recv()
                except (EOFError, OSError):
                    self._lost(h)
                key, h.key = h.key[0], None
                self._dispatch()
                if status == "error":
                    raise payload
                yield key, payload

    def close(self, terminate: bool = False, grace: float = 5.0) -> None:
        """Stop the helpers: at once (``terminate``), else ask them to exit and kill those
        still running after ``grace`` seconds; never blocks longer than that."""
        for h in self._helpers:
            if not terminate:
                try:
                    h.conn.send(None)
                except (EOFError, OSError):
                    pass
        deadline = time.monotonic() + (0.0 if terminate else grace)
        for h in self._helpers:
            h.process.join(timeout=max(0.0, deadline - time.monotonic()))
            if h.process.exitcode is None:
                h.process.kill()
                h.process.join(timeout=5.0)
            if h.sender is not None:
                h.sender.join(timeout=5.0)      # its write fails once the helper is gone
            h.conn.close()

    def __enter__(self) -> "HelperPool":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(terminate=exc_type is not None or self._pending > 0)
