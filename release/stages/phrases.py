"""The DP phrase vocabularies the plan runs, and the private rows coded for the counts:
each row's key and unit codes, its text's topic in each codebook, its phrase or keywords."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import polars as pl

from release.config import ReleaseConfig
from release.counts.model import topic_col
from release.dp.unit import UNIT_COL, PrivacyUnit
from release.enclave_log import EnclaveLog
from release.phrases import CONSTRUCTOR, PhraseVocabulary, read_denylist, release_phrases
from release.plan import ReleasePlan
from release.spent import Spent
from release.topics import Codebook, assign_topics
from selpe_audit.artifact.records import LedgerEntry
from selpe_audit.kernel.embeddings import Embedder
from selpe_audit.memory import return_freed_memory
from selpe_audit.schema import Schema


@dataclass(frozen=True)
class CodedRows:
    """The private rows as the counts read them: one row each, of key, unit and topic codes
    (``frame``); the phrase vocabularies released on the way (``vocab``: the fields where
    OpenDP released a term) with their ledger entries and spend; ``topics``: topics per
    text field."""

    frame: pl.DataFrame
    entries: list[LedgerEntry]
    vocab: dict[str, PhraseVocabulary]
    spent: Spent
    topics: dict[str, int]


def code_rows(cfg: ReleaseConfig, schema: Schema, rows: pl.DataFrame, frame: pl.DataFrame,
              unit: PrivacyUnit, person_field: str | None, codebooks: dict[str, Codebook],
              embedder: Embedder | None, log: EnclaveLog, plan: ReleasePlan) -> CodedRows:
    """``rows`` (the private rows' typed frame) as codes (``frame``: `derive_frame`'s); in a
    model mode with free text, the DP phrase vocabulary of each field the plan runs it for,
    at the plan's split, first (its time goes to ``log``)."""
    if not cfg.counts.is_model:
        return CodedRows(frame, [], {}, Spent(), {})
    t0 = time.perf_counter()
    entries, vocab, spent = _release_vocabularies(
        cfg, schema, rows, unit, frame[UNIT_COL] if person_field else None, plan)
    return_freed_memory()  # what OpenDP's phrase queries freed: not in the counts' peak
    topics = {name: len(cb.anchors) for name, cb in codebooks.items()}
    topics |= {name: v.k for name, v in vocab.items()}
    if codebooks and embedder is not None:  # a row's topic from its own text alone
        encoder = embedder.private_view()
        frame = frame.with_columns(
            pl.Series(topic_col(name),
                      assign_topics(cb, rows[name].to_list(), encoder),
                      dtype=pl.UInt32)
            for name, cb in codebooks.items())
        del encoder
    for name, v in vocab.items():  # a row's topics: its own text's phrase or keywords
        frame = frame.with_columns(_slot_codes(rows[name], v))
    if plan.vocabulary_fields or codebooks:  # timed also when a vocabulary released nothing
        log.write(f"phrase vocabulary and topic codes in {time.perf_counter() - t0:.2f} s")
    return CodedRows(frame, entries, vocab, spent, topics)


def _slot_codes(texts: pl.Series, vocab: PhraseVocabulary) -> list[pl.Series]:
    """Each row's topic in every slot of ``vocab`` (the private frame's topic columns): the
    codes of each distinct text, computed once and joined back in row order (a function of
    each row's own text)."""
    distinct = texts.unique().to_list()
    codes = [vocab.codes(t) for t in distinct]
    names = [topic_col(texts.name, s + 1) for s in range(vocab.slots)]
    table = pl.DataFrame({"text": distinct, **{n: [c[s] for c in codes]
                                               for s, n in enumerate(names)}},
                         schema={"text": texts.dtype, **dict.fromkeys(names, pl.UInt32)})
    return (texts.rename("text").to_frame()
            .join(table, on="text", how="left", nulls_equal=True, maintain_order="left")
            .select(names).get_columns())


def _release_vocabularies(cfg: ReleaseConfig, schema: Schema, rows: pl.DataFrame,
                          unit: PrivacyUnit, ids: pl.Series | None, plan: ReleasePlan,
                          ) -> tuple[list[LedgerEntry], dict[str, PhraseVocabulary], Spent]:
    """The DP phrase vocabulary of each of ``fields`` (those the plan runs), each at its
    split's (epsilon, delta); fields where OpenDP released no phrase get no topic column.
    ``ids``: each row's unit code (person unit), else None."""
    fields = plan.vocabulary_fields
    if not fields:
        return [], {}, Spent()
    c = cfg.counts
    eps, delta = plan.split.vocabulary
    deny, deny_sha = read_denylist(c.deny) if c.deny is not None else (frozenset(), None)
    entries, vocab, spent = [], {}, Spent()
    for name in fields:
        terms = c.terms(schema.field(name))
        v = release_phrases(name, rows[name].cast(pl.String), unit, ids, eps, delta, terms,
                            c.max_phrases, deny)
        spent = spent + Spent(v.epsilon, v.delta)
        entries.append(LedgerEntry(
            f"counts/{v.kind}/{name}", f"{v.mechanism} counts of the {v.kind} of normalised "
            f"texts, released above OpenDP's threshold {v.threshold} ({len(v.phrases)} "
            f"{v.kind})", CONSTRUCTOR, v.scale, v.epsilon, v.delta,
            f"field '{name}': each unit counts for at most {v.per_unit} of its {v.kind}",
            "sequential with the other count queries and the selection", "(epsilon, delta)-DP"))
        if v.phrases:
            vocab[name] = v
    if deny_sha is not None:  # which denylist, never its lines
        vocab = {n: replace(v, denylist={"sha256": deny_sha, "entries": len(deny)})
                 for n, v in vocab.items()}
    return entries, vocab, spent
