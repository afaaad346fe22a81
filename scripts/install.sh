#!/usr/bin/env bash
# One install script for everyone: the README's commands (via make), CI and the Containerfile.
#
#   scripts/install.sh                 venv in .venv, project editable, dev tools
#   VENV=/opt/venv MODE=wheel DEV=0 scripts/install.sh   (containers: non-editable, no dev tools)
#   GPU=1 scripts/install.sh           llama-cpp-python built with CUDA (decode image)
#   EXTRAS=cluster scripts/install.sh  optional extras besides DEV's (comma-separated; the decode
#                                      image: cluster, for decode --ray). DEV=1 installs dev,
#                                      bench, cluster and report (the tests use all four)
#   LLAMA_BUILD=portable scripts/install.sh   llama.cpp for any AVX2 CPU (images, wheelhouses);
#                                      default: native for this CPU, minus AMX (install-llama.sh)
#   WHEELHOUSE=dir scripts/install.sh  offline: install only from a wheelhouse (see wheelhouse.sh)
#   TORCH_INDEX_URL=url scripts/install.sh   extra index for torch alone (containers: the CPU
#                                      build, https://download.pytorch.org/whl/cpu)
#
# torch is pinned to 2.13.0 first: that is the CPU build on local disk; an unpinned torch
# pulls a multi-GB CUDA build. llama-cpp-python is built for this machine by
# scripts/install-llama.sh (~7 min on 2 cores, cached afterwards) and then proven to run here:
# the bundled model generates a few tokens in a child process, and a build that dies (SIGILL)
# is replaced by the portable one. A second run on an installed venv takes seconds.
#
# Quiet unless something fails: each step's output goes to $VENV/install.log, whose path (and
# last lines) are printed when a step fails.
set -euo pipefail

# A relative WHEELHOUSE means relative to where the caller stands, so resolve it before cd.
if [ -n "${WHEELHOUSE:-}" ]; then
  WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
fi
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
MODE=${MODE:-editable}
DEV=${DEV:-1}
GPU=${GPU:-0}
EXTRAS=${EXTRAS:-}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
LOG="$VENV/install.log"
: >"$LOG"

# Run a step with its output in the log; on failure show where to look.
step() {
  local what=$1
  shift
  if ! "$@" >>"$LOG" 2>&1; then
    echo "error: $what failed; last lines of $LOG:" >&2
    tail -n 15 "$LOG" >&2
    exit 1
  fi
}

# Where packages come from. Offline, the wheelhouse is the only source for everything: pip
# itself, torch, every dependency and the build backend (setuptools, wheel) that pip puts in its
# isolated build environment for the project (pip hands --no-index/--find-links down to it).
SOURCE=()
TORCH_SOURCE=()
if [ -n "${WHEELHOUSE:-}" ]; then
  SOURCE=(--no-index --find-links "$WHEELHOUSE")
  # A corrupted or incomplete carry should stop here, not halfway through an install.
  if [ -f "$WHEELHOUSE/SHA256SUMS" ]; then
    (cd "$WHEELHOUSE" && sha256sum --quiet --strict -c SHA256SUMS) \
      || { echo "error: $WHEELHOUSE does not match its SHA256SUMS" >&2; exit 1; }
  fi
elif [ -n "$TORCH_INDEX_URL" ]; then
  # Only for torch: PyPI's torch for Linux is the CUDA build with GBs of nvidia-* wheels.
  TORCH_SOURCE=(--extra-index-url "$TORCH_INDEX_URL")
fi

# pip>=24 only when the venv's pip is older (python3.11's ensurepip brings 23.x). Checking the
# version first keeps a second run off the network; offline the wheel comes from the wheelhouse.
if ! "$PY" -c 'import sys, pip; sys.exit(int(pip.__version__.split(".")[0]) < 24)'; then
  step "upgrading pip" "${PIP[@]}" install "${SOURCE[@]}" "pip>=24"
fi

step "installing torch" "${PIP[@]}" install "${SOURCE[@]}" "${TORCH_SOURCE[@]}" \
  "torch==$TORCH_VERSION"
# Before the project, so that its pin is met by the build made for this machine.
VENV="$VENV" GPU="$GPU" scripts/install-llama.sh install

extras=$EXTRAS
[ "$DEV" = "1" ] && extras="dev,bench,cluster,report${EXTRAS:+,$EXTRAS}"
target="."
[ -n "$extras" ] && target=".[$extras]"
editable=()
[ "$MODE" = "editable" ] && editable=(-e)
step "installing selpe-audit and its dependencies" \
  "${PIP[@]}" install "${SOURCE[@]}" "${editable[@]}" "$target"

# Assemble the default GGUF once into the model cache, SHA-256 checked (no network needed).
# Its mtime is then cut to whole seconds and the hash re-recorded: image layers (and some
# copies) keep only whole seconds, and the cache's record is keyed by size and mtime, so a
# baked model must not look changed in the image, where the cache is read-only.
HF_HUB_OFFLINE=1 "$PY" - <<'PY'
import os

from selpe_audit.llm.models import default_llm_path

path = default_llm_path()
seconds = path.stat().st_mtime_ns // 1_000_000_000
if path.stat().st_mtime_ns != seconds * 1_000_000_000:
    os.utime(path, ns=(seconds * 1_000_000_000, seconds * 1_000_000_000))
    path = default_llm_path()
print("default model:", path)
PY
# Prove the llama.cpp build runs on this machine (rebuilds portable if it crashes).
VENV="$VENV" GPU="$GPU" scripts/install-llama.sh verify
echo "installed selpe-audit into $VENV"
