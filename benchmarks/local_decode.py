"""Decode's steps (`decode.pipeline`) for benchmarks that decode many times in one process.

`decode.pipeline.run_decode` writes a checkpoint and provenance on every call; a benchmark
that decodes a dozen configurations instead keeps one LLM (its KV cache keeps shared prompt
prefixes, which dominate the cost on a CPU) and one embedder (its text cache), and may reuse
one set of candidates under several select steps.
The steps themselves are decode's own: `plan`, the decoders, `select`, `artifact_kernel`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from decode.decoders import RecordSource
from decode.pipeline import DecodeSettings, make_decoder, plan, select
from decode.released import Released
from decode.select_top import artifact_kernel
from selpe_audit.models import Models, shared

Row = dict[str, Any]


@dataclass
class Candidates:
    """One decoder's over-generated candidates per class and how they were made."""

    by_class: dict[Any, list[Row]]
    seconds: float
    validity: float
    described: dict[str, Any]
    llm_stats: dict[str, Any] | None = None  # LLM decoders' counters (no content)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.by_class.values())


class LocalDecode:
    """One LLM and one embedder (the process's, `selpe_audit.models.shared`, unless given)
    for every decode of a benchmark."""

    def __init__(self, models: Models | None = None) -> None:
        self.models = models or shared()

    def decoder(self, released: Released, settings: DecodeSettings) -> RecordSource:
        """`decode.pipeline.make_decoder`, with the shared model (loaded on first LLM use)."""
        llm = None
        if settings.decoder not in ("marginals", "model"):
            llm = self.models.llm(settings.model, gpu_layers=settings.gpu_layers)
        return make_decoder(released, settings, llm=llm)

    def generate(self, released: Released, settings: DecodeSettings) -> Candidates:
        """Every candidate the plan asks for (only generation is timed)."""
        dec = self.decoder(released, settings)
        counts = plan(released, settings.n, settings.overgenerate).candidates
        cand: dict[Any, list[Row]] = {c: [] for c in released.classes}
        t0 = time.perf_counter()
        for c, m in counts.items():
            dec.generate(c, 0, m, cand[c].append)
        seconds = time.perf_counter() - t0
        stats = getattr(dec, "stats", None)
        return Candidates(cand, seconds, dec.validity, dec.describe(),
                          None if stats is None else stats.as_dict())

    def choose(self, released: Released, cand: Candidates,
               settings: DecodeSettings) -> tuple[list[Row], dict[str, Any]]:
        """The select step as `run_decode` runs it: SelectTop (if on and the artifact has
        winners), then the fit (if on). Returns the rows and the select step's notes."""
        kernel = None
        if settings.selects_top and released.kernel is not None:
            kernel = artifact_kernel(released, self.models)[0]
        rows = plan(released, settings.n, settings.overgenerate).rows
        chosen = select(released, cand.by_class, rows, settings, kernel)
        return [r for c in released.classes for r in chosen.syn_rows[c]], chosen.notes
