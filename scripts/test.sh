#!/usr/bin/env bash
# Sets up libtensorflow and the client environment if they are missing, checks
# formatting and lints, then runs every unit and integration test against the
# bundled models/ (the dashboard's browser test too, when Chromium and npm are present).
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
# The library without TensorFlow: the batcher, registry, service, core and
# every dialect on the mock runtime (no libtensorflow linked).
cargo clippy --lib --no-default-features -- -D warnings
cargo test --lib --no-default-features
# Dependencies' licenses, bans and sources (deny.toml), when cargo-deny is installed.
if cargo deny --version >/dev/null 2>&1; then
  cargo deny --offline --log-level error check licenses bans sources
else
  echo "cargo-deny is not installed; skipping the dependency check (cargo install cargo-deny --locked)" >&2
fi
# The dashboard's browser test drives Chromium through playwright-core.
if command -v npm >/dev/null 2>&1 && [ ! -d tests/browser/node_modules/playwright-core ]; then
  npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
fi
# The real clients the client and ported-suite tests run (tensorflow-serving-api,
# tritonclient, KServe's SDK, grpcio's health and reflection; the SageMaker SDK
# apart, as its protobuf pin cannot share TensorFlow's), in their own environments.
TFSERVE_CLIENT_PYTHON="$(python3 scripts/client_venv.py client)"
TFSERVE_SAGEMAKER_PYTHON="$(python3 scripts/client_venv.py sagemaker)"
export TFSERVE_CLIENT_PYTHON TFSERVE_SAGEMAKER_PYTHON
cargo test
# A short fuzz run (20 s per decoder, on the committed corpora) when the
# nightly toolchain has cargo-fuzz; TFSERVE_SKIP_FUZZ=1 skips it.
if [ "${TFSERVE_SKIP_FUZZ:-}" = 1 ]; then
  echo "TFSERVE_SKIP_FUZZ=1: skipping the fuzz smoke run" >&2
elif cargo +nightly fuzz --version >/dev/null 2>&1; then
  scripts/fuzz.sh 20
else
  echo "cargo-fuzz for the nightly toolchain is not installed; skipping the fuzz smoke run (cargo install cargo-fuzz)" >&2
fi
