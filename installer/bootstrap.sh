#!/usr/bin/env bash
# System packages groupml needs on Debian/Ubuntu: a PostgreSQL server (15 unless one is already
# installed), PL/Python and the server headers pinned to that server's exact version, gcc and
# python3-venv.
# Idempotent; runs apt only for what is missing. Needs root.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
PG_MAJOR="${GROUPML_PG_MAJOR:-15}"
updated=0
apt_install() {
  if ! apt-get install -y -q --no-install-recommends "$@" >/tmp/groupml-apt.log 2>&1; then
    if [ "$updated" = 0 ]; then apt-get update -q >/tmp/groupml-apt-update.log 2>&1; updated=1; fi
    apt-get install -y -q --no-install-recommends "$@" >/tmp/groupml-apt.log 2>&1 || { tail -20 /tmp/groupml-apt.log; exit 1; }
  fi
}
if [ "$(id -u)" != 0 ]; then
  echo "groupml bootstrap: needs root to install system packages; re-run with sudo" >&2; exit 1
fi
command -v apt-get >/dev/null || { echo "groupml bootstrap: apt-get not found; install PostgreSQL ${PG_MAJOR}, its PL/Python 3 and python3-venv yourself" >&2; exit 1; }
if ! ls /usr/lib/postgresql/*/bin/pg_config >/dev/null 2>&1; then
  echo "groupml: installing postgresql-${PG_MAJOR}"
  apt_install "postgresql-${PG_MAJOR}" "postgresql-client-${PG_MAJOR}"
fi
major=$(basename "$(dirname "$(dirname "$(ls -d /usr/lib/postgresql/*/bin/pg_config | sort -V | tail -1)")")")
server_ver=$(dpkg-query -W -f='${Version}' "postgresql-${major}")
if [ ! -e "/usr/lib/postgresql/${major}/lib/plpython3.so" ]; then
  echo "groupml: installing postgresql-plpython3-${major}=${server_ver} (pinned to the server)"
  apt_install "postgresql-plpython3-${major}=${server_ver}"
fi
if [ ! -e "/usr/include/postgresql/${major}/server/postgres.h" ]; then
  # the server headers and gcc build groupml's C module (learn_over_groups' row buffers)
  echo "groupml: installing postgresql-server-dev-${major}=${server_ver} (pinned to the server)"
  apt_install "postgresql-server-dev-${major}=${server_ver}"
fi
command -v gcc >/dev/null || apt_install gcc libc6-dev
if ! dpkg-query -W -f='${Status}' "postgresql-${major}-cron" 2>/dev/null | grep -q "install ok installed"; then
  # pg_cron drives the multi-tenant scheduler; optional, so a failure here is not fatal
  apt_install "postgresql-${major}-cron" || echo "groupml: pg_cron not installed (optional)"
fi
if ! /usr/bin/python3 -c "import ensurepip, venv" >/dev/null 2>&1; then
  echo "groupml: installing python3-venv"
  apt_install python3-venv
fi
# keep the server package where it is: apt must not upgrade it under the pinned plpython
apt-mark hold "postgresql-${major}" "postgresql-plpython3-${major}" >/dev/null 2>&1 || true
