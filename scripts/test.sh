#!/usr/bin/env bash
# Sets up everything and runs the whole test suite: lint, type checks, unit, property-based and integration tests.
# `.ci/run` calls exactly this. Extra arguments go to pytest (e.g. `scripts/test.sh -m "not integration"`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# docker/compose.yaml is validated by a real compose tool (no Docker engine needed): Debian's docker-compose.
if ! command -v docker-compose >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test: installing Debian's docker-compose (to validate docker/compose.yaml)" >&2
  { apt-get install -y -q docker-compose || { apt-get update -q && apt-get install -y -q docker-compose; }; } \
    >/tmp/acker-docker-compose-install.log 2>&1 || echo "test: could not install docker-compose (see the log)" >&2
fi

echo "== ruff" && .venv/bin/ruff check . && .venv/bin/ruff format --check .
echo "== mypy" && .venv/bin/mypy
echo "== pytest"
if [ "${CI:-}" = "true" ]; then export HYPOTHESIS_PROFILE=ci; fi
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test: pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
