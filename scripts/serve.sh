#!/usr/bin/env bash
# Sets up libtensorflow if it is missing, builds tfserve (release) and serves
# the bundled models/ on port 8501. Extra arguments go to tfserve.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/setup_libtensorflow.py
exec cargo run --release --bin tfserve -- "$@"
