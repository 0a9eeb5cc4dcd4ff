#!/usr/bin/env bash
# Creates .venv with the pinned dependencies and the project installed (idempotent).
# Installs with uv (pinned below; fetched from the package registry by pip) because it installs
# the ~60 pinned wheels in seconds where pip takes over a minute; falls back to pip if uv cannot.
# The venv is made without pip (ensurepip alone took ~6 s): uv comes from the system's pip
# into .venv/uv, or, where python3 has no pip, from the venv's own pip made then.
# --compile-bytecode as pip does: every sandboxed pytest would otherwise compile pytest again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
UV_VERSION="0.13.9"
UV=.venv/uv/bin/uv
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "rl_daytona needs Python >= 3.11")'
[ -x .venv/bin/python ] || "$PY" -m venv --without-pip .venv
export UV_LINK_MODE=copy  # the uv cache and .venv may sit on different filesystems
venv_pip() {
  .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip >/dev/null
}
have_uv() { [ -x "$UV" ] && case "$("$UV" --version 2>/dev/null)" in "uv $UV_VERSION"|"uv $UV_VERSION "*) ;; *) false ;; esac; }
get_uv() {
  have_uv && return 0
  rm -rf .venv/uv
  { "$PY" -m pip install -q --disable-pip-version-check --target .venv/uv "uv==$UV_VERSION" 2>/dev/null && have_uv; } ||
    { venv_pip && rm -rf .venv/uv &&
      .venv/bin/python -m pip install -q --disable-pip-version-check --target .venv/uv "uv==$UV_VERSION" && have_uv; }
}
with_uv() {
  get_uv || return 1
  "$UV" pip install -q --compile-bytecode --python .venv/bin/python -r requirements.lock &&
    "$UV" pip install -q --python .venv/bin/python --no-deps -e .
}
with_pip() {
  venv_pip &&
    .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock &&
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
}
with_uv || { echo "setup: uv could not install; installing with pip instead" >&2; with_pip; }
# the project's own modules too: every Ray worker imports them, and where PYTHONDONTWRITEBYTECODE
# is set (as on this project's machines) Python would compile them again in every process
.venv/bin/python -m compileall -q rl_daytona >/dev/null
