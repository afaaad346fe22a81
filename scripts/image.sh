#!/usr/bin/env bash
# Build an image of selpe-audit here, with podman, from the local Debian base, every package
# from the wheelhouse and no network inside the build (docs/deployment.md).
#
#   scripts/image.sh release       # make image:        localhost/selpe-audit:release
#   scripts/image.sh decode-cpu    # make image-decode: localhost/selpe-audit:decode-cpu
#
# Steps, each skipped when already done: the base image (scripts/base-image.sh), the
# wheelhouse with a portable llama.cpp (scripts/wheelhouse.sh, ~7 min once), then
# `podman build` of the target. The build runs in a network namespace of its own
# (`unshare --net`): podman's --network=none cannot be combined with --isolation=chroot, the
# isolation this kind of VM allows (its cgroups refuse podman's runtime). Needs root.
#
# Environment:
#   BASE_IMAGE=name   the base (default localhost/selpe-audit-base:bookworm)
#   TAG=name          the image to write (default localhost/selpe-audit:TARGET)
#   NO_CACHE=1        rebuild every layer (podman build --no-cache)
#   WHEELHOUSE=dir    the wheelhouse folder inside this checkout (default wheelhouse)
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${1:-release}
BASE_IMAGE=${BASE_IMAGE:-localhost/selpe-audit-base:bookworm}
TAG=${TAG:-localhost/selpe-audit:$TARGET}
WHEELHOUSE=${WHEELHOUSE:-wheelhouse}

args=(--isolation=chroot --file Containerfile --build-arg WHEELS=offline
      --build-arg PYTHON_IMAGE="$BASE_IMAGE" --tag "$TAG")
case $TARGET in
  release) args+=(--target release) ;;
  decode-cpu) args+=(--target decode --build-arg DECODE=cpu --build-arg DECODE_BASE="$BASE_IMAGE"
                     --build-arg DECODE_GPU_LAYERS=0) ;;
  *) echo "usage: scripts/image.sh release|decode-cpu" >&2; exit 2 ;;
esac
[ "${NO_CACHE:-0}" = 1 ] && args+=(--no-cache)
[ "$WHEELHOUSE" = wheelhouse ] || {
  echo "error: the Containerfile copies ./wheelhouse; WHEELHOUSE must be wheelhouse" >&2; exit 2; }

command -v podman >/dev/null || {
  echo "error: podman is not installed; on Debian: apt-get install podman" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "error: the image build needs root (unshare --net)" >&2; exit 1; }

podman image exists "$BASE_IMAGE" || IMAGE="$BASE_IMAGE" scripts/base-image.sh
mkdir -p out
if ! LLAMA_BUILD=portable scripts/wheelhouse.sh "$WHEELHOUSE" >out/wheelhouse.log 2>&1; then
  echo "error: the wheelhouse failed; last lines of out/wheelhouse.log:" >&2
  tail -n 15 out/wheelhouse.log >&2
  exit 1
fi
log=out/image-$TARGET.log
start=$SECONDS
echo "building $TAG (no network; log: $log)"
if ! unshare --net podman build "${args[@]}" . >"$log" 2>&1; then
  echo "error: podman build failed; last lines of $log:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi
size=$(podman image inspect --format '{{.Size}}' "$TAG")
echo "built $TAG in $((SECONDS - start)) s: $(numfmt --to=iec "$size")"
printf '{"target": "%s", "tag": "%s", "seconds": %d, "bytes": %d}\n' \
  "$TARGET" "$TAG" "$((SECONDS - start))" "$size" >"out/image-$TARGET.json"
