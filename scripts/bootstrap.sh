#!/usr/bin/env bash
# Creates .venv and installs tidelog with pinned dependencies (constraints.txt). Idempotent.
# Usage: scripts/bootstrap.sh [extra]   e.g. "test"
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade "pip>=24" >/dev/null
spec="."
[ -n "$extra" ] && spec=".[$extra]"
.venv/bin/python -m pip install -q -c constraints.txt -e "$spec"
