"""The model_family section of groupml--0.2.0--0.3.0.sql: a database whose learn_over_groups takes
its model as text, updated by that section, has a fresh install's catalog, and its calls work."""

import os

import psycopg
import pytest

import groupml_installer
from test_upgrade import _catalog

pytestmark = pytest.mark.integration

OLD, NEW = "0.2.0-text-model", "0.2.0"


def _site():
    marker = os.path.join(groupml_installer.DEFAULT_PREFIX, "installed.txt")
    return dict(line.strip().split("=", 1) for line in open(marker) if "=" in line)["site"]


def _with_prelude(text, site):
    return text.replace(groupml_installer.PRELUDE_MARK,
                        groupml_installer.PRELUDE_MARK + groupml_installer.prelude(site))


@pytest.fixture
def text_model_version(cluster):
    """The current install script with the model argument as text (before the section), and the
    section as the update script between the two."""
    site = _site()
    sql_dir = groupml_installer.SQL_DIR
    text = groupml_installer.build_sql(site)
    for rel in ("types/model_family.sql", "types/model_family_cast.sql"):
        with open(os.path.join(sql_dir, rel)) as fh:
            body = _with_prelude(fh.read(), site)
        assert text.count(body) == 1, rel
        text = text.replace(body, "")
    text = text.replace("@extschema@.model_family", "text")
    with open(os.path.join(sql_dir, "upgrades", "groupml--0.2.0--0.3.0.sql")) as fh:
        script = fh.read()
    start = script.index("-- learn_over_groups: the model argument is the enum model_family")
    last = script.index("COMMENT ON AGGREGATE @extschema@.learn_over_groups(float8[], boolean, "
                        "@extschema@.model_family, jsonb, jsonb) IS", start)
    section = script[start:script.index(";\n", last) + 2]
    extdir = os.path.join(groupml_installer.pg_info(groupml_installer.find_pg_config(None))["sharedir"], "extension")
    paths = [os.path.join(extdir, f"groupml--{OLD}.sql"), os.path.join(extdir, f"groupml--{OLD}--{NEW}.sql")]
    with open(paths[0], "w") as fh:
        fh.write(text)
    with open(paths[1], "w") as fh:
        fh.write(_with_prelude(section, site))
    yield
    for path in paths:
        os.remove(path)


def test_the_model_family_section_updates_a_text_model_database(cluster, db, text_model_version):
    with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS upgrade_model WITH (FORCE)")
        admin.execute("CREATE DATABASE upgrade_model")
    try:
        with psycopg.connect(cluster.dsn("upgrade_model"), autocommit=True) as old:
            old.execute(f"CREATE EXTENSION groupml VERSION '{OLD}' CASCADE")
            assert old.execute("SELECT to_regtype('groupml.model_family')").fetchone()[0] is None
            old.execute(f"ALTER EXTENSION groupml UPDATE TO '{NEW}'")
            updated, fresh = _catalog(old), _catalog(db)
            for name in updated:
                assert updated[name] == fresh[name], name
            old.execute("CREATE TABLE t AS SELECT (i % 7)::float8 AS x, (i % 2)::float8 AS y FROM generate_series(1, 100) i")
            assert old.execute("SELECT (groupml.learn_over_groups(ARRAY[x], y, 'linear', '{}')).status "
                               "FROM t").fetchone()[0] == "ok"
    finally:
        with psycopg.connect(cluster.dsn(), autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS upgrade_model WITH (FORCE)")
