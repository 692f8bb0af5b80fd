"""A fake pg_config for installer tests: a shell script pointing at scratch directories."""

import os
import stat


def fake_pg_config(tmp_path, version="PostgreSQL 15.18 (Debian 15.18-0+deb12u1)", pkglibdir=None):
    sharedir = tmp_path / "share"
    (sharedir / "extension").mkdir(parents=True, exist_ok=True)
    pkglibdir = pkglibdir or str(tmp_path / "lib")
    os.makedirs(pkglibdir, exist_ok=True)
    script = tmp_path / "pg_config"
    script.write_text(f"""#!/bin/sh
case "$1" in
  --version) echo "{version}";;
  --sharedir) echo "{sharedir}";;
  --pkglibdir) echo "{pkglibdir}";;
  --bindir) echo "{tmp_path}";;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)
