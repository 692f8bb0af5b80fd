"""The extension as a user meets it: CREATE EXTENSION, help, comments, errors."""

import pytest

import groupml
from pg_helpers import sql_error

pytestmark = pytest.mark.integration


def test_create_extension_and_version(db):
    ver = db.execute("SELECT groupml.version()").fetchone()[0]
    assert ver.startswith(f"groupml {groupml.__version__} ")
    assert "numpy" in ver
    ext = db.execute("SELECT extversion FROM pg_extension WHERE extname = 'groupml'").fetchone()[0]
    assert ext == groupml.__version__


def test_every_extension_object_has_a_comment(db):
    rows = db.execute("""
        SELECT pg_describe_object(d.classid, d.objid, 0) AS obj,
               obj_description(d.objid, d.classid::regclass::text) AS comment
        FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
        WHERE e.extname = 'groupml' AND d.deptype = 'e'
          AND d.classid IN ('pg_proc'::regclass, 'pg_class'::regclass, 'pg_type'::regclass)
    """).fetchall()
    objs = {obj for obj, _ in rows}
    assert any("learn_over_groups" in o for o in objs)
    missing = [obj for obj, comment in rows
               if comment is None and not obj.startswith("sequence") and not obj.startswith("type groupml.fit[]")
               and not (obj.startswith("type ") and obj != "type groupml.fit")]
    assert missing == []


def test_help_overview_and_topics(db):
    text = db.execute("SELECT groupml.help()").fetchone()[0]
    for topic in ("learn_over_groups", "predict", "train_groups", "search", "fit"):
        assert topic in text
    detail = db.execute("SELECT groupml.help('learn_over_groups')").fetchone()[0]
    assert "GROUP BY" in detail and "Example" in detail
    assert db.execute("SELECT groupml.help('groupml.predict')").fetchone()[0].startswith("groupml.predict(")
    # every public function, procedure and view has its own topic (drop_snapshot had none)
    names = [r[0] for r in db.execute(
        "SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'groupml'::regnamespace AND p.proname !~ '^_' "
        "UNION SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'groupml'::regnamespace AND c.relkind = 'v'")]
    topics = db.execute("SELECT groupml.help()").fetchone()[0]
    missing = [n for n in names if f"  {n} " not in topics]
    assert names and missing == [], missing
    assert "run_checkpoints" in db.execute("SELECT groupml.help('catalog')").fetchone()[0]


def test_help_unknown_topic_is_an_error_with_hint(db):
    state, msg, hint = sql_error(db, "SELECT groupml.help('nope')")
    assert state == "42704"
    assert msg.startswith("groupml: No help topic 'nope'; topics are ")
    assert hint == "Run SELECT groupml.help(); for the list of functions."
    # a huge name is cut short in the message (a 1 MB topic was echoed whole)
    state, msg, _ = sql_error(db, "SELECT groupml.help(repeat('x', 1000000))")
    assert state == "42704" and "... (1,000,000 characters); topics are " in msg and len(msg) < 2000
