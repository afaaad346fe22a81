"""llama.cpp builds side by side: which one runs here, and how fast (issue: AMX SIGILL).

    python -m benchmarks.llama_builds [--repeats R] [--quick] [--wheel NAME=PATH ...]

Candidates: every llama-cpp-python wheel that scripts/install-llama.sh built into its cache
(``native``: -march=native minus AMX; ``portable``: AVX2), plus ``--wheel`` arguments. Each is
unpacked into its own folder and measured in a child process whose ``PYTHONPATH`` puts it
first, so a build that traps (SIGILL) is reported as such instead of ending the run. Per
repeat the builds are interleaved; each child runs the generation benchmark's workload
(the demo prompt, our batched decoder, 4 sequences) unconstrained and under our grammar.
Medians of tokens/s, and each build's ratio to the first one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from selpe_audit.llm.backend_check import run_child

ROOT = Path(__file__).resolve().parents[1]
UNPACKED = Path(__file__).parent / ".cache" / "llama-builds"


def wheel_cache() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return Path(os.environ.get("LLAMA_WHEEL_CACHE", default / "selpe-audit" / "llama-wheels"))


def candidates(extra: Sequence[str]) -> dict[str, Path]:
    """name -> wheel: install-llama.sh's cache (folder ``<variant>-<key>``), then ``--wheel``."""
    found: dict[str, Path] = {}
    for whl in sorted(wheel_cache().glob("*/llama_cpp_python-*.whl")):
        found.setdefault(whl.parent.name.rsplit("-", 1)[0], whl)
    for item in extra:
        name, _, path = item.partition("=")
        found[name] = Path(path)
    return found


def unpack(name: str, wheel: Path) -> Path:
    target = UNPACKED / name
    stamp = target / ".wheel"
    if not (stamp.exists() and stamp.read_text() == str(wheel)):
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade",
                        "--target", str(target), str(wheel)], check=True)
        stamp.write_text(str(wheel))
    return target


def child(per_repeat: int) -> dict[str, Any]:
    """In the child: one unconstrained and one constrained run of the generation workload."""
    import llama_cpp

    from benchmarks import generation as g
    from selpe_audit.llm.backend_check import build_features
    from selpe_audit.llm.generation import GenerationConfig
    from selpe_audit.llm.models import load_llm
    from selpe_audit.llm.prompts import single_stage_prompt
    from selpe_audit.schema import demo_schema_path, load_schema

    schema = load_schema(demo_schema_path())
    cfg = GenerationConfig(n_parallel=4, seed=0)
    llm = load_llm(n_seq=4, n_ctx=8192)
    pos, neg = g.class_examples(schema, g.CLASS)
    prompt = llm.tokenize(single_stage_prompt(schema, class_value=g.CLASS, positives=pos,
                                              negatives=neg), bos=True)
    g.decoder_run(llm, schema, cfg, prompt, 1, False, False)  # warm-up
    un, _ = g.decoder_run(llm, schema, cfg, prompt, per_repeat, False, False)
    co, _ = g.decoder_run(llm, schema, cfg, prompt, per_repeat, True, False)
    llm.close()
    return {"unconstrained": un.tokens_per_s, "constrained": co.tokens_per_s,
            "features": build_features(llama_cpp.llama_print_system_info().decode()),
            "from": str(Path(llama_cpp.__file__).parent)}


def _measure(path: Path | None, per_repeat: int) -> dict[str, Any]:
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path) if path else "", str(ROOT)) if p)
    run = run_child(["-m", "benchmarks.llama_builds", "--child", str(per_repeat)],
                    timeout=1800, env=env, cwd=ROOT)
    if run.signal:
        return {"crashed": run.signal}
    return run.result if run.result is not None else {"error": run.error}


def run(quick: bool = False, repeats: int = 3, per_repeat: int = 8,
        extra: Sequence[str] = ()) -> dict[str, Any]:
    builds: dict[str, Path | None] = {"installed": None}
    if not quick:
        builds |= {name: unpack(name, whl) for name, whl in candidates(extra).items()}
    else:
        repeats, per_repeat = 1, 2
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in builds}
    for r in range(repeats):
        for name, path in builds.items():
            res = _measure(path, per_repeat)
            samples[name].append(res)
            print(f"repeat {r + 1}/{repeats} {name}: {res}", file=sys.stderr, flush=True)
    rows: dict[str, Any] = {}
    for name, got in samples.items():
        bad = next((s for s in got if "crashed" in s or "error" in s), None)
        if bad:
            rows[name] = bad
            continue
        rows[name] = {"unconstrained_tokens_per_s": statistics.median(
            s["unconstrained"] for s in got), "constrained_tokens_per_s": statistics.median(
            s["constrained"] for s in got), "features": got[0]["features"]}
    base = next((v for v in rows.values() if "unconstrained_tokens_per_s" in v), None)
    lines = ["| build | runs here | unconstrained tokens/s | constrained tokens/s | ratio | "
             "CPU features |", "|---|---|---|---|---|---|"]
    for name, v in rows.items():
        if "unconstrained_tokens_per_s" not in v:
            lines.append(f"| {name} | no: {v.get('crashed') or v.get('error')} | | | | |")
            continue
        ratio = v["unconstrained_tokens_per_s"] / base["unconstrained_tokens_per_s"]
        lines.append(f"| {name} | yes | {v['unconstrained_tokens_per_s']:.1f} | "
                     f"{v['constrained_tokens_per_s']:.1f} | {ratio:.2f} | {v['features']} |")
    table = "\n".join(lines)
    print(table)
    return {"builds": rows, "repeats": repeats, "records_per_repeat": per_repeat,
            "load_average": os.getloadavg()[0], "table": table}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--wheel", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child)))
        return 0
    res = run(args.quick, args.repeats, extra=args.wheel)
    if args.json:
        print(json.dumps(res, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
