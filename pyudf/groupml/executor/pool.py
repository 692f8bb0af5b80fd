"""Worker endpoints and the pool of worker connections the coordinator drives.

Workers are addressed by DSN (``groupml.worker_endpoints``; empty = loopback to this
server as the calling role), so a remote server looks the same as a loopback backend.
Each worker has one psycopg connection and one thread: it executes its queue of
tasks one at a time (worker exclusivity) and logs what ran, where and when. Threads
never call plpy; the coordinator's main thread does all catalog I/O.

Workers see only committed data: the snapshot is committed before the pool starts.
Passwords never leave this module: :func:`redact` scrubs DSNs in every message.
"""

from __future__ import annotations

import os
import queue
import re
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import Any, Dict, List, Optional

from ..errors import DataError, GroupmlError, InvalidParameterError, PrerequisiteStateError

# a libpq value is quoted ('...', backslash escapes inside) or unquoted, where a backslash
# escapes the next character too (an escaped space does not end the value)
_PW = [re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|(?:\\.|[^\s\\])+)", re.I),
       re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)")]


# a URI's query parameters: libpq decodes %xx in their names too (pass%77ord is password)
_URI_PARAM = re.compile(r"([?&])([^=&\s]*)=([^&\s]*)")


def _uri_param(m: "re.Match") -> str:
    from urllib.parse import unquote

    key = unquote(m.group(2)).strip().lower()
    return f"{m.group(1)}{m.group(2)}=***" if key in ("password", "passfile") else m.group(0)


def redact(text: str) -> str:
    """Remove passwords from a DSN or an error message that may quote one."""
    text = _PW[0].sub(r"\1***", str(text))
    text = _URI_PARAM.sub(_uri_param, text)
    return _PW[1].sub(r"\1***\3", text)


class WorkerLostError(GroupmlError):
    sqlstate = "08006"  # connection_failure


class WorkerEndpointError(WorkerLostError):
    """A worker endpoint could not be used: no connection, or a connection to another server
    or database than the coordinator's (whose snapshot tables it would read instead)."""

    sqlstate = "08001"  # sqlclient_unable_to_establish_sqlconnection


class WorkerLockTimeoutError(WorkerLostError):
    """A worker's task waited longer than the run's ``lock_timeout_ms`` for a lock (a
    concurrent session held it): the run is resumable once the lock is free."""

    sqlstate = "55P03"  # lock_not_available


class PartitionUnavailableError(WorkerLostError):
    """Model hopper parallelism lost every worker holding a copy of a partition: the run stops
    (it resumes with fresh worker connections)."""

    sqlstate = "08006"  # connection_failure


class NodeLostError(PartitionUnavailableError):
    """Every node holding a copy of a partition of a run on the nodes went away mid-run."""

    sqlstate = "08001"  # sqlclient_unable_to_establish_sqlconnection, as for a node down at the start

    @classmethod
    def of(cls, what: str, group_key: str, why: str) -> "NodeLostError":
        """The error for ``what`` (partitions, validation rows) of a group left without a live node."""
        return cls(f"{what} of group {group_key} have no live node: {why}",
                   hint="Every node holding a copy of the partition is gone: bring the node back. Shards replicated "
                        "on two or more nodes (citus.shard_replication_factor) let another node take its units over.")


class WorkerDataError(DataError):
    """A worker's task failed on the data (SQLSTATE class 22, e.g. features out of a
    learner's range): not a lost worker -- resuming would fail the same way -- so it keeps
    the worker's SQLSTATE, message and hint."""

    def __init__(self, sqlstate: str, message: str, *, hint=None):
        super().__init__(message, hint=hint)
        self.sqlstate = sqlstate


class WorkerStateError(WorkerLostError):
    """A worker's task failed with an error of its own SQLSTATE that is neither the data's
    (WorkerDataError) nor a lost connection or a cancel: a missing privilege, out of memory,
    a program limit, an error raised by a function of the source's view. The run stops with
    that SQLSTATE and the worker's hint (not a lost worker, XX000, whose hint only
    said to resume); it resumes once the cause is fixed."""

    def __init__(self, sqlstate: str, message: str, *, hint=None):
        super().__init__(message, hint=hint)
        self.sqlstate = sqlstate


#: SQLSTATE classes of a worker error that mean the worker (or its connection) went away,
#: not that its task met a problem of its own: connection, operator intervention (cancel,
#: terminate, shutdown), rollback (deadlock, serialization), system and internal errors
LOST_CLASSES = ("08", "40", "57", "58", "XX")


def _primary(exc, text: str) -> str:
    """A worker error's primary message, redacted, without the prefix PL/Python adds: ours
    carry 'groupml: ', a PostgreSQL error inside the worker's PL/Python its class name."""
    primary = exc.diag.message_primary or text
    return redact(re.sub(r"^(groupml: |spiexceptions\.\w+: )", "", primary)).strip()


def _task_error(exc: BaseException, where: str, text: str, lock_timeout_ms: Optional[int] = None) -> GroupmlError:
    """What a failed task raises on the coordinator: WorkerDataError for a data error the
    worker reported, WorkerLockTimeoutError when it gave up waiting for a lock (naming the
    option that set the wait), WorkerStateError for another error with a SQLSTATE of its own,
    else WorkerLostError with ``where`` and the first line of ``text``."""
    import psycopg

    state = getattr(exc, "sqlstate", None) if isinstance(exc, psycopg.Error) else None
    if state == "55P03":
        waited = f" (option lock_timeout_ms = {lock_timeout_ms})" if lock_timeout_ms is not None else ""
        return WorkerLockTimeoutError(
            f"{where} waited longer than its lock timeout{waited} for a lock held by another transaction: "
            f"{_primary(exc, text)}",
            hint="Raise the lock_timeout_ms option of train_groups, or end the transaction holding the lock "
                 "(pg_locks, pg_stat_activity).")
    if state and state.startswith("22"):
        return WorkerDataError(state, f"{where}: {_primary(exc, text)}",
                               hint=exc.diag.message_hint or "The source's rows caused it: fix them (or a view over "
                                                             "them), then call train_groups again.")
    if state and not state.startswith(LOST_CLASSES):
        return WorkerStateError(state, f"{where}: {_primary(exc, text)}",
                                hint=exc.diag.message_hint or "Fix the cause named in the message.")
    lines = redact(text).strip().splitlines() or ["(no message)"]
    return WorkerLostError(f"{where} failed: {lines[0]}")


def _settle(fut: Future, result=None, exc: Optional[BaseException] = None) -> None:
    """Resolve a task's future unless it is already resolved (a task failed by ``close`` may
    still report late)."""
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except InvalidStateError:
        pass


def loopback_dsn(session) -> str:
    r = session.query(
        "SELECT pg_catalog.host(pg_catalog.inet_server_addr()) AS host, pg_catalog.inet_server_port() AS port, "
        "pg_catalog.current_setting('port') AS cport, "
        # pg_settings leaves out what the role may not read (unix_socket_directories needs
        # pg_read_all_settings; current_setting would raise 42501 for an ordinary role)
        "pg_catalog.split_part((SELECT s.setting FROM pg_catalog.pg_settings s WHERE s.name OPERATOR(pg_catalog.=) "
        "'unix_socket_directories'), ',', 1) AS sock, "
        "pg_catalog.current_database() AS db, current_user AS usr")[0]
    from psycopg.conninfo import make_conninfo
    host = r["host"] or (r["sock"] or "").strip() or "localhost"
    port = r["port"] or r["cport"]
    return make_conninfo(host=host, port=str(port), dbname=r["db"], user=r["usr"])


def check_loopback_slots(session, workers: int) -> None:
    """Loopback workers are connections to this server: refuse (53300), before anything is
    written, more of them than it has free slots (each worker failed to connect with 'too many
    clients' only after the run had been created: XX000 and a failed run)."""
    if _has_remote_endpoints(session):
        return
    free, why, way = loopback_free_slots(session)
    if workers > free:
        from ..errors import TooManyConnectionsError
        raise TooManyConnectionsError(
            f"The 'workers' value of train_groups must be <= the {max(free, 0)} connections free for loopback "
            f"workers ({why}); got {workers}",
            hint=f"Use fewer workers, close idle sessions, or {way}.")


def _has_remote_endpoints(session) -> bool:
    return bool(session.query("SELECT EXISTS (SELECT 1 FROM groupml.worker_endpoints WHERE enabled AND "
                              "pg_catalog.lower(pg_catalog.btrim(dsn)) <> 'loopback') AS remote")[0]["remote"])


def auto_worker_limit(session) -> int:
    """The most workers ``workers => 0`` lets the planner choose: the enabled endpoints, or for
    loopback workers this server's CPUs and free connection slots (at most 64)."""
    rows = session.query("SELECT count(*) FILTER (WHERE enabled) AS n FROM groupml.worker_endpoints")
    enabled = int(rows[0]["n"]) if rows else 0
    if enabled:
        return min(enabled, 64)
    return max(1, min(os.cpu_count() or 1, loopback_free_slots(session)[0], 64))


def loopback_free_slots(session):
    """(connections free for loopback workers, the limit that binds, the way to raise it)."""
    r = session.query(
        "SELECT pg_catalog.current_setting('max_connections')::int AS max_conn, "
        "pg_catalog.current_setting('superuser_reserved_connections')::int AS reserved, "
        "(SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) AS su, current_user::text AS me, "
        "(SELECT rolconnlimit FROM pg_catalog.pg_roles WHERE rolname = current_user) AS role_limit, "
        "(SELECT datconnlimit FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()) AS db_limit, "
        "(SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend')::int AS used, "
        "(SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend' "
        " AND datname = pg_catalog.current_database())::int AS db_used, "
        "(SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend' "
        " AND usename = current_user)::int AS role_used")[0]
    # the reserved slots stay free even for a superuser's workers: taken, nobody could connect
    # to cancel the run (every login got 'too many clients')
    limits = [(r["max_conn"] - r["used"] - r["reserved"],
               f"max_connections {r['max_conn']} less {r['reserved']} reserved for superusers, {r['used']} in use",
               "raise max_connections (a restart)")]
    if not r["su"]:             # superusers are exempt from database and role connection limits
        if r["db_limit"] is not None and r["db_limit"] >= 0:
            limits.append((r["db_limit"] - r["db_used"],
                           f"this database's CONNECTION LIMIT {r['db_limit']}, {r['db_used']} in use",
                           "raise the database's limit (ALTER DATABASE ... CONNECTION LIMIT)"))
        if r["role_limit"] is not None and r["role_limit"] >= 0:
            limits.append((r["role_limit"] - r["role_used"],
                           f"the CONNECTION LIMIT {r['role_limit']} of role {r['me']}, {r['role_used']} in use",
                           "raise the role's limit (ALTER ROLE ... CONNECTION LIMIT)"))
    return min(limits, key=lambda t: t[0])


def check_endpoints(session, workers: int) -> None:
    """Everything about the workers that can be checked before a run is created: the
    endpoints (:func:`resolve_endpoints`) and free connections for loopback ones."""
    resolve_endpoints(session, workers)
    check_loopback_slots(session, workers)


def server_identity(session) -> Dict[str, Any]:
    """What tells this server and database apart from any other: a worker must see the same
    (it reads this database's snapshot tables; another database may have a snapshot of the
    same id)."""
    r = session.query(_IDENTITY_SQL)[0]
    return {"started": str(r["started"]), "db": int(r["db"]), "name": str(r["name"]), "role": str(r["role"])}


# the start time as epoch seconds (numeric text: the same whatever a session's TimeZone or
# DateStyle), the database's OID and name, and the role statements run as
_IDENTITY_SQL = ("SELECT EXTRACT(epoch FROM pg_catalog.pg_postmaster_start_time())::text AS started, "
                 "(SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) "
                 "pg_catalog.current_database())::bigint AS db, pg_catalog.current_database()::text AS name, "
                 "current_user::text AS role")


def resolve_endpoints(session, workers: int) -> List[Dict[str, str]]:
    rows = session.query("SELECT name, dsn, enabled FROM groupml.worker_endpoints ORDER BY name")
    if rows and not any(r["enabled"] for r in rows):
        raise PrerequisiteStateError(
            f"groupml.worker_endpoints has {len(rows)} rows and none is enabled",
            hint="Enable endpoints (UPDATE groupml.worker_endpoints SET enabled = true WHERE ...), or delete "
                 "the rows to use loopback connections to this server.")
    rows = [r for r in rows if r["enabled"]]
    if not rows:
        dsn = loopback_dsn(session)
        return [{"name": f"loopback-{i + 1}", "dsn": dsn} for i in range(workers)]
    if len(rows) < workers:
        raise InvalidParameterError(
            f"The 'workers' value of train_groups must be <= the {len(rows)} enabled rows of "
            f"groupml.worker_endpoints; got {workers}",
            hint="Add endpoints, or empty groupml.worker_endpoints to use loopback connections.")
    loop = None
    out = []
    for r in rows[:workers]:
        dsn = r["dsn"]
        if dsn.strip().lower() == "loopback":
            loop = loop or loopback_dsn(session)
            dsn = loop
        out.append({"name": r["name"], "dsn": dsn})
    return out


def _given(dsn: str) -> Dict[str, str]:
    """The options a DSN sets itself, password included when it is not empty."""
    from psycopg.conninfo import conninfo_to_dict

    return {k: v for k, v in conninfo_to_dict(dsn).items() if v not in (None, "")}


def for_holder(request: str, snapshot: Optional[int]) -> str:
    """A request as a holder runs it: a holder (an endpoint reading its own table on another
    server) keeps its part of the run's snapshot under its own id there."""
    if snapshot is None or '"snapshot"' not in request:
        return request
    import json

    req = json.loads(request)
    req["snapshot"] = int(snapshot)
    return json.dumps(req)


# the worker SQL functions a task may call (never formatted from input)
TASK_SQL = {"partial": "SELECT groupml._gap_partial(%s::jsonb, %s::bytea)",
            "task": "SELECT groupml._gap_task(%s::jsonb, %s::bytea)"}


class Task:
    __slots__ = ("worker", "request", "theta", "future", "meta", "sql")

    def __init__(self, worker, request, theta, meta, fn="partial"):
        self.worker, self.request, self.theta, self.meta = worker, request, theta, meta
        self.sql = TASK_SQL[fn]
        self.future: Future = Future()


class WorkerPool:
    """p worker connections, one thread each; ``submit`` returns a Future of the bytes."""

    def __init__(self, endpoints: List[Dict[str, str]], *, run_id: int, lock_timeout_ms: int = 10000,
                 connect_timeout: int = 10, clock_start: float = 0.0, identity: Optional[Dict[str, Any]] = None):
        self.endpoints = endpoints
        self.identity = identity          # server_identity() of the coordinator: every worker must match
        self.run_id = run_id
        self.lock_timeout_ms = lock_timeout_ms
        self.connect_timeout = connect_timeout
        # per worker: (priority, sequence, task); FIFO within a priority. Whole-group searches
        # ('fit' tasks) yield to the short tasks of split groups (hops, ranks, GLM passes) so a
        # split group's chain of hops does not wait behind every queued one-worker search.
        self.queues: List["queue.PriorityQueue"] = [queue.PriorityQueue() for _ in endpoints]
        self._seq = 0
        self.log: List[Dict[str, Any]] = []
        self._log_lock = threading.Lock()
        self.pids: List[Optional[int]] = [None] * len(endpoints)
        # the address each worker's server accepted our connection on (NULL over a unix
        # socket): where the distributed LightGBM rank running in that backend listens
        self.addresses: List[Optional[str]] = [None] * len(endpoints)
        self.conns: List[Any] = [None] * len(endpoints)
        self.errors: List[Optional[str]] = [None] * len(endpoints)
        self.t0 = time.perf_counter() - float(clock_start)   # log times: seconds since clock_start ago
        self.closed = False
        self.started = False
        self._threads: List[threading.Thread] = []
        self._submit_lock = threading.Lock()
        self._busy = [0] * len(endpoints)
        self._running: List[Optional[Task]] = [None] * len(endpoints)
        self.failovers: List[tuple] = []        # (endpoint, node down, node used instead)
        # bytes of requests sent to and results received from each worker
        self.sent = [0] * len(endpoints)
        self.received = [0] * len(endpoints)
        self.size = len(endpoints)              # workers with a thread (grows with add_workers)

    def start(self) -> None:
        import psycopg

        self.started = True
        for i, ep in enumerate(self.endpoints):
            tried = []
            for where in [{"node": ep.get("node"), "dsn": ep["dsn"]}] + list(ep.get("alternates") or []):
                try:
                    self.conns[i] = self._connect(i, where["dsn"], ep)
                    if tried:               # a replicated shard: another placement serves it
                        self.failovers.append((ep["name"], tried[0][0], where["node"]))
                        ep["node"], ep["dsn"] = where["node"], where["dsn"]
                    break
                except psycopg.Error as exc:
                    tried.append((where["node"], exc))
                except WorkerEndpointError:
                    self.close()
                    raise
            else:
                node, exc = tried[0]
                if ep.get("optional"):      # a replica: the run goes on without it
                    self.errors[i] = f"node {node} is unreachable: {redact(str(exc)).strip()}"
                    self.failovers.append((ep["name"], node, None))
                    continue
                self.close()
                if ep.get("remote"):
                    raise WorkerEndpointError(
                        f"Cannot connect to node {node} for {ep.get('table')} ('{ep['name']}'): "
                        f"{redact(str(exc)).strip()}"
                        + (f" (nor to its other placements: {', '.join(t[0] for t in tried[1:])})"
                           if len(tried) > 1 else ""),
                        hint="groupml connects to the nodes holding the shards as the calling role. Start the node "
                             "(or fix pg_hba.conf there for this role), then call train_groups again; a failed run "
                             "resumes with its run_id.") from None
                raise WorkerEndpointError(
                    f"Cannot connect to worker endpoint '{ep['name']}' ({redact(ep['dsn'])}): "
                    f"{redact(str(exc)).strip()}",
                    hint="Loopback workers connect to this server as the calling role over TCP or the socket; "
                         "check pg_hba.conf (a password must be given in groupml.worker_endpoints) or use "
                         "workers => 1.") from None
        for i in range(len(self.endpoints)):
            self._start_thread(i)

    def _start_thread(self, i: int) -> None:
        t = threading.Thread(target=self._loop, args=(i,), name=f"groupml-worker-{i}", daemon=True)
        t.start()
        self._threads.append(t)

    def add_workers(self, endpoints: List[Dict[str, Any]]) -> List[int]:
        """Connect ``endpoints`` as new workers of the started pool (elasticity; main thread):
        their indices. A worker that cannot connect raises WorkerEndpointError and is left
        out (the pool keeps its other workers); the ones connected before it stay."""
        import psycopg

        added = []
        for ep in endpoints:
            i = len(self.endpoints)
            self.endpoints.append(ep)
            self.queues.append(queue.PriorityQueue())
            for column, empty in ((self.pids, None), (self.addresses, None), (self.conns, None),
                                  (self._running, None), (self._busy, 0), (self.sent, 0), (self.received, 0)):
                column.append(empty)
            self.errors.append(None)
            try:
                self.conns[i] = self._connect(i, ep["dsn"], ep)
            except (psycopg.Error, WorkerEndpointError) as exc:
                why = exc.message if isinstance(exc, WorkerEndpointError) else redact(str(exc)).strip()
                self.errors[i] = f"worker {i} ('{ep['name']}') could not connect: {why}"
                raise WorkerEndpointError(self.errors[i], hint="Check the endpoint (or free connections for "
                                                               "loopback workers) and file the request again.") from None
            self._start_thread(i)
            self.size = i + 1
            added.append(i)
        return added

    def _connect(self, i: int, dsn: str, ep):
        import psycopg

        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=self.connect_timeout,
                               application_name=f"groupml worker {i} run {self.run_id}")
        try:
            if ep.get("caller_only") and conn.pgconn.used_password and "password" not in _given(dsn):
                raise WorkerEndpointError(
                    f"Node {ep.get('node')} took a password the calling role did not give (the server's own "
                    f"credentials); refused", hint="A non-superuser reaches the nodes with its own credentials only: "
                                                   "configure pg_hba.conf on the node for this role.")
            conn.execute(f"SET lock_timeout = {int(self.lock_timeout_ms)}")
            conn.execute("SET statement_timeout = 0")
            # a coordinator that dies (pg_terminate_backend, a crash) closes this connection:
            # the worker notices at its next interrupt check instead of finishing its task
            conn.execute("SET client_connection_check_interval = 1000")
            self.pids[i] = conn.info.backend_pid
            self.addresses[i] = conn.execute(
                "SELECT pg_catalog.host(pg_catalog.inet_server_addr())").fetchone()[0]
            self._check_identity(conn, ep)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_identity(self, conn, ep) -> None:
        """Refuse a worker connected to another server or database than the coordinator."""
        if self.identity is None:
            return
        started, db, name, role = conn.execute(_IDENTITY_SQL).fetchone()
        if not ep.get("remote") and (str(started), int(db)) != (self.identity["started"], self.identity["db"]):
            what = (f"another server (database '{name}')" if str(started) != self.identity["started"]
                    else f"database '{name}'")
            raise WorkerEndpointError(
                f"Worker endpoint '{ep['name']}' ({redact(ep['dsn'])}) connects to {what}; workers must connect "
                f"to this server's database '{self.identity['name']}'",
                hint="Workers read this database's snapshot tables: point the endpoint's DSN at this server and "
                     "database (or 'loopback'), or disable it.")
        if str(role) != (ep.get("role") or self.identity["role"]):
            raise WorkerEndpointError(
                f"Worker endpoint '{ep['name']}' ({redact(ep['dsn'])}) connects as role '{role}'; workers must "
                f"connect as the calling role '{self.identity['role']}'",
                hint="A worker runs the source's views and functions with its role's rights: give the endpoint the "
                     "calling role's user (or use 'loopback'), or call train_groups as that role.")

    def submit(self, worker: int, request: str, theta: bytes, meta: Dict[str, Any], fn: str = "partial") -> Future:
        """Queue one task on ``worker``; ``fn`` names the worker function (``TASK_SQL``)."""
        return self.submit_gang([(worker, request, theta, meta)], fn=fn)[0]

    def submit_gang(self, items, fn: str = "partial") -> List[Future]:
        """Queue tasks that must run at the same time on different workers (the ranks of one
        distributed LightGBM job) atomically: every worker queue is FIFO within a priority (ranks all have one) and gangs are
        enqueued under one lock, so two gangs sharing workers are in the same order on all
        of them and never wait on each other in a cycle."""
        tasks = [Task(w, r, th, m, fn) for w, r, th, m in items]
        with self._submit_lock:
            for task in tasks:
                if self.errors[task.worker] is not None:
                    task.future.set_exception(WorkerLostError(self.errors[task.worker]))
                elif self.closed:
                    task.future.set_exception(WorkerLostError("the worker pool is closed"))
                else:
                    self._seq += 1
                    prio = 1 if task.meta.get("kind") == "fit" else 0
                    self.queues[task.worker].put((prio, self._seq, task))
        return [t.future for t in tasks]

    def alive(self, worker: int) -> bool:
        """False once a task of ``worker`` failed (its connection is not used again)."""
        return self.errors[worker] is None and not self.closed

    def load(self, worker: int) -> int:
        """Tasks queued on or running in ``worker`` (for the hopper's choice of the next shard)."""
        return self.queues[worker].qsize() + self._busy[worker]

    def _loop(self, i: int) -> None:
        import psycopg

        conn = self.conns[i]
        while True:
            task = self.queues[i].get()[2]
            if task is None:
                return
            if self.errors[i] is not None or self.closed:
                _settle(task.future, exc=WorkerLostError(self.errors[i] or "the worker pool is closed"))
                continue
            self._busy[i] = 1
            self._running[i] = task
            t0 = time.perf_counter() - self.t0
            try:
                request = for_holder(task.request, self.endpoints[i].get("snapshot"))
                self.sent[i] += len(request) + len(task.theta or b"")
                with conn.cursor(binary=True) as cur:
                    cur.execute(task.sql, [request, task.theta])
                    row = cur.fetchone()
                if row is None or row[0] is None:
                    raise WorkerLostError("the task returned no result")
                out = bytes(row[0])
                self.received[i] += len(out)
            except Exception as exc:  # noqa: BLE001 - any failure ends this worker, never the thread silently
                self._busy[i] = 0
                self._running[i] = None
                text = str(exc) if isinstance(exc, (psycopg.Error, WorkerLostError)) else f"{type(exc).__name__}: {exc}"
                err = _task_error(exc, f"worker {i} ('{self.endpoints[i]['name']}', backend pid {self.pids[i]})",
                                  text, self.lock_timeout_ms)
                self.errors[i] = err.message
                _settle(task.future, exc=err)
                continue
            t1 = time.perf_counter() - self.t0
            self._busy[i] = 0
            self._running[i] = None
            if task.meta.get("group_key") is not None:     # not a group's task (a snapshot part): no schedule
                with self._log_lock:
                    self.log.append(dict(task.meta, worker=i, started=t0, finished=t1, worker_pid=self.pids[i]))
            _settle(task.future, result=out)

    def take_log(self, group_key: str) -> List[Dict[str, Any]]:
        with self._log_lock:
            mine = [e for e in self.log if e["group_key"] == group_key]
            self.log = [e for e in self.log if e["group_key"] != group_key]
        return mine

    def _fail_leftovers(self) -> None:
        """After the join timeout: fail every task still queued on or running in a worker whose
        thread did not stop (a query that ignored its cancel), so that nobody waits on it."""
        def lost():
            return WorkerLostError("the worker pool is closed")

        with self._submit_lock:
            for i, q in enumerate(self.queues):
                task = self._running[i]
                if task is not None:
                    _settle(task.future, exc=lost())
                while True:
                    try:
                        task = q.get_nowait()[2]
                    except queue.Empty:
                        break
                    if task is not None:
                        _settle(task.future, exc=lost())
                q.put((9, 1 << 62, None))       # a thread that comes back still finds its stop

    def close(self) -> None:
        self.closed = True
        for c in self.conns:
            if c is not None:
                try:
                    c.cancel()
                except Exception:  # noqa: BLE001 - best effort on a possibly dead connection
                    pass
        for q in self.queues:
            q.put((9, 1 << 62, None))
        for t in self._threads:
            t.join(timeout=10)
        self._fail_leftovers()
        for c in self.conns:
            if c is not None:
                try:
                    c.close()
                except Exception:  # noqa: BLE001
                    pass


def rank_hosts(addresses: List[Optional[str]], workers: List[int], names: List[str]) -> List[str]:
    """The host each rank of a distributed LightGBM job listens on, one per rank (``workers``:
    the pool index of each rank's worker): the worker server's address as this coordinator
    reached it. A worker reached over a unix socket or loopback is on the coordinator's host (127.0.0.1);
    such ranks cannot be mixed with ranks on other hosts, which could not reach them."""
    from ..errors import FeatureNotSupportedError

    hosts = []
    for w in workers:
        a = addresses[w]
        if a is None or a == "::1" or a.startswith("127."):
            hosts.append("127.0.0.1")
        elif ":" in a:
            raise FeatureNotSupportedError(
                f"Distributed LightGBM needs IPv4 worker addresses; worker '{names[w]}' is reached at {a}",
                hint="Give that endpoint's DSN an IPv4 host address, or keep LightGBM groups whole "
                     "(strategy => 'gtp').")
        else:
            hosts.append(a)
    local = [h == "127.0.0.1" for h in hosts]
    if any(local) and not all(local):
        mixed = sorted({names[w] for w, loc in zip(workers, local) if loc})
        raise FeatureNotSupportedError(
            f"A split LightGBM group has ranks on the coordinator's host ({', '.join(mixed)}, reached over loopback or a "
            f"unix socket) and on other hosts, which cannot connect to 127.0.0.1",
            hint="Give the local endpoints this server's network address in their DSN (host=...), or keep "
                 "LightGBM groups whole (strategy => 'gtp').")
    return hosts


def check_source_visible(session, source: str) -> None:
    """Worker backends see only committed, regular relations: temp tables are refused."""
    r = session.query("SELECT c.relpersistence AS p FROM pg_catalog.pg_class c WHERE c.oid = $1::regclass",
                      [source], ["text"])
    if r and r[0]["p"] == "t":
        raise PrerequisiteStateError(
            f"train_groups with workers reads {source} through other backends, which cannot see a temporary table "
            f"(nor rows this transaction has not committed)",
            hint="Copy it into a regular table (CREATE TABLE ... AS SELECT ...), commit, and call again; or use "
                 "workers => 1 with strategy => 'auto'.")
