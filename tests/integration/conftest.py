"""Real PostgreSQL 15 + plpython3u for the integration tests.

A throwaway cluster is started once per test session (as the postgres OS user when
the suite runs as root). The extension's SQL script is rebuilt from sql/ and copied
into the server's extension directory at the start, so the tests always exercise the
working tree's SQL; the Python package is the one the installer put into the venv.
Each test gets a fresh database cloned from a template that has the extension.
"""

from __future__ import annotations

import glob
import itertools
import os
import sys

import psycopg
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "installer"))

import groupml_installer  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402
from multinode import citus_cluster, fdw_shards  # noqa: E402,F401 (session fixtures of the scale-out tests)

TEMPLATE = "groupml_template"
_counter = itertools.count()


def _refresh_extension_sql() -> None:
    """Write the working tree's SQL into the server's extension dir (needs an installed venv)."""
    info = groupml_installer.pg_info(groupml_installer.find_pg_config(None))
    marker = os.path.join(groupml_installer.DEFAULT_PREFIX, "installed.txt")
    if not os.path.exists(marker):
        pytest.fail("groupml is not installed: run `sudo bash installer/run-tests.sh` (README command 2)",
                    pytrace=False)
    site = dict(line.strip().split("=", 1) for line in open(marker) if "=" in line)["site"]
    extdir = os.path.join(info["sharedir"], "extension")
    if os.access(extdir, os.W_OK):
        version = groupml_installer.package_version()
        with open(os.path.join(extdir, f"groupml--{version}.sql"), "w") as fh:
            fh.write(groupml_installer.build_sql(site))
        with open(os.path.join(groupml_installer.SQL_DIR, "groupml.control")) as src, \
                open(os.path.join(extdir, "groupml.control"), "w") as dst:
            dst.write(src.read())
        for up in glob.glob(os.path.join(groupml_installer.SQL_DIR, "upgrades", "groupml--*--*.sql")):
            with open(up) as src, open(os.path.join(extdir, os.path.basename(up)), "w") as dst:
                dst.write(src.read().replace(groupml_installer.PRELUDE_MARK, groupml_installer.PRELUDE_MARK
                                             + groupml_installer.prelude(site)))


@pytest.fixture(scope="session")
def cluster():
    _refresh_extension_sql()
    settings = {}
    if os.path.exists("/usr/lib/postgresql/15/lib/pg_cron.so"):
        settings = {"shared_preload_libraries": "'pg_cron'", "cron.database_name": "'postgres'"}
    c = TempCluster(settings=settings)
    c.start()
    with psycopg.connect(c.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    with psycopg.connect(c.dsn(TEMPLATE), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")
    yield c
    c.stop()


@pytest.fixture
def dbname(cluster):
    name = f"t{os.getpid()}_{next(_counter)}"
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    yield name
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def db(cluster, dbname):
    """An autocommit psycopg connection to a fresh database that has the extension."""
    with psycopg.connect(cluster.dsn(dbname), autocommit=True) as conn:
        yield conn


@pytest.fixture
def dsn(cluster, dbname):
    return cluster.dsn(dbname)
