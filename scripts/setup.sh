#!/usr/bin/env bash
# Creates .venv with the pinned dependencies and the project installed (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "rl_daytona needs Python >= 3.11")'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
