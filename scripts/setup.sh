#!/usr/bin/env bash
# Creates .venv with the pinned dependencies and the project installed (idempotent).
# Installs with uv (pinned below; fetched from the package registry by pip) because it installs
# the ~60 pinned wheels in seconds where pip takes over a minute; falls back to pip if uv cannot.
# --compile-bytecode as pip does: every sandboxed pytest would otherwise compile pytest again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
UV_VERSION="0.13.9"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "rl_daytona needs Python >= 3.11")'
[ -x .venv/bin/python ] || "$PY" -m venv .venv
export UV_LINK_MODE=copy  # the uv cache and .venv may sit on different filesystems
with_uv() {
  { [ -x .venv/bin/uv ] && [ "$(.venv/bin/uv --version 2>/dev/null)" = "uv $UV_VERSION" ]; } ||
    .venv/bin/python -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" || return 1
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -r requirements.lock &&
    .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .
}
with_pip() {
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock &&
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
}
with_uv || { echo "setup: uv could not install; installing with pip instead" >&2; with_pip; }
# the project's own modules too: every Ray worker imports them, and where PYTHONDONTWRITEBYTECODE
# is set (as on this project's machines) Python would compile them again in every process
.venv/bin/python -m compileall -q rl_daytona >/dev/null
