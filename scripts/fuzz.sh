#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets) on its committed corpus for
# SECONDS each (default 20: a smoke run), under the nightly toolchain with
# cargo-fuzz, AddressSanitizer and a 2 GB RSS limit, one target per core at a
# time (libFuzzer runs one thread; TFSERVE_FUZZ_JOBS sets how many at once).
# New inputs found go to a scratch corpus, not the committed one; a crash
# stops with its input in fuzz/artifacts/<target>/.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo +nightly fuzz list --fuzz-dir fuzz)
fi
jobs="${TFSERVE_FUZZ_JOBS:-$(nproc)}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cargo +nightly fuzz build --fuzz-dir fuzz -O

# One target's run, its summary kept apart so that runs side by side do not
# interleave their lines.
fuzz_one() {
  local target="$1" dict=()
  mkdir -p "$scratch/$target"
  case "$target" in
    tfs_predict|classify_examples|sagemaker_body|stfs_body) dict=("-dict=fuzz/json.dict") ;;
  esac
  {
    echo "fuzz: $target for ${seconds}s"
    cargo +nightly fuzz run --fuzz-dir fuzz -O "$target" "$scratch/$target" "fuzz/corpus/$target" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "${dict[@]}" 2>&1 |
      grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|SUMMARY)" || true
  } > "$scratch/$target.log"
}

for ((first = 0; first < ${#targets[@]}; first += jobs)); do
  running=()
  for target in "${targets[@]:first:jobs}"; do
    fuzz_one "$target" &
    running+=($!)
  done
  for pid in "${running[@]}"; do wait "$pid"; done
  for target in "${targets[@]:first:jobs}"; do
    cat "$scratch/$target.log"
    if ls "fuzz/artifacts/$target"/crash-* "fuzz/artifacts/$target"/oom-* "fuzz/artifacts/$target"/timeout-* >/dev/null 2>&1; then
      echo "fuzz: $target found a failing input: see fuzz/artifacts/$target" >&2
      exit 1
    fi
  done
done
