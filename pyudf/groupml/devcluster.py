"""Throwaway PostgreSQL clusters for the demo, the tests and the benchmarks.

``TempCluster`` runs ``initdb`` and ``pg_ctl`` from the server's bin directory
(found through ``pg_config --bindir``). Both refuse to run as root, so when this
process is root the cluster is created and started as an unprivileged OS user
(``postgres`` by default) through ``runuser``. The cluster listens on loopback
only, with trust authentication, on a free port, and lives in a temporary
directory that ``stop()`` removes (unless ``keep=True``).

This module runs on the client side only; the server never imports it.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from typing import Mapping, Optional


class ClusterError(RuntimeError):
    """The throwaway cluster could not be created or started."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bindir(pg_config: str = "pg_config") -> str:
    """The server's bin directory (``pg_config --bindir``), with a clear error when absent."""
    exe = shutil.which(pg_config) or (pg_config if os.path.exists(pg_config) else None)
    if exe is None:
        for major in ("17", "16", "15"):
            cand = f"/usr/lib/postgresql/{major}/bin/pg_config"
            if os.path.exists(cand):
                exe = cand
                break
    if exe is None:
        raise ClusterError("pg_config was not found on PATH; install the PostgreSQL server "
                           "(e.g. apt-get install postgresql-15) or pass its path")
    out = subprocess.run([exe, "--bindir"], capture_output=True, text=True, check=True)
    bindir = out.stdout.strip()
    # Debian's pg_config in /usr/bin reports /usr/lib/postgresql/<major>/bin.
    if not os.path.exists(os.path.join(bindir, "initdb")):
        raise ClusterError(f"initdb not found in {bindir}; is the PostgreSQL server package installed?")
    return bindir


class TempCluster:
    """A disposable local cluster. Use as a context manager or call start()/stop()."""

    def __init__(self, *, os_user: Optional[str] = None, port: Optional[int] = None,
                 settings: Optional[Mapping[str, str]] = None, keep: bool = False,
                 pg_config: str = "pg_config", base_dir: Optional[str] = None):
        self.bindir = pg_bindir(pg_config)
        self.port = port or _free_port()
        self.settings = dict(settings or {})
        self.keep = keep
        self.is_root = os.geteuid() == 0
        self.os_user = os_user or ("postgres" if self.is_root else pwd.getpwuid(os.geteuid()).pw_name)
        self.base_dir = base_dir
        self.dir: Optional[str] = None
        self.datadir: Optional[str] = None
        self.sockdir: Optional[str] = None
        self.logfile: Optional[str] = None

    # -- process helpers -------------------------------------------------
    def _cmd(self, *args: str) -> list:
        if self.is_root and self.os_user != "root":
            return ["runuser", "-u", self.os_user, "--", *args]
        return list(args)

    def _run(self, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
        res = subprocess.run(self._cmd(*args), capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            log = ""
            if self.logfile and os.path.exists(self.logfile):
                with open(self.logfile, errors="replace") as fh:
                    log = fh.read()[-3000:]
            raise ClusterError(f"{os.path.basename(args[0])} failed ({res.returncode}): "
                               f"{res.stderr.strip() or res.stdout.strip()}\n{log}")
        return res

    # -- lifecycle -------------------------------------------------------
    def start(self) -> "TempCluster":
        self.dir = tempfile.mkdtemp(prefix="groupml-pg-", dir=self.base_dir)
        os.chmod(self.dir, 0o755)
        self.datadir = os.path.join(self.dir, "data")
        self.sockdir = os.path.join(self.dir, "sock")
        self.logfile = os.path.join(self.dir, "server.log")
        os.makedirs(self.sockdir)
        if self.is_root:
            pw = pwd.getpwnam(self.os_user)
            for path in (self.dir, self.sockdir):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        self._run(os.path.join(self.bindir, "initdb"), "-D", self.datadir, "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.sockdir}'",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "60",
            "shared_buffers": "256MB",
            "work_mem": "64MB",
            "max_worker_processes": "16",
            "log_min_messages": "warning",
        }
        conf.update(self.settings)
        lines = "".join(f"{k} = {v}\n" for k, v in conf.items())
        self._append_conf(lines)
        self._run(os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-l", self.logfile,
                  "-w", "-t", "60", "start")
        self._wait_ready()
        return self

    def _append_conf(self, text: str) -> None:
        path = os.path.join(self.datadir, "postgresql.conf")
        if self.is_root:
            # the file belongs to the cluster's OS user; root may still append to it
            with open(path, "a") as fh:
                fh.write(text)
        else:
            with open(path, "a") as fh:
                fh.write(text)

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise ClusterError(f"server did not accept connections on port {self.port}")

    def stop(self) -> None:
        if self.datadir and os.path.exists(os.path.join(self.datadir, "postmaster.pid")):
            try:
                self._run(os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-m", "fast",
                          "-w", "stop", timeout=60)
            except ClusterError:
                self._run(os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-m",
                          "immediate", "-w", "stop", timeout=60)
        if self.dir and not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def halt(self) -> None:
        """Stop the server and keep its data directory (:meth:`resume` starts it again): a node
        that goes down and comes back."""
        self._run(os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-m", "fast", "-w", "stop", timeout=60)

    def resume(self) -> None:
        self._run(os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-l", self.logfile,
                  "-w", "-t", "60", "start")
        self._wait_ready()

    def restart(self, mode: str = "fast") -> None:
        """Restart the server; ``mode='immediate'`` stops it without a checkpoint, so it starts
        with crash recovery (as after a crash: unlogged tables come back empty)."""
        if mode not in ("fast", "immediate"):
            raise ValueError(f"restart mode must be 'fast' or 'immediate'; got {mode!r}")
        self._run(os.path.join(self.bindir, "pg_ctl"), "-D", self.datadir, "-l", self.logfile,
                  "-m", mode, "-w", "restart")
        self._wait_ready()

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} dbname={dbname} user={user}"

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def __enter__(self) -> "TempCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
