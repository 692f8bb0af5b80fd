#!/usr/bin/env python3
"""groupml installer: puts the extension into a PostgreSQL server on this machine.

    groupml install   [--dsn DSN] [--pg-config PATH] [--prefix DIR] [--install-plpython]
                      [--extras torch,lightgbm,test] [--editable] [--create-extension]
    groupml uninstall [--pg-config PATH] [--prefix DIR] [--dsn DSN]
    groupml status    [--pg-config PATH] [--prefix DIR]
    groupml build-sql [--out DIR] [--site-packages DIR]
    groupml report    --dsn DSN (--run N | --scheduler) [-o FILE] [--format html|json]

What ``install`` does, in order (each step is idempotent):
 1. finds the server: pg_config (PATH, --pg-config, or the Debian layout); with --dsn it
    also asks the running server for its major version and refuses a mismatch;
 2. checks for plpython3u; when missing and --install-plpython is given, installs Debian's
    postgresql-plpython3-<major> pinned to the exact installed server version (so apt does
    not upgrade the server);
 3. builds groupml's C module (sql/c/: the learn_over_groups row buffers) with gcc against the
    server's headers and installs groupml.so into its pkglibdir; when the headers or gcc are
    missing and --install-plpython is given, installs postgresql-server-dev-<major> (pinned
    like plpython3u) and gcc first;
 4. finds the Python that plpython3u embeds (from the libpython it links) and builds a venv
    from it under --prefix (default /opt/groupml), readable by the postgres OS user;
 5. installs the groupml package and numpy/scipy (plus extras) into that venv;
 6. builds groupml--<version>.sql from sql/manifests, adding to every PL/Python body a
    prelude that puts the venv's site-packages first on sys.path (no PYTHONPATH editing),
    and copies it with the control file, the frozen scripts of released versions
    (sql/releases/) and the upgrade scripts (sql/upgrades/) into the server's extension
    directory;
 7. with --create-extension and --dsn: CREATE EXTENSION IF NOT EXISTS groupml CASCADE.

``report`` writes the page of ``groupml.report(N)`` (or ``groupml.scheduler_report()``) to
FILE (default: standard output), through psql as the role of DSN.

Only the standard library is used here: this runs before any venv exists.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SQL_DIR = os.path.join(REPO, "sql")
DEFAULT_PREFIX = os.environ.get("GROUPML_PREFIX", "/opt/groupml")
SUPPORTED_MAJORS = ("15", "16", "17")
PRELUDE_MARK = "$python$\n"


class InstallError(SystemExit):
    """A step failed; the message says what is missing and what to do."""

    def __init__(self, message: str, hint: str | None = None):
        text = f"groupml install: ERROR: {message}"
        if hint:
            text += f"\n  HINT: {hint}"
        super().__init__(text)


def log(msg: str) -> None:
    print(f"groupml: {msg}", flush=True)


def run(cmd, *, check=True, capture=True, env=None):
    res = subprocess.run(cmd, capture_output=capture, text=True, env=env)
    if check and res.returncode != 0:
        out = (res.stderr or "") + (res.stdout or "")
        raise InstallError(f"command failed ({res.returncode}): {' '.join(cmd)}\n{out.strip()[-2000:]}")
    return res


# ---------------------------------------------------------------- version / SQL build
def package_version() -> str:
    with open(os.path.join(REPO, "pyproject.toml")) as fh:
        m = re.search(r'^version\s*=\s*"([^"]+)"', fh.read(), re.M)
    if not m:
        raise InstallError("pyproject.toml has no version")
    return m.group(1)


def read_manifest() -> list:
    """SQL files in build order: manifests/*.txt in name order, lines in file order."""
    files = []
    for manifest in sorted(glob.glob(os.path.join(SQL_DIR, "manifests", "*.txt"))):
        with open(manifest) as fh:
            files += [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]
    if not files:
        raise InstallError(f"no SQL manifests found in {os.path.join(SQL_DIR, 'manifests')}")
    return files


def prelude(site_packages: str) -> str:
    p = repr(site_packages)
    # Cheap on the hot path (one dict lookup per call once groupml is imported).
    return (f"import sys\nif 'groupml' not in sys.modules and {p} not in sys.path:\n"
            f"    import site; site.addsitedir({p}); sys.path.remove({p}); sys.path.insert(0, {p})\n")


def build_sql(site_packages: str | None) -> str:
    """Concatenate sql/MANIFEST into one install script; inject the sys.path prelude."""
    parts = [f"-- groupml {package_version()}: generated from sql/ by installer/groupml_installer.py; do not edit\n",
             "\\echo Use \"CREATE EXTENSION groupml\" to load this file. \\quit\n"]
    for rel in read_manifest():
        path = os.path.join(SQL_DIR, rel)
        if not os.path.exists(path):
            raise InstallError(f"a manifest in sql/manifests names {rel}, which does not exist")
        with open(path) as fh:
            text = fh.read()
        if site_packages:
            text = text.replace(PRELUDE_MARK, PRELUDE_MARK + prelude(site_packages))
        parts.append(f"\n-- {rel}\n{text}")
    return "".join(parts)


def release_scripts() -> list:
    """The frozen install scripts of released versions, sql/releases/groupml--<version>.sql.

    Each is the build of sql/ as that version was released, with the prelude mark kept (the
    prelude is added when it is copied). A released script never changes: a change to the
    catalog goes into sql/ and an upgrade script of the version under development."""
    return sorted(glob.glob(os.path.join(SQL_DIR, "releases", "groupml--*.sql")))


def upgrade_scripts() -> list:
    """sql/upgrades/groupml--<from>--<to>.sql: the steps of ALTER EXTENSION groupml UPDATE."""
    return sorted(glob.glob(os.path.join(SQL_DIR, "upgrades", "groupml--*--*.sql")))


def write_extension_files(extdir: str, site_packages: str) -> None:
    """Write into the server's extension directory: the control file, this version's script
    built from sql/, every released version's frozen script and every upgrade script, each with
    the sys.path prelude. A database can then be created at any released version
    (CREATE EXTENSION groupml VERSION '0.1.0') and brought up to this one (ALTER EXTENSION
    groupml UPDATE). This version's script is written last: it is always the build of sql/."""
    for path in release_scripts() + upgrade_scripts():
        with open(path) as fh, open(os.path.join(extdir, os.path.basename(path)), "w") as out:
            out.write(fh.read().replace(PRELUDE_MARK, PRELUDE_MARK + prelude(site_packages)))
    with open(os.path.join(extdir, f"groupml--{package_version()}.sql"), "w") as fh:
        fh.write(build_sql(site_packages))
    shutil.copy(os.path.join(SQL_DIR, "groupml.control"), os.path.join(extdir, "groupml.control"))


# ---------------------------------------------------------------- server discovery
def find_pg_config(explicit: str | None) -> str:
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise InstallError(f"--pg-config {explicit} is not an executable file")
        return explicit
    found = shutil.which("pg_config")
    if found:
        return found
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_config"))
    if cands:
        return cands[-1]
    raise InstallError("pg_config was not found",
                       "install the server (apt-get install postgresql-15) or pass --pg-config PATH")


def pg_info(pg_config: str) -> dict:
    def q(flag):
        return run([pg_config, flag]).stdout.strip()
    version = q("--version")  # "PostgreSQL 15.18 (Debian 15.18-0+deb12u1)"
    m = re.search(r"PostgreSQL (\d+)", version)
    if not m:
        raise InstallError(f"cannot read the server version from pg_config: {version!r}")
    major = m.group(1)
    if major not in SUPPORTED_MAJORS:
        raise InstallError(f"PostgreSQL {major} is not supported; groupml needs one of {', '.join(SUPPORTED_MAJORS)}",
                           "point --pg-config at a supported server's pg_config")
    return {"version": version, "major": major, "sharedir": q("--sharedir"),
            "pkglibdir": q("--pkglibdir"), "bindir": q("--bindir"), "includedir_server": q("--includedir-server")}


def server_major_from_dsn(dsn: str, bindir: str) -> str:
    psql = shutil.which("psql") or os.path.join(bindir, "psql")
    res = run([psql, "-XAtq", "-d", dsn, "-c", "SHOW server_version_num"], check=False)
    if res.returncode != 0:
        raise InstallError(f"cannot connect with the given DSN: {res.stderr.strip()}",
                           "check that the server runs and the DSN (host, port, user, dbname) is right")
    return str(int(res.stdout.strip()) // 10000)


def dpkg_version(pkg: str) -> str | None:
    if not shutil.which("dpkg-query"):
        return None
    res = run(["dpkg-query", "-W", "-f=${Status} ${Version}", pkg], check=False)
    if res.returncode != 0 or "install ok installed" not in res.stdout:
        return None
    return res.stdout.split()[-1]


def ensure_plpython(info: dict, allow_install: bool) -> str:
    so = os.path.join(info["pkglibdir"], "plpython3.so")
    if os.path.exists(so):
        return so
    major = info["major"]
    if not allow_install:
        raise InstallError(f"plpython3u is not installed for PostgreSQL {major} ({so} is missing)",
                           f"re-run with --install-plpython, or: apt-get install postgresql-plpython3-{major}"
                           f"={dpkg_version(f'postgresql-{major}') or '<your server version>'}")
    spec = apt_install_pinned(info, [f"postgresql-plpython3-{major}"], "plpython3u")[0]
    if not os.path.exists(so):
        raise InstallError(f"{spec} installed but {so} is still missing")
    return so


def apt_install_pinned(info: dict, pkgs: list, what: str) -> list:
    """apt-get install ``pkgs``, each postgresql-* package pinned to the installed server's
    exact version (so apt does not upgrade the server); returns the specs installed."""
    if not shutil.which("apt-get"):
        raise InstallError(f"{what} is missing and apt-get is not available",
                           f"install {', '.join(pkgs)} for your server with your platform's package manager")
    if os.geteuid() != 0:
        raise InstallError(f"installing {what} needs root", "run the installer with sudo")
    server_ver = dpkg_version(f"postgresql-{info['major']}")
    specs = [f"{p}={server_ver}" if server_ver and p.startswith("postgresql-") else p for p in pkgs]
    log(f"installing {' '.join(specs)} (pinned to the server version)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    res = run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *specs], check=False, env=env)
    if res.returncode != 0:
        run(["apt-get", "update", "-q"], env=env)
        run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *specs], env=env)
    return specs


MODULE_SOURCES = [os.path.join(SQL_DIR, "c", "groupml_rows.c")]
MODULE_CFLAGS = ["-O2", "-fPIC", "-shared", "-fno-strict-aliasing", "-fwrapv", "-Wall", "-Wmissing-prototypes",
                 "-Wno-unused-parameter"]


def server_headers(info: dict) -> str:
    """The server's header directory: pg_config's, else (a server copied elsewhere, whose
    pg_config reports paths relative to its new place) Debian's for the same major version."""
    for d in (info["includedir_server"], f"/usr/include/postgresql/{info['major']}/server"):
        if os.path.exists(os.path.join(d, "postgres.h")):
            return d
    return info["includedir_server"]


def ensure_build_tools(info: dict, allow_install: bool) -> str:
    """gcc and the server's headers, for groupml's C module; returns gcc's path."""
    header = os.path.join(server_headers(info), "postgres.h")
    gcc = shutil.which("gcc")
    if gcc and os.path.exists(header):
        return gcc
    major = info["major"]
    missing = [p for p, ok in ((f"postgresql-server-dev-{major}", os.path.exists(header)), ("gcc", gcc)) if not ok]
    if not allow_install:
        raise InstallError(f"building groupml's C module needs {' and '.join(missing)} ({header} and gcc)",
                           f"re-run with --install-plpython, or: apt-get install {' '.join(missing)}")
    apt_install_pinned(info, missing + (["libc6-dev"] if not gcc else []), "the C module's build tools")
    gcc = shutil.which("gcc")
    header = os.path.join(server_headers(info), "postgres.h")
    if not gcc or not os.path.exists(header):
        raise InstallError(f"{' '.join(missing)} installed but gcc or {header} is still missing")
    return gcc


def build_module(info: dict, gcc: str | None = None) -> str:
    """Compile groupml's C module against the server's headers and install it as
    <pkglibdir>/groupml.so (written beside it, then renamed: a server that has the old one
    loaded keeps it); returns its path."""
    gcc = gcc or shutil.which("gcc") or "gcc"
    target = os.path.join(info["pkglibdir"], "groupml.so")
    tmp = f"{target}.{os.getpid()}.tmp"
    res = run([gcc, *MODULE_CFLAGS, "-I", server_headers(info), "-o", tmp, *MODULE_SOURCES], check=False)
    if res.returncode != 0:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise InstallError(f"building groupml's C module failed:\n{res.stderr.strip()}",
                           "check that postgresql-server-dev matches the server's major version")
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    return target


def embedded_python(plpython_so: str) -> str:
    """The interpreter plpython3u embeds: find libpython3.X in its links, return /usr/bin/python3.X."""
    res = run(["ldd", plpython_so], check=False)
    m = re.search(r"libpython(3\.\d+)", res.stdout)
    if not m:
        raise InstallError(f"cannot tell which Python {plpython_so} embeds (ldd shows no libpython)")
    ver = m.group(1)
    for cand in (f"/usr/bin/python{ver}", shutil.which(f"python{ver}") or ""):
        if cand and os.path.exists(cand):
            return cand
    raise InstallError(f"plpython3u embeds Python {ver} but no python{ver} executable was found",
                       f"install python{ver} (Debian: apt-get install python3 python3-venv)")


# ---------------------------------------------------------------- venv
def venv_site_packages(venv: str) -> str:
    found = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    if not found:
        raise InstallError(f"{venv} has no site-packages")
    return found[0]


def ensure_venv(python: str, venv: str) -> str:
    vpy = os.path.join(venv, "bin", "python")
    if os.path.exists(vpy):
        want = run([python, "-c", "import sys; print(sys.version_info[:2])"]).stdout
        have = run([vpy, "-c", "import sys; print(sys.version_info[:2])"], check=False).stdout
        if want == have:
            return vpy
        log(f"rebuilding {venv}: it was built from another Python")
        shutil.rmtree(venv)
    log(f"building venv {venv} from {python}")
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    res = run([python, "-m", "venv", venv], check=False)
    if res.returncode != 0:
        raise InstallError(f"{python} -m venv failed: {res.stderr.strip()}",
                           "on Debian install the venv module: apt-get install python3-venv")
    return vpy


def pip_install(vpy: str, extras: list, editable: bool) -> None:
    target = REPO + (f"[{','.join(extras)}]" if extras else "")
    cmd = [vpy, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if "torch" in extras:
        cmd.append("torch==2.13.0")  # the CPU build; an unpinned torch pulls a multi-GB CUDA build
    cmd += ["-e", target] if editable else [target]
    log("installing the groupml package" + (f" with extras {extras}" if extras else ""))
    run(cmd)


def make_readable(prefix: str) -> None:
    for root, dirs, files in os.walk(prefix):
        for name in dirs + files:
            p = os.path.join(root, name)
            try:
                st = os.lstat(p)
                if not os.path.islink(p):
                    os.chmod(p, st.st_mode | 0o444 | (0o111 if os.path.isdir(p) or st.st_mode & 0o100 else 0))
            except OSError:
                pass
    os.chmod(prefix, 0o755)


def check_readable_by_postgres(venv: str) -> None:
    """Import groupml and numpy as the postgres OS user with the venv's Python, as PL/Python will."""
    if os.geteuid() != 0 or not shutil.which("runuser"):
        return
    vpy = os.path.join(venv, "bin", "python")
    res = run(["runuser", "-u", "postgres", "--", vpy, "-c", "import groupml, numpy, scipy"], check=False)
    if res.returncode != 0:
        raise InstallError(f"the postgres OS user cannot import groupml from {venv}: "
                           f"{(res.stderr or '').strip().splitlines()[-1:]}",
                           "choose a --prefix outside /root (e.g. /opt/groupml), keep an --editable "
                           "checkout in a world-readable directory, or make the path world-readable")


# ---------------------------------------------------------------- commands
def cmd_install(args) -> None:
    info = pg_info(find_pg_config(args.pg_config))
    log(f"server: {info['version']}")
    if args.dsn:
        major = server_major_from_dsn(args.dsn, info["bindir"])
        if major != info["major"]:
            raise InstallError(f"the server at the DSN is PostgreSQL {major} but pg_config is for {info['major']}",
                               f"pass --pg-config /usr/lib/postgresql/{major}/bin/pg_config")
    so = ensure_plpython(info, args.install_plpython)
    if not os.access(info["pkglibdir"], os.W_OK):
        raise InstallError(f"cannot write to {info['pkglibdir']}", "run the installer as root (sudo)")
    module = build_module(info, ensure_build_tools(info, args.install_plpython))
    log(f"built {module}")
    python = embedded_python(so)
    venv = os.path.join(args.prefix, "venv")
    vpy = ensure_venv(python, venv)
    extras = [e for e in (args.extras or "").split(",") if e]
    pip_install(vpy, extras, args.editable)
    make_readable(args.prefix)
    site = venv_site_packages(venv)
    check_readable_by_postgres(venv)
    extdir = os.path.join(info["sharedir"], "extension")
    if not os.access(extdir, os.W_OK):
        raise InstallError(f"cannot write to {extdir}", "run the installer as root (sudo)")
    version = package_version()
    write_extension_files(extdir, site)
    with open(os.path.join(args.prefix, "installed.txt"), "w") as fh:
        fh.write(f"version={version}\nsharedir={info['sharedir']}\nvenv={venv}\nsite={site}\n")
    log(f"installed groupml {version}: venv {venv}, extension files in {extdir}")
    if args.create_extension:
        if not args.dsn:
            raise InstallError("--create-extension needs --dsn")
        psql = shutil.which("psql") or os.path.join(info["bindir"], "psql")
        run([psql, "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", args.dsn, "-c",
             "CREATE EXTENSION IF NOT EXISTS groupml CASCADE"])
        log("CREATE EXTENSION groupml done")
    else:
        log("next: psql -c 'CREATE EXTENSION groupml CASCADE' <your database>")


def cmd_uninstall(args) -> None:
    info = pg_info(find_pg_config(args.pg_config))
    if args.dsn:
        psql = shutil.which("psql") or os.path.join(info["bindir"], "psql")
        run([psql, "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", args.dsn, "-c", "DROP EXTENSION IF EXISTS groupml"])
    extdir = os.path.join(info["sharedir"], "extension")
    removed = 0
    for p in glob.glob(os.path.join(extdir, "groupml.control")) + glob.glob(os.path.join(extdir, "groupml--*.sql")):
        os.remove(p)
        removed += 1
    module = os.path.join(info["pkglibdir"], "groupml.so")
    if os.path.exists(module):
        os.remove(module)
        removed += 1
    venv = os.path.join(args.prefix, "venv")
    if os.path.isdir(venv):
        shutil.rmtree(venv)
    marker = os.path.join(args.prefix, "installed.txt")
    if os.path.exists(marker):
        os.remove(marker)
    log(f"removed {removed} extension file(s) and {venv}; databases that still have the extension "
        "keep their objects until DROP EXTENSION groupml")


def cmd_status(args) -> None:
    info = pg_info(find_pg_config(args.pg_config))
    extdir = os.path.join(info["sharedir"], "extension")
    so = os.path.join(info["pkglibdir"], "plpython3.so")
    print(f"server:       {info['version']}")
    print(f"plpython3u:   {'yes' if os.path.exists(so) else 'missing'}")
    print(f"C module:     {'yes' if os.path.exists(os.path.join(info['pkglibdir'], 'groupml.so')) else 'missing'}")
    print(f"control file: {'yes' if os.path.exists(os.path.join(extdir, 'groupml.control')) else 'missing'}")
    marker = os.path.join(args.prefix, "installed.txt")
    print(f"venv:         {open(marker).read().strip() if os.path.exists(marker) else 'not installed'}")


def cmd_build_sql(args) -> None:
    out = os.path.join(args.out, f"groupml--{package_version()}.sql")
    os.makedirs(args.out, exist_ok=True)
    with open(out, "w") as fh:
        fh.write(build_sql(args.site_packages))
    print(out)


REPORT_SQL = {
    "run": "SELECT groupml.report(:'run'::bigint, :'format');\n",
    "scheduler": "SELECT groupml.scheduler_report(:'format');\n",
}


class ReportError(SystemExit):
    def __init__(self, message: str):
        super().__init__(f"groupml report: {message}")


def cmd_report(args) -> None:
    """Fetch the page with psql (the run id and format as psql variables, never spliced into
    the SQL) and write it to the file, replaced only once the whole page arrived."""
    psql = shutil.which("psql")
    if psql is None and args.pg_config:
        psql = os.path.join(pg_info(args.pg_config)["bindir"], "psql")
    if psql is None:
        raise ReportError("ERROR: psql not found\n  HINT: Put the PostgreSQL client on PATH or give --pg-config.")
    kind = "scheduler" if args.scheduler else "run"
    variables = [f"format={args.format}"] + ([f"run={args.run}"] if kind == "run" else [])
    cmd = [psql, "-XAtq", "-v", "ON_ERROR_STOP=1"]
    for v in variables:
        cmd += ["-v", v]
    cmd += ["-d", args.dsn, "-f", "-"]
    res = subprocess.run(cmd, input=REPORT_SQL[kind], capture_output=True, text=True)
    if res.returncode != 0:
        raise ReportError((res.stderr or res.stdout).strip()[-4000:] or f"psql exited with {res.returncode}")
    page = res.stdout[:-1] if res.stdout.endswith("\n") else res.stdout
    if args.output in (None, "-"):
        print(page)
        return
    tmp = f"{args.output}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(page + "\n")
    os.replace(tmp, args.output)
    log(f"wrote {args.output} ({len(page.encode('utf-8')):,} bytes)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="groupml", description="Install groupml into a PostgreSQL server.")
    sub = ap.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--pg-config", help="path of the server's pg_config")
    common.add_argument("--prefix", default=DEFAULT_PREFIX, help="where the venv lives (default %(default)s)")
    common.add_argument("--dsn", help="connection string of the target server (checks its version)")
    p = sub.add_parser("install", parents=[common], help="install or update groupml (idempotent)")
    p.add_argument("--install-plpython", action="store_true",
                   help="apt-get install postgresql-plpython3-<major> and, for the C module, "
                        "postgresql-server-dev-<major> (both pinned to the server version) and gcc when missing")
    p.add_argument("--extras", default="", help="comma list of package extras: torch,lightgbm,search,test")
    p.add_argument("--editable", action="store_true", help="install the package in editable mode (developers)")
    p.add_argument("--create-extension", action="store_true", help="run CREATE EXTENSION groupml CASCADE at --dsn")
    p.set_defaults(func=cmd_install)
    p = sub.add_parser("uninstall", parents=[common], help="remove the extension files and the venv")
    p.set_defaults(func=cmd_uninstall)
    p = sub.add_parser("status", parents=[common], help="show what is installed")
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("build-sql", help="write groupml--<version>.sql from sql/")
    p.add_argument("--out", default=os.path.join(REPO, "build"))
    p.add_argument("--site-packages", default=None)
    p.set_defaults(func=cmd_build_sql)
    p = sub.add_parser("report", help="write the HTML report of a run (or of the multi-tenant scheduler)")
    p.add_argument("--dsn", required=True, help="connection string; the report shows what its role may read")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--run", type=int, help="run id (groupml.runs.run_id)")
    what.add_argument("--scheduler", action="store_true", help="the multi-tenant scheduler's report")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.add_argument("--format", default="html", choices=("html", "json"))
    p.add_argument("--pg-config", help="path of pg_config, to find psql when it is not on PATH")
    p.set_defaults(func=cmd_report)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
