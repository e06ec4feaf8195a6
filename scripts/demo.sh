#!/usr/bin/env bash
# Sets up everything and runs the main job on the embedded default. Extra arguments go to `acker demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/acker demo "$@"
