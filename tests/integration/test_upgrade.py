"""ALTER EXTENSION groupml UPDATE: a database of the previous version, updated through the
upgrade scripts, has the catalog a fresh install has, and the package refuses to run on
objects of another version until it is updated."""

import os

import psycopg
import pytest

import groupml_installer
from pg_helpers import sql_error

pytestmark = pytest.mark.integration

#: What the catalog objects changed from 0.1.0 to 0.2.0 (sql/upgrades/groupml--0.1.0--0.2.0.sql),
#: as (0.2.0 text, 0.1.0 text) of the object files: 0.1.0's install script is the current one
#: with these undone.
CHANGES_SINCE_0_1_0 = [
    (",\n    -- the settings the run's group keys were written in (TimeZone, IntervalStyle,\n"
     "    -- extra_float_digits): a resume under others would write the same groups as other keys\n"
     "    key_settings jsonb,\n"
     "    -- the measured time of what estimated_seconds estimates: one backend, the groups' searches\n"
     "    -- summed; with workers, the training after the snapshot (the planner's makespan)\n"
     "    train_seconds float8\n);", "\n);"),
    ("    estimated_seconds float8,                   -- the planner's estimate of the training (train_seconds)\n",
     "    estimated_seconds float8,                   -- the planner's estimate, beside it\n"),
    ("    -- trainings of it started (each committed before it starts): a pending candidate's attempts\n"
     "    -- all ended without an outcome (cancel, statement_timeout, its backend ended); after a few it\n"
     "    -- is recorded as failed instead of being retried forever\n"
     "    attempts        integer NOT NULL DEFAULT 0,\n", ""),
]

CATALOG = {
    "columns": "SELECT table_name, ordinal_position, column_name, data_type, column_default, is_nullable "
               "FROM information_schema.columns WHERE table_schema = 'groupml' ORDER BY 1, 2",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
                   "WHERE connamespace = 'groupml'::regnamespace ORDER BY 1, 2",
    "functions": "SELECT proname, pg_get_function_identity_arguments(oid), md5(prosrc), prosecdef, provolatile "
                 "FROM pg_proc WHERE pronamespace = 'groupml'::regnamespace ORDER BY 1, 2",
    "policies": "SELECT tablename, policyname, qual, with_check FROM pg_policies WHERE schemaname = 'groupml' "
                "ORDER BY 1, 2",
    "relations": "SELECT relname, relkind, relpersistence, relrowsecurity, relacl::text FROM pg_class "
                 "WHERE relnamespace = 'groupml'::regnamespace ORDER BY 1",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'groupml' ORDER BY 1",
    "config": "SELECT array(SELECT c::regclass::text FROM unnest(extconfig) c ORDER BY 1) FROM pg_extension "
              "WHERE extname = 'groupml'",
    "members": "SELECT pg_describe_object(classid, objid, 0) FROM pg_depend WHERE refobjid = (SELECT oid FROM "
               "pg_extension WHERE extname = 'groupml') AND deptype = 'e' ORDER BY 1",
}


def _catalog(conn):
    return {name: conn.execute(q).fetchall() for name, q in CATALOG.items()}


@pytest.fixture
def old_version(cluster):
    """groupml--0.1.0.sql in the server's extension directory (as an older install left it)."""
    info = groupml_installer.pg_info(groupml_installer.find_pg_config(None))
    path = os.path.join(info["sharedir"], "extension", "groupml--0.1.0.sql")
    marker = os.path.join(groupml_installer.DEFAULT_PREFIX, "installed.txt")
    site = dict(line.strip().split("=", 1) for line in open(marker) if "=" in line)["site"]
    text = groupml_installer.build_sql(site)
    for new, old in CHANGES_SINCE_0_1_0:
        assert text.count(new) == 1, new
        text = text.replace(new, old)
    with open(path, "w") as fh:
        fh.write(text)
    yield path
    os.remove(path)


def test_an_updated_database_has_a_fresh_installs_catalog(cluster, db, old_version):
    assert db.execute("SELECT extversion FROM pg_extension WHERE extname = 'groupml'").fetchone()[0] == \
        groupml_installer.package_version() == "0.2.0"
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS upgrade_me WITH (FORCE)")
        admin.execute("CREATE DATABASE upgrade_me")
    try:
        with psycopg.connect(cluster.dsn("upgrade_me"), autocommit=True) as old:
            old.execute("CREATE EXTENSION groupml VERSION '0.1.0' CASCADE")
            old.execute("CREATE TABLE t AS SELECT i % 2 AS g, (i % 7)::float8 AS f1, (i % 3 = 0)::int AS y "
                        "FROM generate_series(1, 200) i")
            # the 0.2.0 package on 0.1.0 objects: refused up front (it failed inside the call
            # with 'column "key_settings" of relation "runs" does not exist')
            state, msg, hint = sql_error(old, "CALL groupml.train_groups('t', ARRAY['g'], ARRAY['f1'], 'y', "
                                              "'logistic')")
            assert (state, msg) == ("55000", "groupml: groupml's objects in this database are version 0.1.0, and "
                                             "its Python package is version 0.2.0")
            assert hint.startswith("Run ALTER EXTENSION groupml UPDATE;")
            assert old.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0
            old.execute("ALTER EXTENSION groupml UPDATE")
            assert old.execute("SELECT extversion FROM pg_extension WHERE extname = 'groupml'").fetchone()[0] == \
                "0.2.0"
            updated = _catalog(old)
            fresh = _catalog(db)
            for name in CATALOG:
                assert updated[name] == fresh[name], name
            run = old.execute("CALL groupml.train_groups('t', ARRAY['g'], ARRAY['f1'], 'y', 'logistic')").fetchone()[0]
            assert old.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s", [run]).fetchone()[0] == 2
    finally:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS upgrade_me WITH (FORCE)")
