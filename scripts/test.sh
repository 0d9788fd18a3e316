#!/usr/bin/env bash
# Every check, each stage timed (scripts/stages.sh prints the table at the end,
# passed or failed). First what needs no libtensorflow (`--quick` stops
# there): formatting, both TF-free lints, the library's tests and the
# integration tests of tests/it/mock/, which start the real server on the
# mock runtime of tests/it/common/mock.rs. Then libtensorflow, the clients and
# the object stores are set up if missing, and the TensorFlow build lints
# everything and runs the tests of tests/it/tensorflow/ (and the bench's own):
# each test runs once, on the runtime its folder declares.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh
quick=false
if [ "${1:-}" = "--quick" ]; then quick=true; fi
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
# A minimal toolchain profile lacks them; CI always runs both.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

# What the TensorFlow stages need and the TF-free ones do not: libtensorflow,
# cargo-deny and cargo-fuzz built into the cache, the clients' environments
# and the object stores' npm packages, prepared beside the TF-free stages.
prepare() {
  python3 scripts/setup_libtensorflow.py
  # cargo-deny and cargo-fuzz at pinned versions, built once into the cache,
  # and the nightly toolchain cargo-fuzz builds with.
  python3 scripts/dev_tools.py >/dev/null
  if [ "${TFSERVE_SKIP_FUZZ:-}" != 1 ] && ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
  fi
  # The dashboard's browser test drives Chromium through playwright-core.
  if command -v npm >/dev/null 2>&1 && [ ! -d tests/browser/node_modules/playwright-core ]; then
    npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
  fi
  # The real clients the client and ported-suite tests run (tensorflow-serving-api,
  # tritonclient, KServe's SDK, grpcio's health and reflection; the SageMaker SDK
  # apart, as its protobuf pin cannot share TensorFlow's), in their own environments.
  # The object store APIs the storage tests serve models from (moto, fake-gcs-server,
  # and Azurite from npm) with each cloud's Python client (scripts/object_stores.py).
  for environment in client sagemaker stores; do
    python3 scripts/client_venv.py "$environment" >/dev/null
  done
  if [ ! -d tests/stores/node_modules/azurite ]; then
    npm ci --prefix tests/stores --no-audit --no-fund --loglevel=error
  fi
}
if ! $quick; then
  beside prepare bash -c "$(declare -f prepare); set -euo pipefail; prepare"
fi

tf_free_lints() {
  cargo clippy --lib --no-default-features -- -D warnings
  cargo clippy --no-default-features --features mock --tests -- -D warnings
}

stage "fmt" cargo fmt --all -- --check
stage "clippy without TensorFlow" tf_free_lints
stage "library tests" cargo test --lib --no-default-features
stage "integration tests on the mock" cargo test --no-default-features --features mock --test it
if $quick; then
  exit 0
fi
# TFSERVE_FREE_TEST_BUILD=1 (CI): the TF-free stage's test binaries are not
# run again; the TensorFlow build below links its own.
if [ "${TFSERVE_FREE_TEST_BUILD:-}" = 1 ]; then
  find target/debug/deps -maxdepth 1 -type f -executable ! -name '*.*' -delete
fi

stage "libtensorflow, cargo tools and clients: the rest of their preparation" awaited prepare
# Made above: each call now only prints where.
PATH="$(python3 scripts/dev_tools.py):$PATH"
export PATH

# The mock feature beside TensorFlow: the differential test serves the same
# models on both. The lints and the tests share one feature set, so the
# dependencies' build is shared where cargo can.
stage "clippy with TensorFlow" cargo clippy --all-targets --features mock -- -D warnings
# Dependencies' licenses, bans and sources (deny.toml); cargo fetches the
# metadata of crates for other platforms it has not downloaded yet.
stage "cargo-deny" cargo deny --log-level error check licenses bans sources

TFSERVE_CLIENT_PYTHON="$(python3 scripts/client_venv.py client)"
TFSERVE_SAGEMAKER_PYTHON="$(python3 scripts/client_venv.py sagemaker)"
TFSERVE_STORES_PYTHON="$(python3 scripts/client_venv.py stores)"
export TFSERVE_CLIENT_PYTHON TFSERVE_SAGEMAKER_PYTHON TFSERVE_STORES_PYTHON

# The fuzz targets' build (minutes of optimising every dependency with
# AddressSanitizer's instrumentation) beside the TensorFlow stages.
if [ "${TFSERVE_SKIP_FUZZ:-}" != 1 ]; then
  beside fuzz-build cargo +nightly fuzz build --fuzz-dir fuzz -O
fi

# The binaries' own unit tests (the bench's clock and open loop) and every
# integration test that needs TensorFlow.
stage "integration tests on TensorFlow" cargo test --features mock --bins --test it
# TFSERVE_FREE_TEST_BUILD=1 (CI) removes the passed test build before the
# fuzz build needs disk of its own.
if [ "${TFSERVE_FREE_TEST_BUILD:-}" = 1 ]; then
  rm -rf target/debug
fi
# A short fuzz run of every target on its committed corpus (cargo-fuzz needs
# the nightly toolchain, installed by `prepare` if missing); TFSERVE_FUZZ_SECONDS sets
# the time per target (default 20), TFSERVE_SKIP_FUZZ=1 skips it.
fuzz() {
  awaited fuzz-build
  cargo +nightly fuzz --version
  scripts/fuzz.sh "${TFSERVE_FUZZ_SECONDS:-20}"
}
if [ "${TFSERVE_SKIP_FUZZ:-}" = 1 ]; then
  echo "TFSERVE_SKIP_FUZZ=1: skipping the fuzz smoke run" >&2
else
  stage "fuzz smoke run" fuzz
fi
