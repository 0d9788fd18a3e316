#!/usr/bin/env bash
# Checks formatting, runs what needs no libtensorflow (the library and the
# mock-backed integration tests; `--quick` stops there), then sets up
# libtensorflow and the client environment if they are missing, lints, and
# runs every unit and integration test against the bundled models/ (the
# dashboard's browser test too, when Chromium and npm are present).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=false
if [ "${1:-}" = "--quick" ]; then quick=true; fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# A minimal toolchain profile lacks them; CI always runs both.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi
cargo fmt --all -- --check
# Without TensorFlow: the library (batcher, registry, service, core, every
# dialect) on the mock runtime, and every integration test crate that does not
# declare `#![cfg(feature = "tensorflow")]` at its top: those start the real
# server on the mock runtime of tests/common/mock.rs (the committed models'
# signatures and, for the arithmetic ones, their answers). No libtensorflow
# is fetched or linked.
cargo clippy --lib --no-default-features -- -D warnings
cargo clippy --no-default-features --features mock --tests -- -D warnings
cargo test --lib --no-default-features
cargo test --no-default-features --features mock --tests
if $quick; then
  exit 0
fi
# TFSERVE_FREE_TEST_BUILD=1 (CI): the TF-free stage's test binaries (~1 GB)
# are not run again; the full build below links its own.
if [ "${TFSERVE_FREE_TEST_BUILD:-}" = 1 ]; then
  find target/debug/deps -maxdepth 1 -type f -executable ! -name '*.*' -delete
fi
python3 scripts/setup_libtensorflow.py
# cargo-deny and cargo-fuzz at pinned versions, built once into the cache.
PATH="$(python3 scripts/dev_tools.py):$PATH"
export PATH
cargo clippy --all-targets -- -D warnings
# Dependencies' licenses, bans and sources (deny.toml); cargo fetches the
# metadata of crates for other platforms it has not downloaded yet.
cargo deny --version
cargo deny --log-level error check licenses bans sources
# The dashboard's browser test drives Chromium through playwright-core.
if command -v npm >/dev/null 2>&1 && [ ! -d tests/browser/node_modules/playwright-core ]; then
  npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
fi
# The real clients the client and ported-suite tests run (tensorflow-serving-api,
# tritonclient, KServe's SDK, grpcio's health and reflection; the SageMaker SDK
# apart, as its protobuf pin cannot share TensorFlow's), in their own environments.
TFSERVE_CLIENT_PYTHON="$(python3 scripts/client_venv.py client)"
TFSERVE_SAGEMAKER_PYTHON="$(python3 scripts/client_venv.py sagemaker)"
# The object store APIs the storage tests serve models from (moto, fake-gcs-server,
# and Azurite from npm) with each cloud's Python client (scripts/object_stores.py).
TFSERVE_STORES_PYTHON="$(python3 scripts/client_venv.py stores)"
export TFSERVE_CLIENT_PYTHON TFSERVE_SAGEMAKER_PYTHON TFSERVE_STORES_PYTHON
if [ ! -d tests/stores/node_modules/azurite ]; then
  npm ci --prefix tests/stores --no-audit --no-fund --loglevel=error
fi
cargo test
# TFSERVE_FREE_TEST_BUILD=1 (CI) removes the passed test build (~6 GB) before
# the fuzz build needs disk of its own.
if [ "${TFSERVE_FREE_TEST_BUILD:-}" = 1 ]; then
  rm -rf target/debug
fi
# A short fuzz run of every target on its committed corpus (cargo-fuzz needs
# the nightly toolchain, installed here if missing); TFSERVE_FUZZ_SECONDS sets
# the time per target (default 20), TFSERVE_SKIP_FUZZ=1 skips it.
if [ "${TFSERVE_SKIP_FUZZ:-}" = 1 ]; then
  echo "TFSERVE_SKIP_FUZZ=1: skipping the fuzz smoke run" >&2
else
  if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
  fi
  cargo +nightly fuzz --version
  scripts/fuzz.sh "${TFSERVE_FUZZ_SECONDS:-20}"
fi
