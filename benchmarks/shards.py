"""Decode in shards: one process against a local Ray of 2 workers, and the merge's cost.

    python -m benchmarks --only shards [--quick] [--set n=N] [--set llm_n=N]

On the demo pool-mode artifact (`benchmarks.decode.build_artifact`), each decoder decodes
the same N rows twice: in one process (`decode.pipeline.run_decode`, no shards) and as 2
shards on a local Ray of 2 CPUs (`decode.cluster.run_on_ray`: a task per shard, then the
merge). Timed from the call to the written output and provenance (models loaded inside;
Ray's own start-up, once, is reported apart): candidates per second of wall time, and the
merge's seconds (read and check the shard files, write the output, fidelity on the merged
rows) from the merged provenance.

Decoders: the model decoder at a large N (SelectTop off - embedding 2N candidate texts on
the CPU would be the whole cost - the fit on) and the hybrid LLM decoder at a small N (the
default decode: SelectTop and the fit on). On a 2-core machine the two workers share the
cores with each other (and each llama.cpp context uses every core it sees), so the LLM row
shows what Ray costs more than what it gains; on a cluster each worker has its own GPU.

``--quick``: model N = 4,000, LLM N = 2, the smaller release.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rich.console import Console

from benchmarks.decode import build_artifact
from benchmarks.suite import Benchmark
from decode.cluster import run_on_ray
from decode.pipeline import DecodeSettings, run_decode

WORKERS = 2


def _timed(call: Any) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    doc = call().provenance_doc
    return doc, time.perf_counter() - t0


def compare(art: Path, pub: Path, folder: Path, name: str,
            settings: DecodeSettings) -> dict[str, Any]:
    """One decoder: one process, then 2 shards on the local Ray."""
    quiet = Console(quiet=True)
    one, one_s = _timed(lambda: run_decode(art, [pub], 0, folder / f"{name}-one.jsonl",
                                           settings, quiet))
    ray, ray_s = _timed(lambda: run_on_ray(art, [pub], 0, folder / f"{name}-ray.jsonl",
                                           settings, None, shards=WORKERS, console=quiet))
    cand_one = sum(one["candidates_per_class"].values())
    cand_ray = sum(ray["candidates_per_class"].values())
    return {"n": settings.n, "one_process": {"seconds": one_s, "candidates": cand_one,
                                             "candidates_per_s": cand_one / one_s},
            "ray": {"seconds": ray_s, "candidates": cand_ray, "candidates_per_s": cand_ray / ray_s,
                    "shards": WORKERS, "merge_seconds": ray["shards"]["merge_seconds"],
                    "shard_seconds": [p["seconds"] for p in ray["shards"]["parts"]]},
            "speedup": one_s / ray_s}


def run(quick: bool = False, n: int | None = None, llm_n: int | None = None) -> dict[str, Any]:
    import ray

    n = n or (4_000 if quick else 100_000)
    llm_n = llm_n or (2 if quick else 8)
    result: dict[str, Any] = {"workers": WORKERS}
    with tempfile.TemporaryDirectory() as tmp:
        art, pub = build_artifact(Path(tmp), quick)
        t0 = time.perf_counter()
        ray.init(num_cpus=WORKERS, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False)
        result["ray_start_s"] = time.perf_counter() - t0
        try:
            result["model"] = compare(art, pub, Path(tmp), "model",
                                      DecodeSettings(n=n, decoder="model", select_top=False))
            result["llm"] = compare(art, pub, Path(tmp), "llm",
                                    DecodeSettings(n=llm_n, decoder="llm"))
        finally:
            ray.shutdown()
    result["table"] = table(result)
    m = result["model"]
    result["summary"] = (
        f"2 Ray workers on {os.cpu_count()} cores: model decoder N = {m['n']:,} "
        f"{m['speedup']:.2f}x one process ({m['ray']['candidates_per_s']:,.0f} vs "
        f"{m['one_process']['candidates_per_s']:,.0f} candidates/s), LLM decoder "
        f"{result['llm']['speedup']:.2f}x; merging {m['n']:,} rows takes "
        f"{m['ray']['merge_seconds']:.2f} s; Ray start-up {result['ray_start_s']:.1f} s.")
    return result


def table(r: dict[str, Any]) -> str:
    rows = ["| decoder | N | one process (s) | candidates/s | 2 Ray workers (s) | candidates/s "
            "| speed-up | merge (s) |", "|---|---|---|---|---|---|---|---|"]
    for name in ("model", "llm"):
        d = r[name]
        one, ray = d["one_process"], d["ray"]
        rows.append(f"| {name} | {d['n']:,} | {one['seconds']:.1f} | "
                    f"{one['candidates_per_s']:.3g} | {ray['seconds']:.1f} | "
                    f"{ray['candidates_per_s']:.3g} | {d['speedup']:.2f}x | "
                    f"{ray['merge_seconds']:.3f} |")
    return "\n".join(rows)


BENCHMARK = Benchmark("shards", run)
