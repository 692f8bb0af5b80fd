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

Python's ``multiprocessing`` also starts one small ``resource_tracker`` process per
backend that used a pool; it exits with the backend.
"""

from __future__ import annotations

import os
import queue
import sys
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

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
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # BLAS reads these when it loads (numpy is not imported yet in a fresh helper);
    # threadpool_limits below covers a library that was loaded anyway
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    for name in modules:                 # import while the backend is still loading data
        importlib.import_module(name)
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)          # process-wide, for the helper's whole life


class HelperPool:
    """``processes`` helper processes; :meth:`submit` tasks, :meth:`results` collects them.

    Use as a context manager: leaving it normally waits for the helpers to exit; leaving
    it with an exception (cancel, error) terminates them at once.
    """

    def __init__(self, processes: int, python: str, warm: Sequence[str] = ("groupml.fitting",)):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        ctx.set_executable(python)
        self._pool = ctx.Pool(processes, initializer=_init_helper, initargs=(tuple(warm),))
        self._done: "queue.Queue[Tuple[Any, Any, Optional[BaseException]]]" = queue.Queue()
        self._pending = 0

    def submit(self, key: Any, fn: Callable, *args: Any) -> None:
        """Run ``fn(*args)`` (a module-level function; arguments are pickled) in a helper."""
        self._pool.apply_async(fn, args, callback=lambda r, k=key: self._done.put((k, r, None)),
                               error_callback=lambda e, k=key: self._done.put((k, None, e)))
        self._pending += 1

    def results(self, poll: Callable[[], None], every: float = 0.25) -> Iterator[Tuple[Any, Any]]:
        """Yield ``(key, result)`` as tasks finish, calling ``poll()`` at least every
        ``every`` seconds while waiting (the backend's cancel check); a task's exception is
        raised here."""
        while self._pending:
            try:
                key, result, error = self._done.get(timeout=every)
            except queue.Empty:
                poll()
                continue
            self._pending -= 1
            poll()
            if error is not None:
                raise error
            yield key, result

    def close(self, terminate: bool = False) -> None:
        if terminate:
            self._pool.terminate()
        else:
            self._pool.close()
        self._pool.join()

    def __enter__(self) -> "HelperPool":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(terminate=exc_type is not None or self._pending > 0)
