"""The decode, step by step (DESIGN.md, "Decode"): verify, allocate, generate, select, write.

    rel        = read_release(artifact, trusted)      # signatures checked before parsing
    rows[c]    = allocate(class balance, N)           # clamp, renormalise, largest remainder
    cand[c]    = ceil(overgenerate * rows[c]) candidates from the decoder (LLM, marginals or
                 the counts model),
                 appended to the checkpoint as they come (a rerun resumes)
    keep[c]    = SelectTop: the candidates closest to the class's winners (SelPE)
    out[c]     = fit: IPF weights, systematic sampling, swaps, within-bin redraw (CoRTeC)
    write out (atomically) + provenance; remove the checkpoint

Only the verified artifact and public things (a model file, a seed) are read. Names say
what things are: ``dp_`` released noisy numbers, ``cand_`` generated candidates, ``syn_``
the chosen synthetic rows.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from rich.console import Console

from decode.allocation import allocate
from decode.checkpoint import Checkpoint, checkpoint_path
from decode.fidelity import released_tvd
from decode.fit import FitConfig, class_margins, fit_class, l1_distance
from decode.hybrid import HybridDecoder
from decode.llm import LLMDecoder
from decode.marginals import MarginalsDecoder
from decode.model import ModelDecoder
from decode.progress import GenerationProgress
from decode.released import Released, released_view
from decode.select_top import artifact_kernel, closest, winner_distances
from decode.writers import (
    check_records,
    check_writable,
    output_format,
    valid_share,
    write_provenance,
    write_records,
)
from selpe_audit.artifact.document import VerifiedRelease, read_release, tool_versions
from selpe_audit.errors import UserError
from selpe_audit.kernel.distance import Kernel
from selpe_audit.llm.models import load_llm
from selpe_audit.llm.prompts import templates_digest

PROVENANCE_FORMAT = "selpe-audit/decode-provenance"
DECODERS = ("llm", "marginals", "model")
_FIT_STREAM = 2  # seeds of the fit's draws, apart from the marginals (1) and model (3) decoders


class RecordSource(Protocol):
    """A decoder: a deterministic stream of valid records per class."""

    name: str
    validity: float

    def describe(self) -> dict[str, Any]: ...

    def generate(self, class_value: Any, start: int, total: int, on_record: Any) -> None: ...


@dataclass(frozen=True, kw_only=True)
class DecodeSettings:
    """What the user asked for, checked on construction: no invalid settings object exists,
    and a bad value is a one-line `UserError` before anything is read."""

    n: int
    decoder: str = "llm"
    seed: int = 0
    overgenerate: float = 2.0
    select_top: bool = True
    keep_share: float = 0.75  # SelectTop keeps this share of candidates when the fit follows
    fit: bool = True
    two_stage: bool = True
    hybrid: bool = True  # llm on a model-mode artifact: fields from the model, LLM text only
    model: str | None = None
    gpu_layers: int = 0

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise UserError(f"--n must be a positive number of rows (got {self.n})")
        if self.decoder not in DECODERS:
            raise UserError(f"--decoder must be one of {', '.join(DECODERS)}")
        if not (math.isfinite(self.overgenerate) and self.overgenerate >= 1):
            raise UserError(f"--overgenerate must be >= 1 (got {self.overgenerate})")
        if not 0 < self.keep_share <= 1:
            raise UserError("the SelectTop keep share must lie in (0, 1]")
        if self.seed < 0:
            raise UserError(f"--seed must be >= 0 (got {self.seed})")


@dataclass(frozen=True)
class Plan:
    """Rows and candidates per class (post-processing of the class balance)."""

    rows: dict[Any, int]
    candidates: dict[Any, int]


def plan(released: Released, n: int, overgenerate: float) -> Plan:
    rows = dict(zip(released.classes, allocate(released.class_dp_counts, n).tolist(),
                    strict=True))
    return Plan(rows, {c: math.ceil(overgenerate * a) for c, a in rows.items()})


@dataclass
class Selected:
    """The chosen rows per class and what each selection step did (all public)."""

    syn_rows: dict[Any, list[dict[str, Any]]]
    notes: dict[str, Any] = field(default_factory=dict)


def select(released: Released, cand: dict[Any, list[dict[str, Any]]], rows: dict[Any, int],
           settings: DecodeSettings, kernel: Kernel | None) -> Selected:
    """SelectTop (when ``kernel`` is given), then the fit (when on), per class."""
    out = Selected({})
    fit_totals: Counter = Counter()
    for k, c in enumerate(released.classes):
        a, records = rows[c], cand[c]
        idx = np.arange(len(records))
        if kernel is not None and released.winners[c] and a > 0:
            keep = max(a, math.ceil(settings.keep_share * len(idx))) if settings.fit else a
            idx = closest(winner_distances(kernel, released.winners[c], records), keep)
        kept = [records[i] for i in idx]
        if not settings.fit or a == 0:
            out.syn_rows[c] = kept[:a]
            continue
        margins = class_margins(released, c, kept, a)
        rng = np.random.default_rng([settings.seed, _FIT_STREAM, k])
        res = fit_class(kept, margins, a, released.schema, rng, FitConfig())
        out.syn_rows[c] = res.records
        fit_totals.update(l1_without_fit=l1_distance(margins, np.arange(a)),
                          l1_sampled=res.l1_sampled, l1_final=res.l1_final, swaps=res.swaps,
                          redrawn=res.redrawn)
    out.notes["select_top"] = ("applied" if kernel is not None else "off" if not
                               settings.select_top else "skipped: the artifact has no exemplars")
    out.notes["fit"] = {"applied": settings.fit, **fit_totals}
    return out


def make_decoder(released: Released, settings: DecodeSettings) -> RecordSource:
    if settings.decoder == "marginals":
        return MarginalsDecoder(released, settings.seed)
    if settings.decoder == "model":
        return ModelDecoder(released, settings.seed)
    llm = load_llm(settings.model, n_gpu_layers=settings.gpu_layers, seed=settings.seed)
    if settings.hybrid and released.model is not None:
        return HybridDecoder(released, llm, seed=settings.seed)
    return LLMDecoder(released, llm, seed=settings.seed, two_stage=settings.two_stage)


def _binding(rel: VerifiedRelease, settings: DecodeSettings, decoder: RecordSource,
             p: Plan) -> dict[str, Any]:
    """Everything that decides which candidates are made (and nothing that does not)."""
    return {"artifact_sha256": rel.sha256, "decoder": decoder.describe(), "seed": settings.seed,
            "candidates_per_class": [[c, m] for c, m in p.candidates.items()]}


@dataclass(frozen=True)
class DecodeResult:
    out: Path
    provenance: Path
    rows: int
    provenance_doc: dict[str, Any]


def run_decode(artifact: Path, trusted: list[Path], require_approvals: int, out: Path,
               settings: DecodeSettings, console: Console | None = None) -> DecodeResult:
    con = console or Console(stderr=True, highlight=False)
    fmt = output_format(out)
    rel = read_release(artifact, list(trusted), require_approvals)
    released = released_view(rel)
    check_writable(out)
    p = plan(released, settings.n, settings.overgenerate)
    with con.status("loading models"):
        decoder = make_decoder(released, settings)
        kernel, embedder = None, None
        if settings.select_top and released.kernel is not None:
            kernel, embedder = artifact_kernel(released)
    ckpt = Checkpoint(checkpoint_path(out), _binding(rel, settings, decoder, p),
                      list(released.classes))
    try:
        if ckpt.resumed:
            con.print(f"resuming from {ckpt.path}: {ckpt.resumed} candidates already made")
        t0 = time.perf_counter()
        made = _generate(decoder, p, ckpt, con)
        seconds = time.perf_counter() - t0
        cand = ckpt.candidates
        with con.status("selecting and fitting rows"):
            chosen = select(released, cand, p.rows, settings, kernel)
        syn_rows = [r for c in released.classes for r in chosen.syn_rows[c]]
        checked = check_records(syn_rows, released.schema)
        sha = write_records(out, syn_rows, released.schema)
        doc = _provenance(rel, released, settings, decoder, embedder, p, chosen, cand)
        doc["output"] = {"path": out.name, "format": fmt, "rows": len(syn_rows), "sha256": sha}
        doc["validity"] = {"records_checked": checked, "records_valid": checked,
                           "share_valid": valid_share(
                               [r for c in released.classes for r in cand[c]], released.schema),
                           "generation_share_valid": decoder.validity}
        doc["generation"] = {"records_this_run": made, "resumed": ckpt.resumed,
                             "seconds": round(seconds, 3),
                             "records_per_s": round(made / seconds, 3) if seconds else None}
        stats = getattr(decoder, "stats", None)  # LLM decoders: counters, no content
        if stats is not None:
            doc["generation"]["llm"] = {k: round(v, 3) if isinstance(v, float) else v
                                        for k, v in stats.as_dict().items()}
        prov = write_provenance(out, doc)
    except BaseException:
        ckpt.close()
        raise
    ckpt.remove()
    return DecodeResult(out, prov, len(syn_rows), doc)


def _generate(decoder: RecordSource, p: Plan, ckpt: Checkpoint, con: Console) -> int:
    """Make every missing candidate, class by class, each appended as it comes."""
    total = sum(p.candidates.values())
    made = 0
    with GenerationProgress(con, total, sum(ckpt.done(c) for c in p.candidates)) as bar:
        for c, m in p.candidates.items():
            def on_record(rec: dict[str, Any], c: Any = c) -> None:
                nonlocal made
                ckpt.append(c, rec)
                made += 1
                bar.advance(decoder.validity)

            decoder.generate(c, ckpt.done(c), m, on_record)
    ckpt.sync()
    return made


def _provenance(rel: VerifiedRelease, released: Released, settings: DecodeSettings,
                decoder: RecordSource, embedder: dict[str, Any] | None, p: Plan,
                chosen: Selected, cand: dict[Any, list[dict[str, Any]]]) -> dict[str, Any]:
    """What was decoded from what, how, and how close it is to the released counts."""
    described = decoder.describe()
    syn_rows = [r for c in released.classes for r in chosen.syn_rows[c]]
    cand_rows = [r for c in released.classes for r in cand[c]]
    return {
        "format": PROVENANCE_FORMAT,
        "format_version": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tool": tool_versions(),
        "artifact": {"sha256": rel.sha256, "dataset": rel.doc["dataset"],
                     "format_version": rel.doc["format_version"],
                     "schema_sha256": rel.doc["schema_sha256"],
                     "release_key_id": rel.doc["release_key_id"],
                     "verified_key_ids": list(rel.verification.valid_key_ids),
                     "approvals": list(rel.approvals),
                     "epsilon": rel.doc["ledger"]["total_epsilon"]},
        "seed": settings.seed,
        "settings": {k: v for k, v in asdict(settings).items() if k not in ("model", "seed")},
        "decoder": described,
        "model": described.get("model"),
        "prompt_templates_sha256": templates_digest() if settings.decoder == "llm" else None,
        "embedder": embedder,
        "rows_per_class": {str(c): len(chosen.syn_rows[c]) for c in released.classes},
        "candidates_per_class": {str(c): m for c, m in p.candidates.items()},
        "selection": chosen.notes,
        "fidelity": {"tvd_to_released": released_tvd(released, syn_rows),
                     "candidates_tvd_to_released": released_tvd(released, cand_rows)},
    }
