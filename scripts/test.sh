#!/usr/bin/env bash
# Sets up libtensorflow if it is missing, checks formatting and lints, then
# runs every unit and integration test against the bundled models/.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/setup_libtensorflow.py
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all -- --check
else
  echo "rustfmt is not installed; skipping the format check (rustup component add rustfmt)" >&2
fi
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --all-targets -- -D warnings
else
  echo "clippy is not installed; skipping lints (rustup component add clippy)" >&2
fi
cargo test
