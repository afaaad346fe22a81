"""The decode, step by step (DESIGN.md, "Decode"): verify, allocate, generate, select, write.

    rel        = read_release(artifact, trusted)      # signatures checked before parsing
    rows[c]    = allocate(class balance, N)           # clamp, renormalise, largest remainder
    cand[c]    = ceil(overgenerate * rows[c]) candidates from the decoder (LLM, marginals or
                 the counts model),
                 appended to the checkpoint as they come (a rerun resumes)
    keep[c]    = SelectTop: the candidates closest to the class's winners (SelPE)
    out[c]     = fit: IPF weights, systematic sampling, swaps, within-bin redraw (CoRTeC)
    people     = with people tables: out's visits put together into people (`decode.people`)
    write out (atomically) + provenance; remove the checkpoint

Sharded (``shards`` = S > 1, `decode.shards`): the plan is split into S parts, each made as
above with its own seeds, row targets, checkpoint and output; ``shard`` = I makes part I
alone, else every part is made here in order and `decode.merge` joins them into one output
with one provenance (`decode.cluster` runs the parts as Ray tasks instead).

Only the verified artifact and public things (a model file, a seed) are read. Names say
what things are: ``dp_`` released noisy numbers, ``cand_`` generated candidates, ``syn_``
the chosen synthetic rows.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from decode.allocation import allocate
from decode.checkpoint import Checkpoint, checkpoint_path
from decode.chunks import CHUNK_ROWS, Chunk, ChunkStats, ChunkStore, chunk_plan, join_pieces
from decode.decoders import RecordSource, get
from decode.decoders.model import NO_MODEL
from decode.fidelity import cell_counts, tvd_from_counts
from decode.fit import FitConfig, class_margins, fit_class, l1_distance
from decode.merge import merge_shards
from decode.people import assemble_people
from decode.progress import GenerationProgress
from decode.released import Released, released_view
from decode.select_top import artifact_kernel, closest, winner_distances
from decode.shards import WHOLE, Part, all_parts, part_rows, shard_path
from decode.writers import (
    PROVENANCE_FORMAT,
    DecodeResult,
    check_records,
    check_writable,
    count_valid,
    file_sha256,
    output_format,
    provenance_path,
    write_provenance,
    write_records,
)
from selpe_audit.artifact.document import VerifiedRelease, read_release, tool_versions
from selpe_audit.errors import UserError
from selpe_audit.kernel.distance import Kernel
from selpe_audit.llm.models import LLM
from selpe_audit.llm.prompts import templates_digest
from selpe_audit.models import Models, shared

__all__ = ["PROVENANCE_FORMAT", "DecodeResult", "DecodeSettings", "plan", "run_decode"]

DEFAULT_DECODER = "llm"
_FIT_STREAM = 2  # seeds of the fit's draws, apart from the marginals (1) and model (3) decoders
_PEOPLE_STREAM = 4  # seeds of the people's assembly (`decode.people`)


@dataclass(frozen=True, kw_only=True)
class DecodeSettings:
    """What the user asked for, checked on construction: no invalid settings object exists,
    and a bad value is a one-line `UserError` before anything is read."""

    n: int
    decoder: str = DEFAULT_DECODER
    seed: int = 0
    overgenerate: float = 2.0
    select_top: bool | None = None  # None: on for the llm decoder only (`selects_top`)
    keep_share: float = 0.75  # SelectTop keeps this share of candidates when the fit follows
    fit: bool = True
    two_stage: bool = True
    hybrid: bool = True  # llm on a model-mode artifact: fields from the model, LLM text only
    paraphrase_phrases: bool = False  # hybrid: the LLM rewrites released phrases too
    model: str | None = None
    gpu_layers: int = 0
    shards: int = 1            # the plan in this many parts (`decode.shards`)
    shard: int | None = None   # make only this part; None: every part, merged
    chunk_rows: int = CHUNK_ROWS  # rows in memory at once (`decode.chunks`)

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise UserError(f"--n must be a positive number of rows (got {self.n})")
        try:
            get(self.decoder)
        except ValueError as e:
            raise UserError(f"--decoder: {e}") from None
        if not (math.isfinite(self.overgenerate) and self.overgenerate >= 1):
            raise UserError(f"--overgenerate must be >= 1 (got {self.overgenerate})")
        if not 0 < self.keep_share <= 1:
            raise UserError("the SelectTop keep share must lie in (0, 1]")
        if self.seed < 0:
            raise UserError(f"--seed must be >= 0 (got {self.seed})")
        if self.chunk_rows < 1:
            raise UserError(f"--chunk-rows must be >= 1 (got {self.chunk_rows})")
        if self.shards < 1:
            raise UserError(f"--shards must be >= 1 (got {self.shards})")
        if self.shard is not None and not 0 <= self.shard < self.shards:
            raise UserError(f"--shard must lie in 0..{self.shards - 1} for --shards "
                            f"{self.shards} (got {self.shard})")

    @property
    def selects_top(self) -> bool:
        """SelectTop, unless asked otherwise, for the LLM decoders only: with the marginals
        and model decoders it moves the histograms away from the released counts (the decode
        benchmark) and costs an embedding per candidate."""
        return self.needs_llm if self.select_top is None else self.select_top

    @property
    def needs_llm(self) -> bool:
        return get(self.decoder).needs_llm

    @property
    def parts(self) -> list[Part]:
        """The parts this decode makes: the one asked for, else every part in order."""
        if self.shard is not None:
            return [Part(self.shard, self.shards)]
        return all_parts(self.shards)


@dataclass(frozen=True)
class ClassQuota:
    """Rows and candidates per class (post-processing of the class balance)."""

    rows: dict[Any, int]
    candidates: dict[Any, int]


def plan(released: Released, n: int, overgenerate: float) -> ClassQuota:
    rows = dict(zip(released.classes, allocate(released.class_dp_counts, n).tolist(),
                    strict=True))
    return ClassQuota(rows, {c: math.ceil(overgenerate * a) for c, a in rows.items()})


def part_plan(whole: ClassQuota, part: Part, overgenerate: float) -> ClassQuota:
    """A part's share of the whole plan's rows and the candidates it makes for them (the
    whole plan for `WHOLE`)."""
    rows = part_rows(whole.rows, part)
    return ClassQuota(rows, {c: math.ceil(overgenerate * a) for c, a in rows.items()})


@dataclass
class Selected:
    """The chosen rows per class and what each selection step did (all public)."""

    syn_rows: dict[Any, list[dict[str, Any]]]
    notes: dict[str, Any] = field(default_factory=dict)


def select(released: Released, cand: dict[Any, list[dict[str, Any]]], rows: dict[Any, int],
           settings: DecodeSettings, kernel: Kernel | None, part: Part = WHOLE,
           chunk: int = 0) -> Selected:
    """SelectTop (when ``kernel`` is given), then the fit (when on), per class; the fit's
    draws are seeded by the part's seed and the chunk."""
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
        rng = np.random.default_rng([part.seed(settings.seed), _FIT_STREAM, k, *
                                     ([chunk] if chunk else [])])
        res = fit_class(kept, margins, a, released.schema, rng, FitConfig())
        out.syn_rows[c] = res.records
        fit_totals.update(l1_without_fit=l1_distance(margins, np.arange(a)),
                          l1_sampled=res.l1_sampled, l1_final=res.l1_final, swaps=res.swaps,
                          redrawn=res.redrawn)
    out.notes["select_top"] = _select_top_note(kernel, settings)
    out.notes["fit"] = {"applied": settings.fit, **fit_totals}
    return out


def _select_top_note(kernel: Kernel | None, settings: DecodeSettings) -> str:
    if kernel is not None:
        return "applied"
    return "skipped: the artifact has no exemplars" if settings.selects_top else "off"


def make_decoder(released: Released, settings: DecodeSettings, part: Part = WHOLE,
                 llm: LLM | None = None) -> RecordSource:
    """The decoder ``settings`` name (`decode.decoders`), every draw seeded by the part's
    seed; an LLM decoder uses ``llm`` when given (one model shared by every part) or the
    process's own."""
    spec = get(settings.decoder)
    if spec.needs_counts_model and released.model is None:
        raise UserError(NO_MODEL)
    if spec.needs_llm and llm is None:
        llm = shared().llm(settings.model, gpu_layers=settings.gpu_layers)
    return spec.build(released, settings, part.seed(settings.seed), llm)


@dataclass(frozen=True)
class Tools:
    """What every part of one decode shares, loaded once: the LLM and SelectTop's kernel."""

    llm: LLM | None = None
    kernel: Kernel | None = None
    embedder: dict[str, Any] | None = None  # what provenance says about the local embedder


def load_tools(released: Released, settings: DecodeSettings, models: Models) -> Tools:
    """The LLM (LLM decoders) and SelectTop's kernel (if on and the artifact has winners),
    from ``models``."""
    llm = None
    if settings.needs_llm:
        llm = models.llm(settings.model, gpu_layers=settings.gpu_layers)
    if settings.selects_top and released.kernel is not None:
        return Tools(llm, *artifact_kernel(released, models))
    return Tools(llm)


def checkpoint_binding(rel: VerifiedRelease, settings: DecodeSettings,
                       decoder: RecordSource, p: ClassQuota, part: Part,
                       chunks: int) -> dict[str, Any]:
    """Everything that decides which candidates are made (and nothing that does not); the
    chunk size only where it cuts the part."""
    binding = {"artifact_sha256": rel.sha256, "decoder": decoder.describe(),
               "seed": settings.seed, "shard": part.describe(),
               "candidates_per_class": [[c, m] for c, m in p.candidates.items()]}
    return binding if chunks == 1 else {**binding, "chunk_rows": settings.chunk_rows}


def _digest(binding: dict[str, Any]) -> str:
    text = json.dumps(binding, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def run_decode(artifact: Path, trusted: list[Path], require_approvals: int, out: Path,
               settings: DecodeSettings, console: Console | None = None, *,
               reuse: bool = False, models: Models | None = None,
               release_key: Path | None = None) -> DecodeResult:
    """Verify the artifact, then decode the parts ``settings`` asks for into ``out``: one part
    (the whole plan, or ``--shard I``) directly, several one after the other into their
    shard files, merged at the end. ``reuse``: keep a part whose output this very decode
    already wrote (a rerun, or a retried Ray task, skips it). The LLM and the embedder come
    from ``models`` (default: the process's own, `selpe_audit.models.shared`).
    ``release_key``: the releaser's public key (required to count approvals)."""
    con = console or Console(stderr=True, highlight=False)
    output_format(out)
    rel = read_release(artifact, list(trusted), require_approvals, release_key)
    for kid in rel.verification.missing_key_ids:
        con.print(f"trusted key {kid} has not signed {artifact}/release.json (not counted)")
    released = released_view(rel)
    check_writable(out)
    with con.status("loading models"):
        tools = load_tools(released, settings, models or shared())
    parts = settings.parts
    if len(parts) == 1:
        return decode_part(rel, released, settings, parts[0], out, tools, con, reuse=reuse)
    t0 = time.perf_counter()
    docs = []
    for part in parts:
        con.print(f"{part.label}")
        docs.append(decode_part(rel, released, replace(settings, shard=part.index), part,
                                shard_path(out, part), tools, con, reuse=True).provenance_doc)
    return merge_shards(out, released, docs, time.perf_counter() - t0, "local",
                        artifact_sha256=rel.sha256)


def decode_part(rel: VerifiedRelease, released: Released, settings: DecodeSettings, part: Part,
                out: Path, tools: Tools, con: Console, *, reuse: bool = False) -> DecodeResult:
    """One part of the plan (the whole plan when unsharded) into ``out``, in chunks of at
    most ``settings.chunk_rows`` rows (`decode.chunks`): per chunk its candidates through
    its own checkpoint, SelectTop and the fit on them, its rows; then one provenance."""
    fmt = output_format(out)
    p = part_plan(plan(released, settings.n, settings.overgenerate), part, settings.overgenerate)
    with con.status("loading models"):
        decoder = make_decoder(released, settings, part, tools.llm)
    chunks = chunk_plan(p.rows, settings.overgenerate, settings.chunk_rows,
                        mixed=released.people is not None)
    binding = checkpoint_binding(rel, settings, decoder, p, part, len(chunks))
    if reuse and (done := _finished(out, binding)) is not None:
        con.print(f"{part.label}: already decoded into {out}")
        return done
    store = ChunkStore(out, _digest(binding), len(chunks)) if len(chunks) > 1 else None
    total = _resumed(store, len(chunks), con)
    t0 = time.perf_counter()
    with GenerationProgress(con, sum(sum(ch.candidates.values()) for ch in chunks),
                            sum(total.candidates.values())) as bar:
        for ch in chunks:
            if store is not None and ch.index in store.done:
                continue
            target = out if store is None else store.piece(ch.index)
            ckpt_binding = binding if store is None else {**binding, "chunk": ch.index}
            stats, sha = _decode_chunk(released, settings, part, decoder, tools, ch, target,
                                       Checkpoint(checkpoint_path(target), ckpt_binding,
                                                  list(released.classes),
                                                  durable=settings.needs_llm),
                                       bar, con)
            if store is not None:
                store.record(ch.index, sha, stats)
            total.add(stats)
    seconds = time.perf_counter() - t0
    if store is not None:
        with con.status(f"joining {len(chunks)} chunks into {out}"):
            join_pieces(out, list(store.pieces()), fmt)
            sha = file_sha256(out)
    rows = sum(total.rows.values())
    doc = _provenance(rel, released, settings, decoder, tools, total)
    doc["shard"] = part.describe()
    doc["binding_sha256"] = _digest(binding)
    doc["output"] = {"path": out.name, "format": fmt, "rows": rows, "sha256": sha}
    if store is not None:
        doc["output"]["chunks"] = len(chunks)
    doc["generation"] = {"records_this_run": total.made, "resumed": total.resumed,
                         "seconds": round(seconds, 3),
                         "records_per_s": round(total.made / seconds, 3) if seconds else None}
    if total.people:
        doc["people"] = total.people
    stats = getattr(decoder, "stats", None)  # LLM decoders: counters, no content
    if stats is not None:
        doc["generation"]["llm"] = {k: round(v, 3) if isinstance(v, float) else v
                                    for k, v in stats.as_dict().items()}
    prov = write_provenance(out, doc)
    if store is not None:
        store.remove()
    return DecodeResult(out, prov, rows, doc)


def _resumed(store: ChunkStore | None, n_chunks: int, con: Console) -> ChunkStats:
    """The stats of the chunks an earlier run already wrote (none without a store), so the
    progress bar and the provenance count every chunk of the part."""
    total = ChunkStats.empty()
    if store is not None:
        for j in store.done:
            total.add(store.stats(j))
        if store.done:
            con.print(f"resuming from {store.folder}: {len(store.done)} of {n_chunks} "
                      "chunks already written")
    return total


def _decode_chunk(released: Released, settings: DecodeSettings, part: Part,
                  decoder: RecordSource, tools: Tools, ch: Chunk, target: Path,
                  ckpt: Checkpoint, bar: GenerationProgress,
                  con: Console) -> tuple[ChunkStats, str]:
    """One chunk into ``target``: its candidates (resumed from and appended to ``ckpt``),
    SelectTop and the fit on them, its rows checked and written; the checkpoint is removed
    once ``target`` is durable."""
    try:
        if ckpt.resumed:
            con.print(f"resuming from {ckpt.path}: {ckpt.resumed} candidates already made")
        bar.skip(ckpt.resumed)
        made = _generate(decoder, ch, ckpt, bar)
        cand = ckpt.candidates
        with con.status("selecting and fitting rows"):
            chosen = select(released, cand, ch.rows, settings, tools.kernel, part,
                            chunk=ch.index)
        syn_rows = [r for c in released.classes for r in chosen.syn_rows[c]]
        people = None
        if released.people is not None:
            people = assemble_people(syn_rows, released.people, np.random.default_rng(
                [part.seed(settings.seed), _PEOPLE_STREAM, ch.index]))
            syn_rows = people.rows
        cand_rows = [r for c in released.classes for r in cand[c]]
        stats = ChunkStats(
            rows={str(c): len(chosen.syn_rows[c]) for c in released.classes},
            candidates={str(c): len(cand[c]) for c in released.classes},
            made=made, resumed=ckpt.resumed,
            checked=check_records(syn_rows, released.output_schema),
            candidates_valid=count_valid(cand_rows, released.schema),
            fit={k: v for k, v in chosen.notes["fit"].items() if k != "applied"},
            cells=cell_counts(released, syn_rows), cand_cells=cell_counts(released, cand_rows),
            people={} if people is None else {
                "people": people.people, "relabelled": people.relabelled,
                "unmatched": people.unmatched})
        sha = write_records(target, syn_rows, released.output_schema)
    except BaseException:
        ckpt.close()
        raise
    ckpt.remove()
    return stats, sha


def _finished(out: Path, binding: dict[str, Any]) -> DecodeResult | None:
    """The part in ``out`` when this very decode wrote it (same binding, output intact)."""
    prov = provenance_path(out)
    try:
        doc = json.loads(prov.read_bytes())
        if doc["binding_sha256"] != _digest(binding) or \
                file_sha256(out) != doc["output"]["sha256"]:
            return None
        made = sum(doc["candidates_per_class"].values())  # all of them by an earlier run
        doc["generation"] |= {"records_this_run": 0, "resumed": made, "output_kept": True}
        return DecodeResult(out, prov, doc["output"]["rows"], doc)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _generate(decoder: RecordSource, ch: Chunk, ckpt: Checkpoint,
              bar: GenerationProgress) -> int:
    """Make the chunk's missing candidates, class by class, each appended as it comes: the
    class's stream from ``ch.starts[c]`` on, so chunks continue where the last one stopped."""
    made = 0
    for c, m in ch.candidates.items():
        def on_record(rec: dict[str, Any], c: Any = c) -> None:
            nonlocal made
            ckpt.append(c, rec)
            made += 1
            bar.advance(decoder.validity)

        decoder.generate(c, ch.starts[c] + ckpt.done(c), ch.starts[c] + m, on_record)
    ckpt.sync()
    return made


def _provenance(rel: VerifiedRelease, released: Released, settings: DecodeSettings,
                decoder: RecordSource, tools: Tools, total: ChunkStats) -> dict[str, Any]:
    """What was decoded from what, how, and how close it is to the released counts (summed
    over the chunks)."""
    described = decoder.describe()
    candidates = sum(total.candidates.values())
    kernel = tools.kernel
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
                     "unsigned_trusted_key_ids": list(rel.verification.missing_key_ids),
                     "epsilon": rel.doc["ledger"]["total_epsilon"]},
        "seed": settings.seed,
        "settings": {k: v for k, v in asdict(settings).items() if k not in ("model", "seed")},
        "decoder": described,
        "model": described.get("model"),
        "prompt_templates_sha256": templates_digest() if settings.needs_llm else None,
        "embedder": tools.embedder,
        "rows_per_class": total.rows,
        "candidates_per_class": total.candidates,
        "selection": {"select_top": _select_top_note(kernel, settings),
                      "fit": {"applied": settings.fit, **total.fit}},
        "fidelity": {"tvd_to_released": tvd_from_counts(released, total.cells),
                     "candidates_tvd_to_released": tvd_from_counts(released, total.cand_cells)},
        "validity": {"records_checked": total.checked, "records_valid": total.checked,
                     "share_valid": total.candidates_valid / candidates if candidates else 1.0,
                     "generation_share_valid": decoder.validity},
    }
