#!/usr/bin/env bash
# README command 2: set everything up on a fresh Debian machine and run the whole test suite.
# Usage: sudo bash installer/run-tests.sh [pytest args]      (GROUPML_PREFIX overrides /opt/groupml)
set -euo pipefail
cd "$(dirname "$0")/.."
export GROUPML_PREFIX="${GROUPML_PREFIX:-/opt/groupml}"
bash installer/bootstrap.sh
python3 installer/groupml_installer.py install --install-plpython --extras test,search,lightgbm,torch
# Citus for the scale-out tests: a checkout beside ../shared/citus (CI) builds it into the server
# (idempotent); elsewhere the Citus tests skip and name that script. With CI=true they must run.
if [ -d ../shared/citus ]; then
  bash ../shared/citus/build-citus.sh
fi
# the report tests open the pages in headless Chromium; installing it is optional for the
# rest of the suite, so a failure here only warns (those tests then fail saying what is missing)
if ! command -v chromium >/dev/null 2>&1; then
  echo "groupml: installing chromium (the report tests open pages in it)"
  ( apt-get install -y -q --no-install-recommends chromium >/tmp/groupml-apt-chromium.log 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 \
         && apt-get install -y -q --no-install-recommends chromium >/tmp/groupml-apt-chromium.log 2>&1; } ) \
    || echo "groupml: chromium not installed (see /tmp/groupml-apt-chromium.log); the report tests will fail" >&2
fi
export PYTHONDONTWRITEBYTECODE=1
exec "$GROUPML_PREFIX/venv/bin/python" -m pytest -q -p no:cacheprovider "$@" tests
