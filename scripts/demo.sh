#!/usr/bin/env bash
# Sets up everything and runs the main job (acker demo) on a local Kafka broker it starts itself. Extra arguments go to `acker demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/acker demo "$@"
