#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets) on its committed corpus for
# SECONDS each (default 20: a smoke run), under the nightly toolchain with
# cargo-fuzz, AddressSanitizer and a 2 GB RSS limit. New inputs found go to a
# scratch corpus, not the committed one; a crash stops with its input in
# fuzz/artifacts/<target>/. Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir fuzz)
fi
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cargo +nightly fuzz build --fuzz-dir fuzz -O
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  dict=()
  case "$target" in
    tfs_predict|classify_examples|sagemaker_body|stfs_body) dict=("-dict=fuzz/json.dict") ;;
  esac
  echo "fuzz: $target for ${seconds}s"
  cargo +nightly fuzz run --fuzz-dir fuzz -O "$target" "$scratch/$target" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "${dict[@]}" 2>&1 |
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)" || true
  if ls "fuzz/artifacts/$target"/crash-* "fuzz/artifacts/$target"/oom-* "fuzz/artifacts/$target"/timeout-* >/dev/null 2>&1; then
    echo "fuzz: $target found a failing input: see fuzz/artifacts/$target" >&2
    exit 1
  fi
done
