#!/usr/bin/env bash
# README command 1: set everything up, start a throwaway cluster, run the demo job, print results.
# Usage: sudo bash installer/quickstart.sh [--rows N] [--groups N] [--keep]   (GROUPML_PREFIX overrides /opt/groupml)
set -euo pipefail
cd "$(dirname "$0")/.."
export GROUPML_PREFIX="${GROUPML_PREFIX:-/opt/groupml}"
bash installer/bootstrap.sh
python3 installer/groupml_installer.py install --install-plpython --extras search
exec "$GROUPML_PREFIX/venv/bin/python" -m groupml.demo "$@"
