"""The installer's pure parts: SQL build, prelude, server discovery errors."""

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "installer"))

import groupml_installer as gi  # noqa: E402
from installer_fakes import fake_pg_config  # noqa: E402


def test_manifests_cover_every_sql_file():
    listed = set(gi.read_manifest())
    on_disk = set()
    for root, _dirs, files in os.walk(gi.SQL_DIR):
        for f in files:
            if f.endswith(".sql") and os.path.basename(root) not in ("upgrades", "releases"):
                on_disk.add(os.path.relpath(os.path.join(root, f), gi.SQL_DIR))
    assert listed == on_disk
    assert len(gi.read_manifest()) == len(listed)  # nothing listed twice


def test_build_sql_injects_the_prelude_into_every_python_body():
    text = gi.build_sql("/opt/x/site-packages")
    n_bodies = text.count("LANGUAGE plpython3u")
    assert n_bodies > 5
    assert text.count("if 'groupml' not in sys.modules and '/opt/x/site-packages' not in sys.path:") == n_bodies
    assert text.startswith(f"-- groupml {gi.package_version()}")
    assert '\\echo Use "CREATE EXTENSION groupml"' in text
    # one line into the package after the prelude
    bodies = re.findall(r"\$python\$\n(.*?)\$python\$", text, re.S)
    assert len(bodies) == n_bodies
    for body in bodies:
        code = [ln for ln in body.splitlines() if ln.strip()]
        assert code[-1].startswith("from groupml.udf.") and "; return " in code[-1]


def test_every_sql_file_comments_its_objects():
    for rel in gi.read_manifest():
        with open(os.path.join(gi.SQL_DIR, rel)) as fh:
            text = fh.read()
        creates = text.count("CREATE FUNCTION") + text.count("CREATE PROCEDURE") + text.count("CREATE AGGREGATE") \
            + text.count("CREATE TABLE") + text.count("CREATE VIEW") + text.count("CREATE TYPE")
        assert text.count("COMMENT ON") >= creates, rel


def test_pg_info_rejects_an_unsupported_major(tmp_path):
    with pytest.raises(SystemExit) as info:
        gi.pg_info(fake_pg_config(tmp_path, version="PostgreSQL 12.4"))
    assert "PostgreSQL 12 is not supported; groupml needs one of 15, 16, 17" in str(info.value)
    assert "HINT" in str(info.value)


def test_missing_plpython_says_how_to_install_it(tmp_path):
    info = gi.pg_info(fake_pg_config(tmp_path))
    with pytest.raises(SystemExit) as err:
        gi.ensure_plpython(info, allow_install=False)
    msg = str(err.value)
    assert "plpython3u is not installed for PostgreSQL 15" in msg
    assert "--install-plpython" in msg and "postgresql-plpython3-15=" in msg


def test_missing_pg_config_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit) as err:
        gi.find_pg_config(str(tmp_path / "nope"))
    assert "is not an executable file" in str(err.value)


def test_embedded_python_is_found_from_libpython():
    so = "/usr/lib/postgresql/15/lib/plpython3.so"
    if not os.path.exists(so):
        pytest.fail("plpython3u must be installed for the test suite (installer/run-tests.sh does it)")
    py = gi.embedded_python(so)
    assert py.startswith("/usr/bin/python3.")


def test_the_c_module_builds_against_the_server_headers(tmp_path):
    info = gi.pg_info(fake_pg_config(tmp_path))
    if not os.path.exists(os.path.join(gi.server_headers(info), "postgres.h")):
        pytest.fail("postgresql-server-dev-15 must be installed for the test suite (installer/bootstrap.sh does it)")
    path = gi.build_module(info)
    assert path == os.path.join(info["pkglibdir"], "groupml.so")
    with open(path, "rb") as fh:
        so = fh.read()
    assert so.startswith(b"\x7fELF")
    for symbol in (b"groupml_learn_step", b"groupml_learn_rows", b"groupml_learn_buffers", b"Pg_magic_func"):
        assert symbol in so
    assert os.listdir(info["pkglibdir"]) == ["groupml.so"]      # no temporary file left behind


def test_missing_build_tools_say_how_to_install_them(tmp_path):
    info = dict(gi.pg_info(fake_pg_config(tmp_path)), major="17", includedir_server=str(tmp_path / "none"))
    with pytest.raises(SystemExit) as err:
        gi.ensure_build_tools(info, allow_install=False)
    msg = str(err.value)
    assert "building groupml's C module needs postgresql-server-dev-17" in msg
    assert "--install-plpython" in msg
