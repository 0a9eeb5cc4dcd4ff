#!/usr/bin/env bash
# Sets up .venv and runs the whole test suite; pytest's "no tests collected" (5) is a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
.venv/bin/python -m pytest -q "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "rl_daytona tests: pytest collected no tests; that is a failure here" >&2
  exit 1
fi
exit "$rc"
