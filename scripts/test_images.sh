#!/usr/bin/env bash
# Builds the CPU image and runs it as users do, with podman (Debian's podman,
# buildah and mmdebstrap; Docker works the same way with `docker`):
#   1. a local debian:bookworm-slim base (mmdebstrap | podman import) when no
#      registry has one;
#   2. the CPU bundle (scripts/package.py) and `podman build -f Dockerfile.cpu`;
#   3. the image's default command: README's "Try it" curl examples, exactly;
#   4. `podman run IMAGE serve` with a model at /opt/ml/model: SageMaker's
#      /ping and /invocations (JSON and CSV);
#   5. the image as KServe runs it (tensorflow_model_server --port=9000
#      --rest_api_port=8080 --model_name=... --model_base_path=...);
#   6. the non-root user, the HEALTHCHECK, and `podman stop` (SIGTERM to
#      PID 1): a drain and exit 0;
#   7. the image's size.
# With --arm64, all of this for the linux/arm64 image instead, from the
# cross-built ARM64 bundle and an arm64 base, run under qemu-user-static's
# binfmt handler (registered here from Debian's /usr/lib/binfmt.d when the
# kernel lacks it).
# Needs root (or a rootless podman set-up) and ~3 GB of disk. Usage:
#   scripts/test_images.sh [--arm64] [--gpu-build]   (--gpu-build also builds Dockerfile.gpu and runs the examples against it)
set -euo pipefail
cd "$(dirname "$0")/.."
ARCH=amd64
GPU_BUILD=0
for arg in "$@"; do
  case "$arg" in
    --arm64) ARCH=arm64 ;;
    --gpu-build) GPU_BUILD=1 ;;
    *) echo "usage: $0 [--arm64] [--gpu-build]" >&2; exit 2 ;;
  esac
done
PODMAN=(podman --storage-driver vfs)
# Limits below podman's defaults (sandboxes refuse raising them); healthchecks
# run on demand below (their timers need systemd).
RUN=("${PODMAN[@]}" run --runtime runc --network host --ulimit nofile=16384:16384 --ulimit nproc=8192:8192
     --health-interval disable)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
started=$(date +%s)
say() { printf '[test_images] %s\n' "$*" >&2; }
if [ "$ARCH" = arm64 ]; then
  IMAGE=tfserve:cpu-arm64
  # Its own name: one tag cannot hold both architectures' bases.
  BASE=localhost/debian-arm64:bookworm-slim
  PACKAGE=(--arch aarch64)
  if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
    cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register
  fi
else
  IMAGE=tfserve:cpu
  BASE=docker.io/library/debian:bookworm-slim
  PACKAGE=(--cpu)
fi

if ! "${PODMAN[@]}" image exists "$BASE"; then
  say "making $BASE ($ARCH) with mmdebstrap (no registry needed)"
  mmdebstrap --quiet --arch="$ARCH" --variant=minbase --include=ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    bookworm - | "${PODMAN[@]}" import --arch "$ARCH" - "$BASE" >/dev/null
fi

python3 scripts/package.py "${PACKAGE[@]}" --no-archive
say "building $IMAGE"
"${PODMAN[@]}" build --format docker --isolation chroot --pull=never -f Dockerfile.cpu --platform "linux/$ARCH" \
  --build-arg "BASE=$BASE" --build-arg "VERSION=$VERSION" -t "$IMAGE" .
arch=$("${PODMAN[@]}" run --rm --runtime runc --network host --ulimit nofile=16384:16384 --ulimit nproc=8192:8192 \
  --entrypoint /usr/bin/uname "$IMAGE" -m)
say "$IMAGE runs as $arch"

cleanup() { "${PODMAN[@]}" rm -f -i -t 0 tfserve-test tfserve-sagemaker tfserve-kserve >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup

wait_for() {  # URL: until it answers 200 (60 s)
  for _ in $(seq 1 240); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
    sleep 0.25
  done
  say "no answer from $1"; return 1
}

readme_examples() {  # IMAGE: its default command answers README's curl examples, as uid 1000, and stops with 0
  say "$1, default command: README's curl examples"
  "${RUN[@]}" -d --name tfserve-test "$1" >/dev/null
  wait_for http://127.0.0.1:8501/v2/health/ready
  python3 - <<'EOF'
import sys
sys.path.insert(0, "scripts")
import bundle_smoke
examples, _ = bundle_smoke.readme_examples("## Try it")
failures = bundle_smoke.check_rest(examples, "localhost:8501")
if failures:
    sys.exit("\n\n".join(failures))
print(f"{len(examples)} README examples answered as README shows")
EOF
  user=$("${PODMAN[@]}" exec tfserve-test id -u)
  [ "$user" = 1000 ] || { say "runs as uid $user, not 1000"; exit 1; }
  "${PODMAN[@]}" healthcheck run tfserve-test && say "HEALTHCHECK: healthy; user: uid $user"
  stop_started=$(date +%s%N)
  "${PODMAN[@]}" stop -t 30 tfserve-test >/dev/null
  code=$("${PODMAN[@]}" inspect tfserve-test --format '{{.State.ExitCode}}')
  say "podman stop (SIGTERM to tini, PID 1): exit $code after $(( ($(date +%s%N) - stop_started) / 1000000 )) ms"
  [ "$code" = 0 ]
  "${PODMAN[@]}" rm -f tfserve-test >/dev/null
}

readme_examples "$IMAGE"

say "SageMaker: podman run IMAGE serve"
"${RUN[@]}" -d --name tfserve-sagemaker -v "$PWD/models/half_plus_three:/opt/ml/model:ro" "$IMAGE" serve >/dev/null
wait_for http://127.0.0.1:8080/ping
curl -fsS -o /dev/null -w "GET /ping: %{http_code}\n" http://127.0.0.1:8080/ping
json=$(curl -fsS -H 'Content-Type: application/json' -d '{"instances": [1.0, 2.0, 5.0]}' http://127.0.0.1:8080/invocations)
csv=$(curl -fsS -H 'Content-Type: text/csv' --data-binary $'1.0\n2.0' http://127.0.0.1:8080/invocations)
echo "POST /invocations (JSON): $json"
echo "POST /invocations (CSV):  $csv"
[ "$json" = '{"predictions":[3.5,4.0,5.5]}' ] && [ "$csv" = '{"predictions":[3.5,4.0]}' ]
"${PODMAN[@]}" stop -t 30 tfserve-sagemaker >/dev/null

say "KServe: the runtime's command line"
"${RUN[@]}" -d --name tfserve-kserve --entrypoint /usr/local/bin/tensorflow_model_server "$IMAGE" \
  --model_name=half_plus_two --port=9000 --rest_api_port=8080 --model_base_path=/models/half_plus_two \
  --rest_api_timeout_in_ms=60000 >/dev/null
wait_for http://127.0.0.1:8080/v2/health/ready
answer=$(curl -fsS -d '{"instances": [1.0, 2.0, 5.0]}' http://127.0.0.1:8080/v1/models/half_plus_two:predict)
echo "KServe v1 predict: $answer"
[ "$answer" = '{"predictions":[2.5,3.0,4.5]}' ]
"${PODMAN[@]}" stop -t 30 tfserve-kserve >/dev/null

size=$("${PODMAN[@]}" image inspect "$IMAGE" --format '{{.Size}}')
echo "image $IMAGE: $((size / 1000000)) MB"
if [ "$GPU_BUILD" = 1 ]; then
  python3 scripts/package.py --gpu --no-archive
  "${PODMAN[@]}" build --format docker --isolation chroot --pull=never -f Dockerfile.gpu \
    --build-arg "BUNDLE=dist/tfserve-$VERSION-linux-x86_64-gpu" -t tfserve:gpu .
  size=$("${PODMAN[@]}" image inspect tfserve:gpu --format '{{.Size}}')
  echo "image tfserve:gpu: $((size / 1000000)) MB"
  # On a host without a GPU, TensorFlow's CUDA build serves on the CPU: the
  # image, its libraries and its entrypoint are what this checks. With the
  # NVIDIA container toolkit, add `--device nvidia.com/gpu=all` to RUN.
  "${RUN[@]}" --rm tfserve:gpu --version
  readme_examples tfserve:gpu
fi
say "passed in $(( $(date +%s) - started )) s"
