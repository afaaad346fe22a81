#!/usr/bin/env bash
# One install script for everyone: the README's commands (via make), CI and the Containerfile.
#
#   scripts/install.sh                 venv in .venv, project editable, dev tools
#   VENV=/opt/venv MODE=wheel DEV=0 scripts/install.sh   (containers: non-editable, no dev tools)
#   GPU=1 scripts/install.sh           llama-cpp-python built with CUDA (decode image)
#   WHEELHOUSE=dir scripts/install.sh  offline: install only from a wheelhouse (see wheelhouse.sh)
#   TORCH_INDEX_URL=url scripts/install.sh   extra index for torch alone (containers: the CPU
#                                      build, https://download.pytorch.org/whl/cpu)
#
# torch is pinned to 2.13.0 first: that is the CPU build on local disk; an unpinned torch
# pulls a multi-GB CUDA build. llama-cpp-python compiles from source (~7 min on 2 cores);
# pip caches the built wheel, so later runs on the same machine are fast. A second run on an
# installed venv takes seconds: pip and torch are checked before anything is fetched, and only
# the project itself is rebuilt.
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
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)

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
  "${PIP[@]}" install -q "${SOURCE[@]}" "pip>=24"
fi

if [ "$GPU" = "1" ]; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DGGML_CUDA=on"
  export FORCE_CMAKE=1
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

"${PIP[@]}" install -q "${SOURCE[@]}" "${TORCH_SOURCE[@]}" "torch==$TORCH_VERSION"

target="."
[ "$DEV" = "1" ] && target=".[dev,bench]"
if [ "$MODE" = "editable" ]; then
  "${PIP[@]}" install -q "${SOURCE[@]}" -e "$target"
else
  "${PIP[@]}" install -q "${SOURCE[@]}" "$target"
fi

if [ "$GPU" = "1" ]; then
  # pip's wheel cache is keyed by the source archive, not by CMAKE_ARGS, and an installed
  # llama-cpp-python satisfies the pin whatever it was built with: a CPU build made earlier on
  # this machine would be kept silently. Look for the CUDA backend's library (importing
  # llama_cpp would need a driver, which a build container does not have) and rebuild once,
  # uncached, if it is missing.
  llama_lib=$("$PY" -c 'import importlib.util as u, pathlib
print(pathlib.Path(u.find_spec("llama_cpp").origin).parent / "lib")')
  if ! compgen -G "$llama_lib/libggml-cuda.so*" >/dev/null; then
    llama_pin=$("$PY" -c 'import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(next(d for d in deps if d.startswith("llama-cpp-python")))')
    if [ -n "${WHEELHOUSE:-}" ]; then
      echo "error: GPU=1, but the wheelhouse's llama-cpp-python is a CPU build" >&2
      exit 1
    fi
    "${PIP[@]}" install -q --no-cache-dir --force-reinstall --no-deps "$llama_pin"
    compgen -G "$llama_lib/libggml-cuda.so*" >/dev/null \
      || { echo "error: llama-cpp-python built without CUDA (is nvcc on PATH?)" >&2; exit 1; }
  fi
fi

# Assemble the default GGUF once into the model cache, SHA-256 checked (no network needed).
# Its mtime is then cut to whole seconds and the hash re-recorded: image layers (and some
# copies) keep only whole seconds, and the cache's record is keyed by size and mtime, so a
# baked model must not look changed in the image, where the cache is read-only.
HF_HUB_OFFLINE=1 "$PY" - <<'PY' || echo "note: default model not prepared yet"
import importlib.util
import os

if importlib.util.find_spec("selpe_audit.llm.models"):
    from selpe_audit.llm.models import default_llm_path

    path = default_llm_path()
    seconds = path.stat().st_mtime_ns // 1_000_000_000
    if path.stat().st_mtime_ns != seconds * 1_000_000_000:
        os.utime(path, ns=(seconds * 1_000_000_000, seconds * 1_000_000_000))
        path = default_llm_path()
    print("default model:", path)
PY
echo "installed selpe-audit into $VENV"
