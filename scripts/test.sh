#!/usr/bin/env bash
# Sets up everything and runs the whole test suite: lint, type checks, unit, property-based and integration tests,
# among them each benchmark's smoke run (tests/integration/test_benchmarks.py).
# `.ci/run` calls exactly this. Extra arguments go to pytest (e.g. `scripts/test.sh -m "not integration"`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# Tools from the system's packages, installed when missing and this is a root shell with apt (a CI container):
# Java and Maven for the local Kafka broker the integration tests start, and Debian's docker-compose to validate
# docker/compose.yaml with a real compose tool (no Docker engine needed). Elsewhere, install them yourself.
export DEBIAN_FRONTEND=noninteractive  # no package may ask a question: CI has no standard input
need() {  # need TOOL "PACKAGE [ANOTHER...]" WHAT: the first package the system has is installed
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    for package in $2; do
      echo "test: installing $package ($3)" >&2
      # Without the packages they recommend: docker-compose's is a Docker engine, which, running, would have the
      # integration tests use containers from Docker Hub instead of the local broker.
      if { apt-get install -y -q --no-install-recommends "$package" \
            || { apt-get update -q && apt-get install -y -q --no-install-recommends "$package"; }; } \
          >"/tmp/acker-install-$package.log" 2>&1; then
        return 0
      fi
    done
    echo "test: could not install $2 (see /tmp/acker-install-*.log)" >&2
  else
    echo "test: warning: '$1' is not on PATH ($3)" >&2
  fi
}
java_major() {  # "17.0.15" → 17, "1.8.0_292" → 8
  java -version 2>&1 | sed -n 's/.*version "\(1\.\)\{0,1\}\([0-9]*\).*/\2/p' | head -1
}
need java "openjdk-17-jre-headless default-jre-headless" "the local Kafka broker"  # Debian 13 has no Java 17
if command -v java >/dev/null 2>&1 && [ "$(java_major)" -lt 17 ] 2>/dev/null; then
  echo "test: warning: $(java -version 2>&1 | head -1): the local Kafka broker needs Java 17 or newer" >&2
fi
need mvn maven "fetching the Kafka broker's jars"
need docker-compose docker-compose "validating docker/compose.yaml"

# One command a line: under `set -e` a failure inside an `a && b && c` list (but not of its last command) does not
# stop the script, and a lint error would pass.
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
if [ "${CI:-}" = "true" ]; then export HYPOTHESIS_PROFILE=ci; fi
# Tests in parallel processes (pytest-xdist), each with its own broker (or the cluster named), Spark and topics: the
# integration tests mostly wait (for ticks, timeouts, micro-batches), so several run in well under half the time of
# one even on two cores. Three, not four: each worker keeps a broker and a Spark JVM, and the demo and outage tests
# start more; on a two-core machine a third slower than usual, four workers starved the JVMs (a 20-sentence demo's
# Spark took 15 minutes to start, restarted brokers over a minute) and the run took over an hour.
# ACKER_TEST_WORKERS=0 runs them in this process; a -n among the arguments wins.
# The 30 longest tests are listed at the end: where CI's time goes.
set +e
.venv/bin/python -m pytest -n "${ACKER_TEST_WORKERS:-3}" --durations=30 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test: pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  exit "$rc"
fi
