#!/usr/bin/env bash
# README command 1: set everything up, start a throwaway cluster, run the demo job, print results.
# Usage: sudo bash installer/quickstart.sh [--rows N] [--groups N] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
bash installer/bootstrap.sh
python3 installer/groupml_installer.py install --install-plpython --extras search
exec /opt/groupml/venv/bin/python -m groupml.demo "$@"
