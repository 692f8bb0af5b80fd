"""Clusters of several local PostgreSQL servers for the scale-out tests (session-scoped).

* ``citus_cluster``: a Citus coordinator and two workers, each its own :class:`TempCluster` on
  loopback. The nodes are set up by the same files the Docker image uses (``docker/init/``):
  ``citus-node.conf`` on every node, ``10-citus-node.sql`` on every node, then
  ``20-citus-coordinator.sql`` on the coordinator through psql (it registers the coordinator and
  the workers and creates groupml, which Citus sends to the workers).
* ``fdw_shards``: a coordinator with postgres_fdw and three shard servers, each with groupml.

Without Citus in the server's library directory the Citus tests skip, naming the build script;
with ``CI=true`` they fail instead, since CI builds Citus first.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import List, Optional

import psycopg
import pytest
from psycopg import sql

from groupml.devcluster import TempCluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INIT_DIR = os.path.join(ROOT, "docker", "init")
BUILD_SCRIPT = "sudo bash ../shared/citus/build-citus.sh"
DB = "postgres"


def _libdir(bindir: str) -> str:
    out = subprocess.run([os.path.join(bindir, "pg_config")], capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("PKGLIBDIR = "):
            return line.split(" = ", 1)[1].strip()
    return os.path.join(os.path.dirname(bindir), "lib")


def citus_available(bindir: str) -> bool:
    return os.path.exists(os.path.join(_libdir(bindir), "citus.so"))


def require_citus(bindir: str) -> None:
    """Skip (fail under CI=true) when Citus is not installed into the local server."""
    if citus_available(bindir):
        return
    reason = f"Citus is not installed into the local PostgreSQL; run `{BUILD_SCRIPT}`"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI must run the Citus tests)", pytrace=False)
    pytest.skip(reason)


def node_settings(bindir: str) -> dict:
    """citus-node.conf as TempCluster settings, plus pg_cron when the server has it (as the
    main test cluster loads it)."""
    settings = {}
    with open(os.path.join(INIT_DIR, "citus-node.conf")) as fh:
        for line in fh:
            line = line.split("#", 1)[0].strip()
            if line:
                key, value = (part.strip() for part in line.split("=", 1))
                settings[key] = value
    if os.path.exists(os.path.join(_libdir(bindir), "pg_cron.so")):
        libs = settings["shared_preload_libraries"].strip("'")
        settings["shared_preload_libraries"] = f"'{libs},pg_cron'"
        settings["cron.database_name"] = f"'{DB}'"
    return settings


def run_psql(node: TempCluster, script: str, **variables) -> str:
    """Run one of the init scripts with psql (as the Docker one-shot service does)."""
    cmd = [os.path.join(node.bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
           "-h", "127.0.0.1", "-p", str(node.port), "-U", "postgres", "-d", DB,
           "-f", os.path.join(INIT_DIR, script)]
    for name, value in variables.items():
        cmd[1:1] = ["-v", f"{name}={value}"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise RuntimeError(f"psql -f {script} on port {node.port} failed: {res.stderr.strip()}")
    return res.stdout


@dataclass
class CitusCluster:
    coordinator: TempCluster
    workers: List[TempCluster]

    def dsn(self, user: str = "postgres") -> str:
        return self.coordinator.dsn(DB, user)

    def connect(self, user: str = "postgres"):
        return psycopg.connect(self.dsn(user), autocommit=True)


@dataclass
class FdwShards:
    """A coordinator whose postgres_fdw servers ``shard1``... point at ``shards``."""
    coordinator: TempCluster
    shards: List[TempCluster]
    servers: List[str] = field(default_factory=list)

    def dsn(self, user: str = "postgres") -> str:
        return self.coordinator.dsn(DB, user)

    def connect(self, user: str = "postgres"):
        return psycopg.connect(self.dsn(user), autocommit=True)


def _stop_all(nodes) -> None:
    for node in nodes:
        try:
            node.stop()
        except Exception:   # noqa: BLE001 - stop the others anyway
            pass


@pytest.fixture(scope="session")
def citus_cluster(cluster):
    """A coordinator and two Citus workers with groupml (``cluster`` wrote the working tree's
    extension files into the server's extension directory)."""
    require_citus(cluster.bindir)
    settings = node_settings(cluster.bindir)
    nodes = [TempCluster(settings=settings) for _ in range(3)]
    try:
        for node in nodes:
            node.start()
            run_psql(node, "10-citus-node.sql")
        coordinator, workers = nodes[0], nodes[1:]
        run_psql(coordinator, "20-citus-coordinator.sql", coordinator_host="127.0.0.1",
                 coordinator_port=coordinator.port, worker_hosts=",".join("127.0.0.1" for _ in workers),
                 worker_ports=",".join(str(w.port) for w in workers))
        yield CitusCluster(coordinator, workers)
    finally:
        _stop_all(nodes)


@pytest.fixture(scope="session")
def fdw_shards(cluster):
    """A coordinator (postgres_fdw, groupml) and three shard servers with groupml. Each shard
    server gets a foreign server ``shard<i>`` (``extensions 'groupml'``, ``async_capable``) and a
    user mapping for postgres; tests create their own tables."""
    nodes = [TempCluster() for _ in range(4)]
    try:
        for node in nodes:
            node.start()
            with psycopg.connect(node.dsn(DB), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS groupml CASCADE")
        coordinator, shards = nodes[0], nodes[1:]
        names = []
        with psycopg.connect(coordinator.dsn(DB), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
            for i, shard in enumerate(shards, 1):
                name = f"shard{i}"
                conn.execute(sql.SQL("CREATE SERVER {} FOREIGN DATA WRAPPER postgres_fdw OPTIONS (host {}, port {}, "
                                     "dbname {}, extensions 'groupml', async_capable 'true')").format(
                    sql.Identifier(name), sql.Literal("127.0.0.1"), sql.Literal(str(shard.port)), sql.Literal(DB)))
                conn.execute(sql.SQL("CREATE USER MAPPING FOR postgres SERVER {} OPTIONS (user 'postgres')").format(
                    sql.Identifier(name)))
                names.append(name)
        yield FdwShards(coordinator, shards, names)
    finally:
        _stop_all(nodes)


@contextlib.contextmanager
def node_halted_when(cluster, node: TempCluster, query: str, args=(), tries: int = 6000, pause: float = 0.01,
                     hold: Optional[str] = None):
    """While the block runs, a thread stops ``node`` (:meth:`TempCluster.halt`) once ``query`` on
    the coordinator of ``cluster`` returns a true first column; yields an event set on the halt.
    ``hold``: a statement (a lock) run on the coordinator in the transaction around the halt, so
    the run cannot get past that point before the node is down. On leaving, the thread is
    joined and a halted node started again."""
    halted = threading.Event()

    def watch():
        with cluster.connect() as w:
            for _ in range(tries):
                r = w.execute(query, list(args)).fetchone()
                if r and r[0]:
                    with w.transaction():
                        if hold is not None:
                            w.execute(hold)
                        node.halt()
                        halted.set()
                    return
                time.sleep(pause)

    t = threading.Thread(target=watch)
    t.start()
    try:
        yield halted
    finally:
        t.join()
        if halted.is_set():
            node.resume()


def halted_after_first_group(cluster, node: TempCluster):
    """:func:`node_halted_when` the next run of ``cluster`` has committed its first group. The
    run's next group store waits (a lock on groupml.models) until the node is down: its main
    thread, which also hands out the groups not started yet, cannot finish the run first."""
    with cluster.connect() as conn:
        start = conn.execute("SELECT coalesce(max(run_id), 0) FROM groupml.runs").fetchone()[0]
    return node_halted_when(cluster, node, "SELECT groups_done >= 1 FROM groupml.runs WHERE run_id > %s", [start],
                            hold="LOCK TABLE groupml.models IN SHARE MODE")


def log_connections(nodes) -> None:
    """Every node logs its connections (``user=... application_name=...``) in its logfile."""
    for node in nodes:
        with psycopg.connect(node.dsn(DB), autocommit=True) as c:
            c.execute("ALTER SYSTEM SET log_connections = on")
            c.execute("SELECT pg_reload_conf()")


def create_segmented(conn, table: str, data) -> None:
    """``table`` (dropped first) with ``data`` (:func:`groupml.datagen.create_table`) and a
    column ``segment`` (id % 2) that no distribution follows."""
    from groupml.datagen import create_table

    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    create_table(conn, table, data)
    conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN segment int").format(sql.Identifier(table)))
    conn.execute(sql.SQL("UPDATE {} SET segment = id % 2").format(sql.Identifier(table)))


def partition_over_servers(fdw: "FdwShards", conn, table: str, data, parts, segmented: bool = False,
                           prepare=None) -> None:
    """``table`` on the coordinator partitioned by LIST (country) over the shard servers:
    server i holds the rows of the countries ``parts[i]`` in its own ``table`` (with a
    ``segment`` column when ``segmented``; ``prepare(remote_conn)`` runs after it is filled).
    ``<table>_local`` must exist (its columns)."""
    from groupml.datagen import create_table

    conn.execute(sql.SQL("CREATE TABLE {} (LIKE {}) PARTITION BY LIST (country)").format(
        sql.Identifier(table), sql.Identifier(f"{table}_local")))
    for i, (shard, server, mine) in enumerate(zip(fdw.shards, fdw.servers, parts), 1):
        rows = {k: v[[str(g) in mine for g in data["grp"]]] for k, v in data.items()}
        with psycopg.connect(shard.dsn(), autocommit=True) as remote:
            if segmented:
                create_segmented(remote, table, rows)
            else:
                remote.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
                create_table(remote, table, rows)
            if prepare is not None:
                prepare(remote)
        conn.execute(sql.SQL("CREATE FOREIGN TABLE {} PARTITION OF {} FOR VALUES IN ({}) SERVER {} "
                             "OPTIONS (table_name {})").format(
            sql.Identifier(f"{table}_{i}"), sql.Identifier(table), sql.SQL(", ").join(sql.Literal(k) for k in mine),
            sql.Identifier(server), sql.Literal(table)))


FIT_QUERY = ("SELECT (f).params, (f).score, (f).n_train, (f).n_validation, (f).model, s.* "
             "FROM (SELECT {key}, groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, 'logistic', "
             "'{{\"l2\": [0.001, 0.1]}}') AS f FROM {table} GROUP BY {key}) s")


def group_fits(conn, table: str, key: str) -> dict:
    """learn_over_groups(..., 'logistic', grid over l2) per ``key`` group of ``table`` (one or
    more comma-separated expressions): {group key tuple: (params, score, n_train, n_val, model)}."""
    rows = conn.execute(FIT_QUERY.format(key=key, table=table)).fetchall()
    return {tuple(r[5:-1]): r[:5] for r in rows}


def assert_same_fits(got: dict, want: dict) -> None:
    """Equal fits: the same groups, params and row counts; score and coefficients to 1e-6."""
    import numpy as np

    from groupml.learners import load_model

    assert set(got) == set(want) and got
    for key, (params, score, n_train, n_val, model) in want.items():
        g_params, g_score, g_train, g_val, g_model = got[key]
        assert (g_params, g_train, g_val) == (params, n_train, n_val), key
        assert abs(g_score - score) <= 1e-6, key
        a, b = load_model(bytes(g_model)), load_model(bytes(model))
        np.testing.assert_allclose(a.coef, b.coef, rtol=0, atol=1e-6)
        assert abs(a.intercept - b.intercept) <= 1e-6


class ClientSession:
    """groupml.db.Session over a psycopg connection (statements with $1, $2, ... in order),
    for calling the catalog readers of groupml.shards from a test as a given role."""

    def __init__(self, conn):
        self.conn = conn

    def query(self, statement, args=(), types=()):
        import re

        cur = self.conn.execute(re.sub(r"\$\d+", "%s", statement), list(args))
        cols = [c.name for c in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]


def shard_map_in_backend(conn, reader: str, relation: str) -> str:
    """repr() of groupml.shards.<reader>(relation) run inside the server (PL/Python, plpy session),
    as the cross-node executor will call it."""
    notices = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary))
    conn.execute("DO $$\nfrom groupml.db import backend_session\nfrom groupml import shards\n"
                 f"plpy.notice(repr(shards.{reader}(backend_session(), {relation!r})))\n$$ LANGUAGE plpython3u")
    return notices[-1]
