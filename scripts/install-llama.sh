#!/usr/bin/env bash
# llama-cpp-python for this machine, proven to run here. Called by install.sh in two steps:
#
#   scripts/install-llama.sh install   a wheel for LLAMA_BUILD into $VENV (cached or built)
#   scripts/install-llama.sh verify    load the bundled model in a child process and generate;
#                                      if the child dies from a signal (a build for another CPU),
#                                      rebuild portable, uncached, and verify again
#
# Builds (LLAMA_BUILD, measured in benchmarks/RESULTS.md "llama.cpp builds"):
#   native    default: -march=native, minus AMX (-mno-amx-tile/int8/bf16). A VM can advertise
#             AMX without the OS granting the tile state: the first AMX instruction then dies
#             with SIGILL (seen on a Xeon VM). Everything else this CPU has stays on.
#   portable  -DGGML_NATIVE=OFF: x86-64 with AVX2/FMA/F16C, for images and wheelhouses that run
#             on other CPUs than the builder's, and the fallback when native crashes.
#   (GPU=1 adds the CUDA backend to the portable build: the decode image.)
# Every build is -DGGML_OPENMP=OFF (ggml's own thread pool; no libgomp in the images).
#
# Wheels are kept in our own cache, keyed by the pin, the build arguments, the compiler and,
# for native builds, this CPU's flags: pip's wheel cache is keyed by the source archive alone
# and would hand a build for one CPU (or with other arguments) to another. A cached wheel that
# crashes is deleted, never reused. The build's output goes to a log; its path is printed on
# failure. LLAMA_DRY_RUN=1 prints the build commands instead of running them (tests).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PY="$VENV/bin/python"
GPU=${GPU:-0}
LLAMA_BUILD=${LLAMA_BUILD:-native}
[ "$GPU" = "1" ] && LLAMA_BUILD=portable
CACHE=${LLAMA_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/selpe-audit/llama-wheels}
STAMP=${LLAMA_STAMP:-$VENV/.llama-build}
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
PIP=("$PY" -m pip --disable-pip-version-check)

llama_pin() {
  "$PY" -c 'import tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
print(next(d.split("#")[0].strip() for d in deps if d.startswith("llama-cpp-python")))'
}

cpu_flags() { grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | xargs -n1 \
  | grep -E '^(avx|amx|fma|f16c|sse4)' | sort | xargs || true; }

# The build's arguments, one line each: CMAKE_ARGS, CFLAGS (also CXXFLAGS).
build_args() {
  local cmake="-DGGML_OPENMP=OFF" cflags=""
  case "$1" in
    native)   cmake="-DGGML_NATIVE=ON $cmake"; cflags="$NO_AMX" ;;
    portable) cmake="-DGGML_NATIVE=OFF $cmake" ;;
    *) echo "error: LLAMA_BUILD must be native or portable, not '$1'" >&2; exit 2 ;;
  esac
  [ "$GPU" = "1" ] && cmake="$cmake -DGGML_CUDA=on ${CUDA_CMAKE_ARGS:-}"
  printf '%s\n%s\n' "$cmake" "$cflags"
}

cache_key() {  # variant -> folder name in the cache
  local args cpu=""
  args=$(build_args "$1")
  [ "$1" = "native" ] && cpu=$(cpu_flags)
  printf '%s|%s|%s|%s' "$(llama_pin)" "$args" "$(cc --version 2>/dev/null | head -1)" "$cpu" \
    | sha256sum | cut -c1-16
}

# Build (or take from the cache) the wheel for a variant; prints the wheel's path.
wheel_for() {
  local variant=$1 fresh=${2:-0} dir args cmake cflags log
  dir="$CACHE/$variant-$(cache_key "$variant")"
  if [ "$fresh" = "1" ]; then rm -rf "$dir"; fi
  if compgen -G "$dir/llama_cpp_python-*.whl" >/dev/null; then
    ls "$dir"/llama_cpp_python-*.whl | head -1
    return
  fi
  args=$(build_args "$variant")
  cmake=$(sed -n 1p <<<"$args")
  cflags=$(sed -n 2p <<<"$args")
  if [ "${LLAMA_DRY_RUN:-0}" = "1" ]; then
    echo "dry run: would build CMAKE_ARGS='$cmake' CFLAGS='$cflags' into $dir" >&2
    echo "$dir/dry-run.whl"
    return
  fi
  mkdir -p "$dir"
  log="$dir/build.log"
  echo "building llama-cpp-python ($variant: $cmake${cflags:+ $cflags}), about 7 min on" \
    "2 cores, once; log: $log" >&2
  if ! CMAKE_ARGS="$cmake" CFLAGS="$cflags" CXXFLAGS="$cflags" FORCE_CMAKE=1 \
      CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
      "${PIP[@]}" wheel --no-deps --no-cache-dir -w "$dir.tmp" "$(llama_pin)" >"$log" 2>&1; then
    rm -rf "$dir.tmp"
    echo "error: building llama-cpp-python ($variant) failed; see $log" >&2
    exit 1
  fi
  mv "$dir.tmp"/llama_cpp_python-*.whl "$dir/"
  rm -rf "$dir.tmp"
  ls "$dir"/llama_cpp_python-*.whl | head -1
}

install_wheel() {  # variant [fresh]
  local wheel
  wheel=$(wheel_for "$@")
  if [ "${LLAMA_DRY_RUN:-0}" != "1" ]; then
    "${PIP[@]}" install -q --no-deps --force-reinstall "$wheel"
  fi
  printf '%s\n%s\n' "$1" "$wheel" >"$STAMP"
}

do_install() {
  if [ -n "${WHEELHOUSE:-}" ]; then
    # Offline: the wheelhouse's build (portable) is the only one there is.
    "${PIP[@]}" install -q --no-index --find-links "$WHEELHOUSE" "$(llama_pin)"
    printf 'wheelhouse\n%s\n' "$WHEELHOUSE" >"$STAMP"
    return
  fi
  local want
  want=$(wheel_for "$LLAMA_BUILD")
  if [ "$(sed -n 2p "$STAMP" 2>/dev/null)" = "$want" ] \
      && "$PY" -c 'import importlib.util as u, sys; sys.exit(not u.find_spec("llama_cpp"))'; then
    return  # this very wheel is installed already
  fi
  install_wheel "$LLAMA_BUILD"
  if [ "$GPU" = "1" ] && [ "${LLAMA_DRY_RUN:-0}" != "1" ]; then
    # Look for the CUDA backend's library: importing llama_cpp would need a driver, which a
    # build container does not have.
    local lib
    lib=$("$PY" -c 'import importlib.util as u, pathlib
print(pathlib.Path(u.find_spec("llama_cpp").origin).parent / "lib")')
    compgen -G "$lib/libggml-cuda.so*" >/dev/null \
      || { echo "error: llama-cpp-python built without CUDA (is nvcc on PATH?)" >&2; exit 1; }
  fi
}

do_verify() {
  if [ "$GPU" = "1" ] && ! command -v nvidia-smi >/dev/null; then
    echo "note: no GPU driver here: llama.cpp (CUDA build) not run-checked"
    return
  fi
  local out line rc variant
  variant=$(sed -n 1p "$STAMP" 2>/dev/null || echo "$LLAMA_BUILD")
  for attempt in 1 2; do
    rc=0
    out=$(HF_HUB_OFFLINE=1 "$PY" -m selpe_audit.llm.backend_check 2>&1) || rc=$?
    line=$(tail -1 <<<"$out")
    if [ "$rc" = "0" ]; then
      echo "$line"
      return
    fi
    if [ "$rc" != "3" ] || [ "$attempt" = "2" ] || [ "$variant" = "wheelhouse" ]; then
      break
    fi
    # Died from a signal: this build does not run here. Never keep it; rebuild portable.
    rm -rf "$(dirname "$(sed -n 2p "$STAMP")")"
    echo "llama.cpp ($variant build) crashed here: $line; rebuilding with the portable" \
      "build, uncached" >&2
    variant=portable
    install_wheel portable 1
  done
  echo "error: llama.cpp does not run on this machine: $line (CPU flags: $(cpu_flags);" \
    "build: $variant, $(build_args "${variant/wheelhouse/portable}" | xargs))" >&2
  exit 1
}

case "${1:-}" in
  install) do_install ;;
  verify) do_verify ;;
  *) echo "usage: scripts/install-llama.sh install|verify" >&2; exit 2 ;;
esac
