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
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from selpe_audit.llm.models import cpu_quota

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


@dataclass(frozen=True)
class ChildRun:
    """How a child Python ended: its JSON result (last stdout line), or one line saying why
    not, with the signal's name when one killed it."""

    result: dict | None
    error: str = ""
    signal: str | None = None


def run_child(args: list[str], *, timeout: float, env: dict[str, str] | None = None,
              cwd: str | Path | None = None) -> ChildRun:
    """``python ARGS`` in a child process whose last stdout line is JSON; never raises, so a
    native crash (SIGILL, SIGSEGV) becomes a result the parent can report."""
    try:
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=cwd, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ChildRun(None, f"did not finish in {timeout:.0f} s")
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        return ChildRun(None, f"died with {name}", name)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1][:300]
        return ChildRun(None, f"failed (exit {proc.returncode}): {last}")
    try:
        return ChildRun(json.loads(proc.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError):
        return ChildRun(None, "printed no result")


def check_backend(model: str | Path, *, tokens: int = 32, timeout: float = 300.0,
                  env: dict[str, str] | None = None) -> BackendCheck:
    """Load ``model`` and generate ``tokens`` tokens in a child process; never raises."""
    threads = cpu_quota()
    run = run_child(["-c", _CHILD, str(model), str(tokens), str(threads)], timeout=timeout,
                    env=env)
    if run.signal:
        what = {"SIGILL": "an instruction this CPU (or its OS) does not allow: a build for "
                          "another CPU"}.get(run.signal, "a crash inside the native library")
        return BackendCheck(False, f"llama.cpp {run.error} ({what}); CPU flags: "
                                   f"{' '.join(cpu_flags()) or 'unknown'}", signal=run.signal)
    res = run.result
    if res is None:
        return BackendCheck(False, f"llama.cpp check {run.error}")
    tps = res["tokens"] / res["gen_s"] if res["gen_s"] > 0 and res["tokens"] else None
    feats = build_features(res["system_info"])
    speed = (f"{tps:.1f} tokens/s" if tps < 10 else f"{tps:.0f} tokens/s") if tps else \
        "no tokens generated"
    return BackendCheck(True, f"llama.cpp {res['version']} runs: {speed} on {threads} "
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
