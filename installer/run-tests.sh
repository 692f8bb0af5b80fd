#!/usr/bin/env bash
# README command 2: set everything up on a fresh Debian machine and run the whole test suite.
# Usage: sudo bash installer/run-tests.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash installer/bootstrap.sh
python3 installer/groupml_installer.py install --install-plpython --extras test,search,lightgbm,torch
export PYTHONDONTWRITEBYTECODE=1
exec /opt/groupml/venv/bin/python -m pytest -q -p no:cacheprovider "$@" tests
