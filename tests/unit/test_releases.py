"""Released install scripts are frozen, and the version under development is one version.

sql/releases/groupml--<version>.sql is the install script of a released version exactly as
it was released: databases in the field were created from it, and the upgrade scripts start
from it. A released script never changes, so its sha256 sum is recorded in
sql/releases/SHA256SUMS when it is added and checked here; a change to the catalog goes into
sql/ and into the upgrade script of the version under development instead.
"""

import glob
import hashlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "installer"))

import groupml  # noqa: E402
import groupml_installer as gi  # noqa: E402

RELEASES = os.path.join(gi.SQL_DIR, "releases")


def _version_key(version):
    return tuple(int(p) for p in version.split("."))


def _recorded_sums():
    with open(os.path.join(RELEASES, "SHA256SUMS")) as fh:
        return {name: digest for digest, name in (line.split() for line in fh if line.strip())}


def _released_versions():
    return sorted((re.fullmatch(r"groupml--(\d+\.\d+\.\d+)\.sql", os.path.basename(p)).group(1)
                   for p in gi.release_scripts()), key=_version_key)


def test_every_released_script_is_recorded_and_unchanged():
    on_disk = {os.path.basename(p) for p in glob.glob(os.path.join(RELEASES, "*.sql"))}
    recorded = _recorded_sums()
    assert set(recorded) == on_disk
    for name, digest in recorded.items():
        with open(os.path.join(RELEASES, name), "rb") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == digest, \
                f"{name} changed: a released script never changes; put the change in an upgrade script"


def test_released_scripts_keep_the_prelude_mark_and_their_own_version():
    for version in _released_versions():
        with open(os.path.join(RELEASES, f"groupml--{version}.sql")) as fh:
            text = fh.read()
        assert text.startswith(f"-- groupml {version}: generated from sql/")
        assert text.count("LANGUAGE plpython3u") == text.count(gi.PRELUDE_MARK) > 5
        assert "site.addsitedir" not in text  # the installer adds the venv's path when it copies it


def test_the_version_under_development_is_one_version_everywhere():
    version = gi.package_version()
    with open(os.path.join(gi.SQL_DIR, "groupml.control")) as fh:
        control = re.search(r"^default_version\s*=\s*'([^']+)'", fh.read(), re.M).group(1)
    assert groupml.__version__ == control == version


def test_the_upgrade_scripts_chain_every_release_to_the_current_version():
    steps = {}
    for path in gi.upgrade_scripts():
        old, new = re.fullmatch(r"groupml--(.+)--(.+)\.sql", os.path.basename(path)).groups()
        steps[old] = new
    current = gi.package_version()
    released = _released_versions()
    assert released and _version_key(released[-1]) <= _version_key(current)
    for version in released:
        seen = [version]
        while seen[-1] != current:
            assert seen[-1] in steps, f"no upgrade script from {seen[-1]} (path {' -> '.join(seen)})"
            seen.append(steps[seen[-1]])

