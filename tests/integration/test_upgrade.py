"""ALTER EXTENSION groupml UPDATE: a database created at a released version (from its frozen
script in sql/releases/), updated through the upgrade scripts, has the catalog a fresh install
of the current version has, and the package refuses to run on objects of another version
until it is updated."""

import os
import re

import psycopg
import pytest
from pytest_postgresql.janitor import DatabaseJanitor

import groupml_installer
from pg_helpers import sql_error

pytestmark = pytest.mark.integration

#: every released version, oldest first (sql/releases/groupml--<version>.sql)
def _key(version):
    return tuple(int(x) for x in version.split("."))


RELEASED = sorted((re.fullmatch(r"groupml--(.+)\.sql", os.path.basename(p)).group(1)
                   for p in groupml_installer.release_scripts()), key=_key)
CURRENT = groupml_installer.package_version()

CATALOG = {
    "columns": "SELECT table_name, ordinal_position, column_name, data_type, column_default, is_nullable "
               "FROM information_schema.columns WHERE table_schema = 'groupml' ORDER BY 1, 2",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
                   "WHERE connamespace = 'groupml'::regnamespace ORDER BY 1, 2",
    "functions": "SELECT proname, pg_get_function_identity_arguments(oid), md5(prosrc), prosecdef, provolatile, proparallel "
                 "FROM pg_proc WHERE pronamespace = 'groupml'::regnamespace ORDER BY 1, 2",
    "policies": "SELECT tablename, policyname, qual, with_check FROM pg_policies WHERE schemaname = 'groupml' "
                "ORDER BY 1, 2",
    "relations": "SELECT relname, relkind, relpersistence, relrowsecurity, relacl::text, reloptions::text FROM pg_class "
                 "WHERE relnamespace = 'groupml'::regnamespace ORDER BY 1",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'groupml' ORDER BY 1",
    "config": "SELECT array(SELECT c::regclass::text FROM unnest(extconfig) c ORDER BY 1) FROM pg_extension "
              "WHERE extname = 'groupml'",
    "comments": "SELECT o, md5(d) FROM (SELECT pg_describe_object(classoid, objoid, objsubid) AS o, description AS d "
                "FROM pg_description) c WHERE o LIKE '%groupml.%' ORDER BY 1, 2",
    "members": "SELECT pg_describe_object(classid, objid, 0) FROM pg_depend WHERE refobjid = (SELECT oid FROM "
               "pg_extension WHERE extname = 'groupml') AND deptype = 'e' ORDER BY 1",
}


def _catalog(conn):
    return {name: conn.execute(q).fetchall() for name, q in CATALOG.items()}


@pytest.fixture
def scratch_db(cluster, postgresql_server):
    """Connect to a new empty database (no extension) of the given name; each is dropped at the end."""
    janitors = []

    def make(name):
        janitor = DatabaseJanitor(user=postgresql_server.user, host=postgresql_server.host,
                                  port=postgresql_server.port, dbname=name, password=postgresql_server.password)
        janitor.drop()
        janitor.init()
        janitors.append(janitor)
        return psycopg.connect(cluster.dsn(name), autocommit=True)

    yield make
    for janitor in reversed(janitors):
        janitor.drop()


def test_the_released_versions_are_frozen_and_older_than_the_current_one():
    assert RELEASED[:2] == ["0.1.0", "0.2.0"]
    assert all(_key(v) < _key(CURRENT) for v in RELEASED)


@pytest.mark.parametrize("old", RELEASED)
def test_an_updated_database_has_a_fresh_installs_catalog(cluster, db, scratch_db, old):
    assert db.execute("SELECT extversion FROM pg_extension WHERE extname = 'groupml'").fetchone()[0] == CURRENT
    with scratch_db("upgrade_me") as conn:
        conn.execute(f"CREATE EXTENSION groupml VERSION '{old}' CASCADE")
        conn.execute("CREATE TABLE t AS SELECT i % 2 AS g, (i % 7)::float8 AS f1, (i % 3 = 0)::int AS y "
                     "FROM generate_series(1, 200) i")
        # the current package on older objects: refused up front (the 0.2.0 package on 0.1.0
        # objects failed inside the call with 'column "key_settings" of relation "runs" does not exist')
        state, msg, hint = sql_error(conn, "CALL groupml.train_groups('t', ARRAY['g'], ARRAY['f1'], 'y', "
                                           "'logistic')")
        assert (state, msg) == ("55000", f"groupml: groupml's objects in this database are version {old}, and "
                                         f"its Python package is version {CURRENT}")
        assert hint.startswith("Run ALTER EXTENSION groupml UPDATE;")
        assert conn.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0
        conn.execute("ALTER EXTENSION groupml UPDATE")
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'groupml'").fetchone()[0] == CURRENT
        updated = _catalog(conn)
        fresh = _catalog(db)
        for name in CATALOG:
            assert updated[name] == fresh[name], name
        run = conn.execute("CALL groupml.train_groups('t', ARRAY['g'], ARRAY['f1'], 'y', 'logistic')").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s", [run]).fetchone()[0] == 2


def test_each_upgrade_step_between_releases_gives_the_newer_releases_catalog(cluster, scratch_db):
    """Every step of the chain on its own: a database created at a release and updated to the
    next release has the catalog that release's own frozen script creates."""
    for old, new in zip(RELEASED, RELEASED[1:]):
        with scratch_db("upgrade_step") as updated, scratch_db("fresh_step") as fresh:
            updated.execute(f"CREATE EXTENSION groupml VERSION '{old}' CASCADE")
            updated.execute(f"ALTER EXTENSION groupml UPDATE TO '{new}'")
            fresh.execute(f"CREATE EXTENSION groupml VERSION '{new}' CASCADE")
            got, want = _catalog(updated), _catalog(fresh)
            for name in CATALOG:
                assert got[name] == want[name], (old, new, name)
