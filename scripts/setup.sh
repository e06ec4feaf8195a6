#!/usr/bin/env bash
# Sets up everything the project needs from nothing, idempotently: a virtual environment in .venv with the
# package and its development tools. Re-running it is cheap: it reinstalls only when pyproject.toml changed, or
# .venv was made for another checkout or by a Python that is gone.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup: Python 3.11 or newer is needed (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi

# Two commands started together on a fresh clone (the demo and the tests) would both make .venv and install into it,
# and one could remove the venv the other is using: the second waits for the first (the lock is outside .venv).
if command -v flock >/dev/null 2>&1; then
  exec 9>.setup.lock
  flock 9
fi

# A .venv made for another checkout (copied or moved with it: its scripts would run the other checkout's code, or
# nothing) or by a Python that is gone (upgraded) is made again.
here=$(pwd -P)  # the checkout however it is reached (a symlink, macOS's /var for /private/var)
if [ -d .venv ] && { [ "$(cat .venv/.checkout 2>/dev/null)" != "$here" ] || ! .venv/bin/python -c '' 2>/dev/null; }; then
  echo "setup: .venv was made for another checkout or by another Python: making it again" >&2
  rm -rf .venv
fi

if command -v sha256sum >/dev/null 2>&1; then digest=sha256sum; else digest="shasum -a 256"; fi  # macOS: shasum
stamp=.venv/.installed-$($digest pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: creating .venv and installing the package with its test and development tools" >&2
  # A .venv left half-made (e.g. python3-venv was missing, so ensurepip failed) is made again.
  if [ -x .venv/bin/python ] && ! .venv/bin/python -m pip --version >/dev/null 2>&1; then rm -rf .venv; fi
  # Debian's Python makes no venv without its python3-venv package: installed in a root shell with apt (a CI
  # container), as test.sh installs Java and Maven; elsewhere, said.
  if ! "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
    version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "setup: installing python$version-venv (Debian's venv support)" >&2
      { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "python$version-venv" \
          || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
               "python$version-venv"; }; } >/tmp/acker-install-venv.log 2>&1 \
        || echo "setup: could not install python$version-venv (see /tmp/acker-install-venv.log)" >&2
    else
      echo "setup: $PYTHON has no ensurepip: install your system's venv package (Debian: python$version-venv)" >&2
    fi
  fi
  [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
  if ! { .venv/bin/python -m pip install --upgrade pip && .venv/bin/python -m pip install -e '.[dev]'; } \
      >.venv/install.log 2>&1; then
    cat .venv/install.log >&2
    echo "setup: installing the package failed (log above, kept in .venv/install.log)" >&2
    exit 1
  fi
  rm -f .venv/.installed-*
  echo "$here" >.venv/.checkout
  touch "$stamp"
fi

# The integration tests, the demo and the benchmarks start a real Kafka broker from Maven Central jars.
for tool in java mvn; do
  command -v "$tool" >/dev/null 2>&1 || echo "setup: warning: '$tool' is not on PATH: the local Kafka broker needs Java 17+ and Maven" >&2
done
