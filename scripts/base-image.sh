#!/usr/bin/env bash
# The base of selpe-audit's images, made here from Debian's own packages: no registry, no
# image pulled from anywhere (docs/deployment.md).
#
#   scripts/base-image.sh        # or `make base-image`; needs root, debootstrap and podman
#
# debootstrap installs Debian bookworm (minbase: the essential packages and apt) plus what the
# images need: Python 3.11 with venv, passwd (useradd for the image's user) and libstdc++ (torch
# and llama.cpp link it). Package lists, caches, logs and docs are dropped, and the folder is
# imported as $IMAGE (default localhost/selpe-audit-base:bookworm). A second run replaces it.
#
# Environment:
#   IMAGE=name        the image to write
#   MIRROR=url        the Debian mirror (default http://deb.debian.org/debian; inside an
#                     enclave, its own mirror)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/selpe-audit-base:bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
PACKAGES=python3,python3-venv,passwd,libstdc++6

for tool in debootstrap podman; do
  command -v "$tool" >/dev/null || {
    echo "error: $tool is not installed; on Debian: apt-get install $tool" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "error: debootstrap needs root; run it with sudo" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
log="$root.log"
echo "debootstrap $SUITE (minbase + $PACKAGES) from $MIRROR; log: $log"
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root/fs" "$MIRROR" \
    >"$log" 2>&1; then
  echo "error: debootstrap failed; last lines of $log:" >&2
  tail -n 15 "$log" >&2
  exit 1
fi
rm -rf "$root"/fs/var/lib/apt/lists/* "$root"/fs/var/cache/apt/* "$root"/fs/var/log/* \
  "$root"/fs/usr/share/doc/* "$root"/fs/usr/share/man/* "$root"/fs/usr/share/info/* \
  "$root"/fs/tmp/*
# The images' Python: the project needs 3.11 and its wheels are built for it.
chroot "$root/fs" python3 -c 'import sys, venv; assert sys.version_info[:2] == (3, 11), sys.version'
tar --numeric-owner --xattrs -C "$root/fs" -c . \
  | podman import --quiet --change 'CMD ["/bin/bash"]' \
      --message "Debian $SUITE minbase + $PACKAGES (scripts/base-image.sh)" - "$IMAGE" >/dev/null
rm -f "$log"
echo "imported $IMAGE ($(podman image inspect --format '{{.Size}}' "$IMAGE" | numfmt --to=iec))"
