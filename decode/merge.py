"""One output and one provenance from the parts of a sharded decode.

The parts' JSONL files (`decode.shards.shard_path`) are read in part order, each checked
against the SHA-256 its own provenance recorded, and written as one file in the output's
format (for JSONL: the same bytes as the parts' files one after the other). Every part must
name the release.json this process verified (a file swapped on shared storage after that
check is refused, even when all parts agree). The merged provenance keeps what every part
shares (artifact, seed, decoder; a part made with anything else is refused), sums what adds
up (rows, candidates, the fit's counters, records made), measures fidelity on the merged
rows and lists each part's own summary. The candidates' fidelity is a per-part number (they
were selected per part), so it stays in the summaries. Once the output and its provenance
are written, the shard folder is removed.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from decode.fidelity import released_tvd
from decode.released import Released
from decode.shards import Part, shard_folder, shard_path
from decode.writers import (
    DecodeResult,
    file_sha256,
    output_format,
    read_jsonl,
    write_frame,
    write_provenance,
)
from selpe_audit.errors import UserError

Doc = dict[str, Any]
SHARED = ("format", "format_version", "tool", "artifact", "seed", "decoder", "model",
          "prompt_templates_sha256", "embedder")
SAME = ("artifact", "seed", "decoder", "embedder")  # a part made otherwise is refused


def merge_shards(out: Path, released: Released, docs: list[Doc], seconds: float,
                 backend: str, *, artifact_sha256: str) -> DecodeResult:
    """Write every part (``docs``: their provenance, in part order) into ``out``;
    ``artifact_sha256``: the release.json this process verified, which every part must name."""
    t0 = time.perf_counter()
    count = len(docs)
    frames = []
    for i, doc in enumerate(docs):
        path = shard_path(out, Part(i, count))
        _check_part(path, doc, docs[0], Part(i, count), artifact_sha256)
        frames.append(read_jsonl(path, released.output_schema))
    df = pl.concat(frames)
    sha = write_frame(out, df)
    rows = df.to_dicts()
    doc = merged_provenance(released, docs, rows, seconds, backend)
    doc["output"] = {"path": out.name, "format": output_format(out), "rows": len(rows),
                     "sha256": sha}
    doc["shards"]["merge_seconds"] = round(time.perf_counter() - t0, 3)  # read, check, write
    prov = write_provenance(out, doc)
    shutil.rmtree(shard_folder(out), ignore_errors=True)
    return DecodeResult(out, prov, len(rows), doc)


def _check_part(path: Path, doc: Doc, first: Doc, part: Part, artifact_sha256: str) -> None:
    again = f"delete {path.parent} and rerun"
    if doc.get("shard") != part.describe():
        raise UserError(f"{path}: its provenance is not {part.label}'s; {again}")
    made_from = doc.get("artifact")
    if not isinstance(made_from, dict) or made_from.get("sha256") != artifact_sha256:
        raise UserError(f"{path}: {part.label} was decoded from another release.json than "
                        f"the one verified here (SHA-256 {artifact_sha256[:16]}...); {again}")
    for key in SAME:
        if doc.get(key) != first.get(key):
            raise UserError(f"{path}: made with another {key} than shard 0; {again}")
    try:
        ok = file_sha256(path) == doc["output"]["sha256"]
    except OSError as e:
        raise UserError(f"{path}: cannot read this shard ({e.strerror}); {again}") from None
    if not ok:
        raise UserError(f"{path}: changed since it was decoded (SHA-256 differs); {again}")


def merged_provenance(released: Released, docs: list[Doc], rows: list[dict[str, Any]],
                      seconds: float, backend: str) -> Doc:
    """The provenance of the merged output (``rows``) from its parts' provenance."""
    first = docs[0]
    candidates = [sum(d["candidates_per_class"].values()) for d in docs]
    made = sum(d["generation"]["records_this_run"] for d in docs)
    fit: Counter = Counter()
    for d in docs:
        fit.update({k: v for k, v in d["selection"]["fit"].items() if k != "applied"})
    return {
        **{k: first[k] for k in SHARED},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {**first["settings"], "shard": None},
        "rows_per_class": _sum_by_class(docs, "rows_per_class"),
        "candidates_per_class": _sum_by_class(docs, "candidates_per_class"),
        "selection": {"select_top": first["selection"]["select_top"],
                      "fit": {"applied": first["selection"]["fit"]["applied"], **fit}},
        "fidelity": {"tvd_to_released": released_tvd(released, rows),
                     "candidates_tvd_to_released": None},  # per part: see shards.parts
        "validity": {
            "records_checked": sum(d["validity"]["records_checked"] for d in docs),
            "records_valid": sum(d["validity"]["records_valid"] for d in docs),
            "share_valid": _weighted(docs, candidates, "share_valid"),
            "generation_share_valid": _weighted(docs, candidates, "generation_share_valid")},
        "generation": {"records_this_run": made,
                       "resumed": sum(d["generation"]["resumed"] for d in docs),
                       "seconds": round(seconds, 3),
                       "records_per_s": round(made / seconds, 3) if seconds else None},
        "shards": {"count": len(docs), "backend": backend,
                   "parts": [_summary(d) for d in docs]},
    }


def _sum_by_class(docs: list[Doc], key: str) -> dict[str, int]:
    total: Counter = Counter()
    for d in docs:
        total.update(d[key])
    return {c: total[c] for c in docs[0][key]}


def _weighted(docs: list[Doc], weights: list[int], key: str) -> float:
    """A share over every part's candidates (1.0 when there are none, as for one part)."""
    total = sum(weights)
    if not total:
        return 1.0
    return sum(d["validity"][key] * w for d, w in zip(docs, weights, strict=True)) / total


def _summary(doc: Doc) -> Doc:
    """What the merged provenance keeps of one part's own."""
    gen, fid = doc["generation"], doc["fidelity"]
    return {**doc["shard"], "rows": doc["output"]["rows"], "sha256": doc["output"]["sha256"],
            "rows_per_class": doc["rows_per_class"],
            "candidates": sum(doc["candidates_per_class"].values()),
            "records_this_run": gen["records_this_run"], "resumed": gen["resumed"],
            "seconds": gen["seconds"], "records_per_s": gen["records_per_s"],
            "llm": gen.get("llm"),
            "tvd_to_released": fid["tvd_to_released"]["histograms_mean"],
            "candidates_tvd_to_released": fid["candidates_tvd_to_released"]["histograms_mean"]}
