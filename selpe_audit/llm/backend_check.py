"""Does llama.cpp run on this machine? Load a model in a child process and generate a little.

A llama.cpp build compiled for the wrong CPU does not raise: it kills the process with
SIGILL at the first unsupported instruction (seen: AMX ``tilezero`` on a VM whose CPU
advertises AMX but whose OS never granted the tile state). So the check runs in a child,
and the parent reads how it ended. The install script, ``selpe-audit doctor`` and anyone
debugging a build use it:

    python -m selpe_audit.llm.backend_check [--model PATH] [--tokens N]

prints one line and exits 0 (runs), 3 (the child died from a signal: a build for another
CPU) or 1 (anything else: missing package, unreadable model, timeout).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

EXIT_SIGNAL = 3
# What the child runs: only llama-cpp-python's high-level API, so the check does not depend
# on the rest of the project being importable. It prints one JSON line.
_CHILD = r"""
import json, sys, time
import llama_cpp
path, n_tokens, n_threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
t0 = time.perf_counter()
llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_threads=n_threads, verbose=False, seed=0)
t1 = time.perf_counter()
llm.create_completion("Triage note:", max_tokens=1)  # prompt evaluation, timed apart
t1 = time.perf_counter()
out = llm.create_completion("Triage note: the patient", max_tokens=n_tokens, temperature=0.0,
                            logit_bias={llm.token_eos(): -100.0})
t2 = time.perf_counter()
gpu = bool(llama_cpp.llama_supports_gpu_offload())
print(json.dumps({"load_s": t1 - t0, "gen_s": t2 - t1, "system_info": info, "gpu_offload": gpu,
                  "tokens": out["usage"]["completion_tokens"],
                  "version": llama_cpp.__version__}))
"""


@dataclass(frozen=True)
class BackendCheck:
    """How the child ended; ``line`` is the one-line summary a person reads."""

    ok: bool
    line: str
    signal: str | None = None
    tokens_per_s: float | None = None
    cpu_features: str = ""
    gpu_offload: bool = False
    version: str = ""


def cpu_flags() -> list[str]:
    """The SIMD-related flags the CPU advertises (from /proc/cpuinfo; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = line.split(":", 1)[1].split()
            return sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c", "sse4")))
    return []


def build_features(system_info: str) -> str:
    """The instruction sets a llama.cpp build uses, from its system-info line (``X = 1``)."""
    on = [part.split("=")[0].strip() for part in system_info.replace("CPU :", "|").split("|")
          if part.strip().endswith("= 1")]
    return " ".join(dict.fromkeys(on))


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_backend(model: str | Path, *, tokens: int = 32, timeout: float = 300.0,
                  env: dict[str, str] | None = None) -> BackendCheck:
    """Load ``model`` and generate ``tokens`` tokens in a child process; never raises."""
    cmd = [sys.executable, "-c", _CHILD, str(model), str(tokens), str(_threads())]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return BackendCheck(False, f"llama.cpp did not finish {tokens} tokens in {timeout:.0f} s")
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        what = {"SIGILL": "an instruction this CPU (or its OS) does not allow: a build for "
                          "another CPU"}.get(name, "a crash inside the native library")
        return BackendCheck(False, f"llama.cpp died with {name} ({what}); CPU flags: "
                                   f"{' '.join(cpu_flags()) or 'unknown'}", signal=name)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1][:300]
        return BackendCheck(False, f"llama.cpp check failed (exit {proc.returncode}): {last}")
    try:
        res = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return BackendCheck(False, "llama.cpp check printed no result")
    tps = res["tokens"] / res["gen_s"] if res["gen_s"] > 0 and res["tokens"] else None
    feats = build_features(res["system_info"])
    speed = (f"{tps:.1f} tokens/s" if tps < 10 else f"{tps:.0f} tokens/s") if tps else \
        "no tokens generated"
    return BackendCheck(True, f"llama.cpp {res['version']} runs: {speed} on {_threads()} "
                              f"threads; build uses {feats or 'no SIMD'}",
                        tokens_per_s=tps, cpu_features=feats, gpu_offload=res["gpu_offload"],
                        version=res["version"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selpe_audit.llm.backend_check",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a GGUF file (default: the bundled model)")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    model = args.model
    if model is None:
        from selpe_audit.errors import UserError
        from selpe_audit.llm.models import default_llm_path

        try:
            model = default_llm_path()
        except UserError as e:
            print(f"llama.cpp check: {e}", file=sys.stderr)
            return 1
    res = check_backend(model, tokens=args.tokens, timeout=args.timeout)
    print(res.line, file=sys.stdout if res.ok else sys.stderr)
    if res.ok:
        return 0
    return EXIT_SIGNAL if res.signal else 1


if __name__ == "__main__":
    sys.exit(main())
