"""The installer end to end into a scratch server layout: install twice, then uninstall."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
sys.path.insert(0, os.path.join(ROOT, "installer"))

import groupml_installer  # noqa: E402
from installer_fakes import fake_pg_config  # noqa: E402

VERSION = groupml_installer.package_version()

pytestmark = pytest.mark.integration


def run(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "installer", "groupml_installer.py"), *args],
                          capture_output=True, text=True, timeout=900)


def scratch_pkglibdir(root) -> str:
    """A pkglibdir of the scratch layout: the server's plpython3.so linked in (the installer
    checks for it), so the module the installer builds, and its uninstall removes, is the
    scratch one, never the server's own groupml.so."""
    lib = os.path.join(str(root), "pkglib")
    os.makedirs(lib, exist_ok=True)
    link = os.path.join(lib, "plpython3.so")
    if not os.path.exists(link):
        os.symlink("/usr/lib/postgresql/15/lib/plpython3.so", link)
    return lib


@pytest.fixture
def scratch():
    """A world-readable scratch directory (pytest's tmp_path is private to root)."""
    path = tempfile.mkdtemp(prefix="groupml-inst-")
    os.chmod(path, 0o755)
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


def test_install_is_idempotent_and_uninstall_removes_everything(scratch, tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the installer test needs root (installer/run-tests.sh runs as root)")
    # a prefix the postgres OS user cannot read is refused with a clear message
    private = run("install", "--pg-config", fake_pg_config(tmp_path, pkglibdir=scratch_pkglibdir(tmp_path)),
                  "--prefix", str(tmp_path / "prefix"))
    assert private.returncode != 0
    assert "the postgres OS user cannot import groupml from" in private.stderr
    assert "HINT: choose a --prefix outside /root" in private.stderr

    tmp_path = scratch
    pkglib = scratch_pkglibdir(tmp_path)
    pg_config = fake_pg_config(tmp_path, pkglibdir=pkglib)
    prefix = str(tmp_path / "prefix")
    extdir = tmp_path / "share" / "extension"
    first = run("install", "--pg-config", pg_config, "--prefix", prefix)
    assert first.returncode == 0, first.stderr + first.stdout
    assert "building venv" in first.stdout
    sql = (extdir / f"groupml--{VERSION}.sql").read_text()
    # the upgrade scripts go with it (ALTER EXTENSION groupml UPDATE of an older database)
    assert (extdir / "groupml--0.1.0--0.2.0.sql").read_text().count("ALTER TABLE") == 3
    assert f"{prefix}/venv/lib/python3" in sql
    # and the frozen scripts of the released versions, with the same prelude (CREATE EXTENSION
    # groupml VERSION '0.1.0')
    for release in ("0.1.0", "0.2.0"):
        frozen = (extdir / f"groupml--{release}.sql").read_text()
        assert frozen.startswith(f"-- groupml {release}:")
        assert frozen.count("site.addsitedir") == frozen.count("LANGUAGE plpython3u") > 5
        assert f"{prefix}/venv/lib/python3" in frozen
    assert (extdir / "groupml.control").exists()
    assert os.path.exists(os.path.join(pkglib, "groupml.so"))          # the C module, built
    # the postgres OS user can import the package from the venv, as PL/Python will
    res = subprocess.run(["runuser", "-u", "postgres", "--", f"{prefix}/venv/bin/python", "-c",
                          "import groupml.fitting; print(groupml.__version__)"], capture_output=True, text=True)
    assert res.stdout.strip() == VERSION, res.stderr
    second = run("install", "--pg-config", pg_config, "--prefix", prefix)
    assert second.returncode == 0, second.stderr
    assert "building venv" not in second.stdout  # reused
    assert (extdir / f"groupml--{VERSION}.sql").read_text() == sql
    status = run("status", "--pg-config", pg_config, "--prefix", prefix)
    assert "control file: yes" in status.stdout and "plpython3u:   yes" in status.stdout
    gone = run("uninstall", "--pg-config", pg_config, "--prefix", prefix)
    assert gone.returncode == 0, gone.stderr
    assert not (extdir / "groupml.control").exists()
    assert not list(extdir.glob("groupml--*.sql"))
    assert not os.path.exists(os.path.join(prefix, "venv"))
    assert not os.path.exists(os.path.join(pkglib, "groupml.so"))
    assert "control file: missing" in run("status", "--pg-config", pg_config, "--prefix", prefix).stdout


def test_install_refuses_a_dsn_of_another_major(tmp_path, cluster):
    pg_config = fake_pg_config(tmp_path, version="PostgreSQL 16.2", pkglibdir=scratch_pkglibdir(tmp_path))
    res = run("install", "--pg-config", pg_config, "--prefix", str(tmp_path / "p"), "--dsn", cluster.dsn())
    assert res.returncode != 0
    assert "the server at the DSN is PostgreSQL 15 but pg_config is for 16" in res.stderr
    assert "HINT" in res.stderr
