"""The child process that loads and probes LightGBM model texts before this process does.

LightGBM's loader can crash the whole process on altered text (SIGSEGV or abort), and in a
PostgreSQL backend that restarts every session of the server. So a model text this process
did not make is first loaded, and asked for predictions on probe rows, by a child process;
only if the child answers does this process load it (``_lgbm.check_in_child``, after the
structural check of ``_lgbm_text``).

The child stays up between checks: starting Python and importing LightGBM cost ≈ 0.2 s, the
check itself a few ms, and a session that scores the models of many groups (a BI tool's
query over a catalog of per-country LightGBM models, say) meets a new text per group. A child
that crashes on a text reports that text as damaged and is replaced at the next check; an
idle child exits after :data:`IDLE_EXIT_S`, so a backend does not keep a Python process
alive for good. One child per process, used under a lock. While it waits for an answer the
caller's ``interrupt_check`` runs every :data:`POLL_S` (a backend's cancel check): whatever
it raises kills the child first, so a cancel is noticed within a poll, not after
:data:`CHECK_TIMEOUT_S`.

Protocol (the child's stdout is moved to /dev/null, so LightGBM's own prints cannot mix in):
request = 8-byte little-endian text length, 8-byte feature count, the text; reply = one line,
``ok`` or ``err <reason>``.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
import time
from typing import Callable, Optional

CHECK_TIMEOUT_S = 120.0
IDLE_EXIT_S = 60.0
POLL_S = 0.2
#: Packages LightGBM imports for its optional integrations (scikit-learn API, pandas and
#: arrow input, dask, plotting); groupml uses none of them.
OPTIONAL_INTEGRATIONS = ("sklearn", "pandas", "dask", "pyarrow", "cffi", "matplotlib", "graphviz")
#: The first lines of every child process that imports LightGBM: its integrations blocked.
BLOCK_INTEGRATIONS = f"import sys\nfor m in {OPTIONAL_INTEGRATIONS!r}:\n    sys.modules[m] = None\n"

_BOOT = BLOCK_INTEGRATIONS + (
    "import os, select\n"
    "reply = os.fdopen(os.dup(1), 'wb', buffering=0)\n"
    "os.dup2(os.open(os.devnull, os.O_WRONLY), 1)\n"
    "import numpy as np, lightgbm as lgb\n"
    "def read(n):\n"
    "    out = bytearray()\n"
    "    while len(out) < n:\n"
    "        part = os.read(0, min(n - len(out), 1 << 20))\n"
    "        if not part:\n"
    "            sys.exit(0)\n"
    "        out += part\n"
    "    return bytes(out)\n"
    "while True:\n"
    "    if not select.select([0], [], [], float(sys.argv[1]))[0]:\n"
    "        sys.exit(0)\n"
    "    head = read(16)\n"
    "    size, n = int.from_bytes(head[:8], 'little'), int.from_bytes(head[8:], 'little')\n"
    "    text = read(size).decode('utf-8')\n"
    "    try:\n"
    "        b = lgb.Booster(model_str=text)\n"
    "        if b.num_feature() != n:\n"
    "            raise ValueError('n_features does not match the trees')\n"
    "        rng = np.random.default_rng(0)\n"
    "        X = np.vstack([np.zeros((1, n)), np.ones((1, n)), -np.ones((1, n)), np.full((1, n), np.nan),\n"
    "                       np.full((1, n), 1e30), np.full((1, n), -1e30), rng.standard_normal((26, n)) * 10])\n"
    "        X = X[:max(1, min(len(X), (1 << 22) // n))]\n"
    "        b.predict(X, raw_score=True, num_threads=1)\n"
    "        del b\n"
    "        reply.write(b'ok\\n')\n"
    "    except Exception as exc:\n"
    "        lines = str(exc).strip().splitlines() or [type(exc).__name__]\n"
    "        reply.write(('err ' + lines[-1][:300] + '\\n').encode('utf-8', 'replace'))\n"
)


class CheckTimeout(Exception):
    """The child did not answer within :data:`CHECK_TIMEOUT_S` (it was killed)."""


class ModelChecker:
    """The checking child of this process (started on first use, replaced when it dies)."""

    def __init__(self, python: str, env):
        self._python, self._env = python, env
        self._proc: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()
        self.started = 0                    # children started so far (tests and diagnostics)

    def check(self, body: bytes, n_features: int,
              interrupt_check: Optional[Callable[[], None]] = None) -> Optional[str]:
        """None if the child loaded ``body`` and predicted the probe rows; else why not
        ("LightGBM crashed on it (signal 11)", LightGBM's error, ...). Raises CheckTimeout,
        or what ``interrupt_check`` (called every :data:`POLL_S` while waiting) raises."""
        request = len(body).to_bytes(8, "little") + int(n_features).to_bytes(8, "little") + body
        with self._lock:
            for _ in range(2):
                proc = self._live()
                try:
                    proc.stdin.write(request)
                    proc.stdin.flush()
                    line = self._reply(proc, interrupt_check)
                except BrokenPipeError:
                    line = None
                if line is not None:
                    return None if line == "ok" else line[4:] if line.startswith("err ") else line
                code = self._reap()
                if code is not None and code < 0:
                    return f"LightGBM crashed on it (signal {-code})"
                # exit status 0 without an answer: it left idle just as the request came; again
            return f"the checking process exited with status {code}"

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                self._proc.kill()
                self._reap()

    def _live(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is not None:
            self._reap()
        if self._proc is None:
            # its own session: PostgreSQL signals a backend's whole process group, and a cancel
            # (SIGINT) that killed the child was reported as "LightGBM crashed on it (signal 2)";
            # the child still ends with its parent (end of file on its stdin)
            self._proc = subprocess.Popen([self._python, "-c", _BOOT, str(IDLE_EXIT_S)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=self._env,
                                          start_new_session=True)
            self.started += 1
        return self._proc

    def _reply(self, proc: subprocess.Popen, interrupt_check) -> Optional[str]:
        """The child's reply line, or None at end of file (it exited)."""
        fd, out = proc.stdout.fileno(), bytearray()
        deadline = time.monotonic() + CHECK_TIMEOUT_S
        while not out.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                self._reap()
                raise CheckTimeout()
            if not select.select([fd], [], [], min(left, POLL_S))[0]:
                if interrupt_check is not None:
                    try:
                        interrupt_check()
                    except BaseException:
                        proc.kill()         # its answer would be read as the next text's
                        self._reap()
                        raise
                continue
            part = os.read(fd, 4096)
            if not part:
                return None
            out += part
        return out[:-1].decode("utf-8", "replace")

    def _reap(self) -> Optional[int]:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        for f in (proc.stdin, proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        return proc.wait()
