# Sourced by scripts/test.sh and .ci/run: `stage NAME COMMAND...` runs one
# stage and records its wall time, how it ended and the build folder's size
# after it; the table of every stage run so far is printed when the script
# that owns the record exits, passed or failed. A background watcher samples
# the disk every few seconds for the peak the run reached, which a reading
# between stages misses (a link's objects removed before the next stage).
#
# `beside NAME COMMAND...` starts work a later stage needs at the lowest CPU
# priority, so it takes only the cores the stages in front leave idle (their
# links, single-threaded front-ends, test runs, one-threaded measurements)
# and the network's time; `awaited NAME` (as a stage's command) waits for it,
# prints its output and ends as it ended.
#
# TFSERVE_STAGES names the record file; a script started by another that
# already keeps one (.ci/run calling scripts/test.sh) adds its rows there and
# leaves the printing to its caller.

stages_root="$(pwd)"

stages_disk_used() {
  df --output=used -B1 "$stages_root" | tail -1 | tr -d ' '
}

stages_build_size() {
  { du -sb "$stages_root/target" "$stages_root/fuzz/target" 2>/dev/null || true; } | awk '{s += $1} END {printf "%.0f\n", s}'
}

stages_gb() {
  awk -v b="$1" 'BEGIN {printf "%.2f", b / 1e9}'
}

stages_print() {
  local status=$?
  kill "$stages_watcher" 2>/dev/null || true
  local now total peak base
  now=$(date +%s)
  total=$((now - stages_started))
  base=$(cat "$TFSERVE_STAGES.base")
  peak=$(sort -n "$TFSERVE_STAGES.disk" | tail -1)
  {
    echo
    echo "| stage | seconds | ended | build folders after (GB) | peak disk written (GB) |"
    echo "|---|---:|---|---:|---:|"
    awk -F'\t' -v base="$base" '{printf "| %s | %d | %s | %.2f | %.2f |\n", $1, $2, $3, $4 / 1e9, ($5 - base) / 1e9}' "$TFSERVE_STAGES"
    echo "| **total** | **$total** | $([ "$status" = 0 ] && echo passed || echo "failed ($status)") | |"
    echo
    echo "peak disk written by this run: $(stages_gb $((peak - base))) GB (the filesystem's use above its start, sampled every 5 s)"
    echo "peak build folders (target/, fuzz/target/): $(stages_gb "$(sort -n "$TFSERVE_STAGES.build" | tail -1)") GB"
  } >&2
  rm -f "$TFSERVE_STAGES" "$TFSERVE_STAGES".*
  exit "$status"
}

if [ -z "${TFSERVE_STAGES:-}" ]; then
  TFSERVE_STAGES="$(mktemp)"
  export TFSERVE_STAGES
  stages_started=$(date +%s)
  stages_disk_used > "$TFSERVE_STAGES.base"
  stages_disk_used > "$TFSERVE_STAGES.disk"
  echo 0 > "$TFSERVE_STAGES.build"
  # The disk's peak, and the build folders' size every minute (du walks
  # hundreds of thousands of files: too slow to run as often as df).
  (
    tick=0
    while sleep 5; do
      stages_disk_used >> "$TFSERVE_STAGES.disk"
      tick=$((tick + 1))
      if [ $((tick % 12)) = 0 ]; then stages_build_size >> "$TFSERVE_STAGES.build"; fi
    done
  ) &
  stages_watcher=$!
  trap stages_print EXIT
fi

stage() {
  local name="$1" started status size samples peak
  shift
  samples=$(wc -l < "$TFSERVE_STAGES.disk")
  echo "=== stage: $name" >&2
  started=$(date +%s)
  status=0
  # In the background and waited for: a command list run as `cmd || ...`
  # would ignore `set -e` in every function it calls.
  "$@" &
  wait $! || status=$?
  size=$(stages_build_size)
  echo "$size" >> "$TFSERVE_STAGES.build"
  stages_disk_used >> "$TFSERVE_STAGES.disk"
  # The disk's peak while this stage ran: the samples taken since it started.
  peak=$(tail -n +"$((samples + 1))" "$TFSERVE_STAGES.disk" | sort -n | tail -1)
  printf '%s\t%d\t%s\t%s\t%s\n' "$name" $(($(date +%s) - started)) \
    "$([ $status = 0 ] && echo passed || echo "failed ($status)")" "$size" "$peak" >> "$TFSERVE_STAGES"
  return $status
}

beside() {
  local name="$1"
  shift
  rm -f "$TFSERVE_STAGES.beside.$name".*
  (
    status=0
    nice -n 19 "$@" > "$TFSERVE_STAGES.beside.$name.log" 2>&1 || status=$?
    echo "$status" > "$TFSERVE_STAGES.beside.$name.status"
  ) &
}

# Polls for the status file: a stage runs in a subshell, which cannot wait
# for its parent's job.
awaited() {
  local name="$1"
  while [ ! -f "$TFSERVE_STAGES.beside.$name.status" ]; do sleep 2; done
  cat "$TFSERVE_STAGES.beside.$name.log"
  return "$(cat "$TFSERVE_STAGES.beside.$name.status")"
}
