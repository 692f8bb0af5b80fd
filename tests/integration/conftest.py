"""Real PostgreSQL 15 + plpython3u for the integration tests, served through pytest-postgresql.

One throwaway cluster per test session:

* ``postgresql_cluster`` is the server process. ``TempCluster`` runs initdb and pg_ctl
  (``/usr/lib/postgresql/15/bin``) as the ``postgres`` OS user when the suite runs as root,
  since both refuse to run as root.
* ``postgresql_server`` is pytest-postgresql's ``noproc`` fixture over that server. Its
  ``DatabaseJanitor`` creates the template database (``TEMPLATE`` in pg_helpers) and loads the
  extension into it once.
* ``dbname`` / ``db`` / ``dsn``: each test gets a fresh database cloned from that template by
  a ``DatabaseJanitor``, and dropped after the test.

pytest-postgresql's own process fixture (``postgresql_proc``) cannot start the server here when
the suite runs as root: it puts the data directory under pytest's base temporary directory,
which pytest creates mode 0700 for root, so initdb run as ``postgres`` (through a wrapper named
by ``postgresql_exec``) fails with 'could not access directory ...: Permission denied'.

The extension's SQL (this version's build of sql/, the frozen scripts of released versions and
the upgrade scripts) is written into the server's extension directory at the start, and its C
module (sql/c/) built into the server's pkglibdir, so the tests always exercise the working
tree's SQL and C; the Python package is the one the installer put
into the venv.
"""

from __future__ import annotations

import itertools
import os
import sys

import port_for
import psycopg
import pytest
from pytest_postgresql import factories
from pytest_postgresql.janitor import DatabaseJanitor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "installer"))

import groupml_installer  # noqa: E402
from groupml.devcluster import TempCluster  # noqa: E402
from pg_helpers import TEMPLATE  # noqa: E402
from multinode import citus_cluster, fdw_shards  # noqa: E402,F401 (session fixtures of the scale-out tests)

#: the port the session's cluster listens on (loopback), chosen before the fixtures are made
PORT = port_for.select_random()
_counter = itertools.count()


def _refresh_extension_sql() -> None:
    """Write the working tree's SQL into the server's extension dir and build its C module into
    the server's pkglibdir (needs an installed venv)."""
    info = groupml_installer.pg_info(groupml_installer.find_pg_config(None))
    marker = os.path.join(groupml_installer.DEFAULT_PREFIX, "installed.txt")
    if not os.path.exists(marker):
        pytest.fail("groupml is not installed: run `sudo bash installer/run-tests.sh` (README command 2)",
                    pytrace=False)
    site = dict(line.strip().split("=", 1) for line in open(marker) if "=" in line)["site"]
    extdir = os.path.join(info["sharedir"], "extension")
    if os.access(extdir, os.W_OK):
        groupml_installer.write_extension_files(extdir, site)
    if os.access(info["pkglibdir"], os.W_OK):
        groupml_installer.build_module(info)


def _create_extension(*, host, port, user, dbname, password=None, **_options) -> None:
    """pytest-postgresql loader: the template database gets the extension."""
    with psycopg.connect(host=host, port=port, user=user, dbname=dbname, password=password,
                         autocommit=True) as conn:
        conn.execute("CREATE EXTENSION groupml CASCADE")


@pytest.fixture(scope="session")
def postgresql_cluster():
    """The server process (TempCluster, as the postgres OS user when the run is root)."""
    _refresh_extension_sql()
    settings = {}
    if os.path.exists("/usr/lib/postgresql/15/lib/pg_cron.so"):
        settings = {"shared_preload_libraries": "'pg_cron'", "cron.database_name": "'postgres'"}
    with TempCluster(port=PORT, settings=settings) as c:
        yield c


#: pytest-postgresql's noproc fixture over the session's cluster: its janitor makes the
#: template database (dbname + '_tmpl') and loads the extension into it
postgresql_server = factories.postgresql_noproc(host="127.0.0.1", port=PORT, user="postgres",
                                                dbname=TEMPLATE.removesuffix("_tmpl"), load=[_create_extension])


@pytest.fixture(scope="session")
def cluster(request, postgresql_cluster):
    """The session's cluster (``.dsn(dbname)``, ``.url(dbname)``), its template ready."""
    server = request.getfixturevalue("postgresql_server")  # after the process, torn down before it
    assert server.template_dbname == TEMPLATE
    return postgresql_cluster


@pytest.fixture
def dbname(cluster, postgresql_server):
    """A fresh database cloned from the template (it has the extension), dropped afterwards."""
    name = f"t{os.getpid()}_{next(_counter)}"
    with DatabaseJanitor(user=postgresql_server.user, host=postgresql_server.host, port=postgresql_server.port,
                         dbname=name, template_dbname=TEMPLATE, password=postgresql_server.password):
        yield name


@pytest.fixture
def db(cluster, dbname):
    """An autocommit psycopg connection to a fresh database that has the extension."""
    with psycopg.connect(cluster.dsn(dbname), autocommit=True) as conn:
        yield conn


@pytest.fixture
def dsn(cluster, dbname):
    return cluster.dsn(dbname)
