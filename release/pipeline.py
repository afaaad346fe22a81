"""The release, step by step: check, reserve budget, read once, measure, write, sign.

Only DP outputs (and post-processing of them) go into the artifact. The console shows
shareable progress lines only; the invalid-row report (row numbers and reasons, never
values) and timings go to the enclave-only log (`release.enclave_log`), outside the
artifact folder. The rows' people are charged in the lifetime ledger after reading and
before any mechanism runs (a person the release would take past their lifetime cap stops
it, refunded, or is left out on request).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl
from rich.console import Console

from release import dp
from release.config import ReleaseConfig
from release.counts import CountsBudget, CountsRows, measure
from release.counts import get as counts_mode
from release.counts.keys import UNIT_COL, derive_frame
from release.counts.model import CONVERSION_ID, topic_col
from release.dp.mechanisms import (
    SIZE_CONSTRUCTOR,
    NoisyCount,
    PrivacyUnit,
    measure_size,
    remove_spools,
    sweep_spools,
)
from release.enclave_log import EnclaveLog
from release.installation import Installation, load_installation
from release.ledger import LifetimeLedger, ledger_block
from release.phrases import CONSTRUCTOR as PHRASES_CONSTRUCTOR
from release.phrases import (
    PhraseVocabulary,
    phrase_topics,
    read_denylist,
    release_phrases,
)
from release.plan import ReleasePlan, plan_release, size_epsilon, vocabulary_budget
from release.private_data import PrivateTable, read_private_rows, source_description
from release.selection import (
    PrivateClasses,
    SelectionRun,
    accounting,
    get,
    run_selection,
    unit_ids,
)
from release.selection.candidates import CandidateSource, candidate_source
from release.topics import assign_topics, build_codebook, public_topic_texts
from selpe_audit.artifact import records
from selpe_audit.artifact.document import FORMAT, FORMAT_VERSION, tool_versions, write_release
from selpe_audit.artifact.guarantees import derived_guarantees, gdp_interpretation, protects
from selpe_audit.artifact.records import Budget, LedgerEntry, LifetimeStamp, json_form
from selpe_audit.artifact.signing import key_id, load_private_key
from selpe_audit.artifact.view import counts_view
from selpe_audit.errors import UserError
from selpe_audit.kernel.distance import Kernel, KernelConfig
from selpe_audit.kernel.embeddings import Embedder
from selpe_audit.memory import return_freed_memory
from selpe_audit.models import Models, shared
from selpe_audit.review.page import write_review_html
from selpe_audit.schema import Schema, load_schema

SIZE_ACCOUNTANT = "a Context in pure epsilon-DP for the row count the plan is sized by"
#: the ledger entry of the plan's row count
SIZE_ID = "counts/rows"
PHRASES_ACCOUNTANT = ("a Context in (epsilon, delta)-DP per free-text field's phrase "
                      "vocabulary (partition selection)")
PURE_SELECTION_ACCOUNTANT = ("an adaptive compositor over the selection rounds, each "
                             "entry's epsilon from its privacy map")
GAUSSIAN_SELECTION_ACCOUNTANT = (
    "an adaptive compositor in zero-concentrated DP over the Gaussian selection rounds (rho "
    "adds up), whose total rho OpenDP converts to (epsilon, delta) at the configured delta "
    "(selection/zcdp-to-approx-dp); round entries state rho and mu, their epsilon is counted "
    "in the conversion entry")


#: LLM candidates per class for the topic codebooks when no public pool is configured
TOPIC_TEXTS_PER_CLASS = 12


@dataclass(frozen=True)
class ReleaseResult:
    path: Path
    doc: dict[str, Any]


def run_release(cfg: ReleaseConfig, console: Console | None = None,
                models: Models | None = None,
                installation: Installation | None = None) -> ReleaseResult:
    """One release of ``cfg``; the LLM and the embedder come from ``models`` (default: the
    process's own, `selpe_audit.models.shared`), loaded there on first use; the lifetime
    caps' ceiling from ``installation`` (default: the installation file). The private
    texts the release embedded are forgotten when it ends, however it ends."""
    models = models or shared()
    dp.enable()
    sweep_spools()  # what a release killed outright left behind (its process is gone)
    try:
        with _spools_removed_on_signals():
            return _release(cfg, console or Console(stderr=True, highlight=False), models,
                            installation or load_installation())
    finally:
        models.forget_private_texts()


@contextmanager
def _spools_removed_on_signals() -> Iterator[None]:
    """On SIGTERM or SIGINT during the release, delete its temporary files of private rows,
    then die of that signal as the process would have (nothing is raised: the signal may
    arrive inside a callback OpenDP's Rust runs, which must not unwind); the handlers in
    force before come back after. Only the main thread can set a handler; elsewhere
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def die(signum: int, _frame: Any) -> None:
        remove_spools()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    before = {s: signal.signal(s, die) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _release(cfg: ReleaseConfig, con: Console, models: Models,
             installation: Installation) -> ReleaseResult:
    schema = load_schema(cfg.schema)
    cfg.check(schema)
    key = load_private_key(cfg.release_key)
    _check_writable(cfg.out)
    person_field = _person_field(cfg, schema)
    unit = PrivacyUnit(UNIT_COL if person_field else None, cfg.privacy_unit.max_contributions)
    budget, sel = cfg.budget, cfg.selection
    ledger = LifetimeLedger(budget.lifetime_ledger, cfg.dataset, budget.lifetime_epsilon,
                            budget.lifetime_delta, installation)
    planned = budget.epsilon
    ledger_id = ledger.store.ledger_id()
    source, codebooks, embedder = None, {}, None
    if cfg.selects:  # load models before any row is read: failures cost nothing
        with con.status("loading the candidate generator and the embedder"):
            source = candidate_source(schema, sel.candidates, sel.model, sel.gpu_layers,
                                      sel.seed, models)
            kernel = Kernel(schema, None, KernelConfig(channels=sel.channels))
            if kernel.semantic_channels:  # numeric channels alone need no model
                kernel.embedder = embedder = models.embedder()
    if _uses_topics(cfg, schema):  # public inputs only, before any row is read
        with con.status("topic codebooks from public texts"):
            # one embedder (and private cache) for topics and selection: each text once
            embedder = embedder or models.embedder()
            codebooks = _codebooks(cfg, schema, source, embedder, models)
    rid = ledger.reserve(planned, cfg.release_delta, note=f"release to {cfg.out}")
    spent_eps, spent_delta = ledger.spent()
    cap_eps, cap_delta = ledger.caps()
    delta_note = f"; delta {spent_delta:g} of {cap_delta:g}" if cfg.release_delta else ""
    con.print(f"[bold]release[/] {cfg.dataset}: epsilon {planned:g} reserved in the lifetime "
              f"ledger ({spent_eps:g} of {cap_eps:g} now committed{delta_note})")
    log = EnclaveLog(cfg.enclave_log, tag=f"[{cfg.dataset} {rid}]")
    try:
        t0 = time.perf_counter()
        log.write(f"release started; epsilon {planned:g} reserved")
        with con.status("reading private rows (once)"):
            table = read_private_rows(cfg.source, schema, invalid=cfg.invalid_rows)
        _report_table(log, table)
        log.write(f"read and checked {table.frame.height} rows in "
                  f"{time.perf_counter() - t0:.2f} s")
        t_bind = time.perf_counter()
        # the people in these rows, matched to every person the ledger charged: refused if
        # one would pass their lifetime cap (or, asked to, left out before any mechanism)
        charge = ledger.charge_people(rid, table.frame, schema, person_field,
                                      cfg.leave_out_exhausted)
        if charge.left_out:
            table = replace(table, frame=table.frame.filter(pl.Series(charge.keep)))
            log.write(f"left out {charge.left_out} person(s) whose lifetime epsilon this "
                      "release would pass (--leave-out-exhausted)")
        return_freed_memory()
        log.write(f"charged {charge.people} people (the highest spend among them before: "
                  f"{charge.highest_before:g}) in {time.perf_counter() - t_bind:.2f} s")
        log.write(f"read, checked and charged the rows' people in "
                  f"{time.perf_counter() - t0:.2f} s")
    except BaseException:
        ledger.finish(rid, "aborted")
        raise
    lifetime = LifetimeStamp(ledger_id, cfg.dataset, rid, cap_eps, cap_delta, spent_eps,
                             spent_delta)
    # From here on DP mechanisms run: the reservation stands whatever happens.
    ledger.start_measuring(rid)
    t_counts = time.perf_counter()
    with con.status(f"noisy counts ({cfg.counts.mode}, OpenDP)"):
        frame = derive_frame(table.frame, schema, cfg.counts, person_field).collect()
        # the plan: one DP count of the rows, then each part sized from it and public facts
        size = measure_size(frame.lazy(), unit, size_epsilon(cfg))
        plan = plan_release(cfg, schema, size)
        log.write(f"plan: about {plan.rows} rows; vocabularies: "
                  f"{', '.join(plan.vocabulary_fields) or 'none'}")
        coded = _coded_rows(cfg, schema, table.frame, frame, unit, person_field, codebooks,
                            embedder, log, plan.vocabulary_fields)
        del frame
        if source is None:  # counts only: the typed rows are not read again (2.3 GB at
            del table  # 10^7 rows, no longer under the counts' peak)
        entries, counts_block, total, total_delta = _measure_counts(cfg, schema, coded, unit,
                                                                    codebooks, plan, size)
    log.write(f"counts ({cfg.counts.mode}) in {time.perf_counter() - t_counts:.2f} s")
    selection, run = None, None
    if source is not None:
        released = counts_view(counts_block)
        source.use_counts(released)  # LLM candidates take their fields from these counts
        t_selection = time.perf_counter()
        with con.status(f"selection ({sel.mode})") as status:
            rows = get(sel.mode).private_rows(table.frame, schema, person_field)
            t_features = time.perf_counter()
            priv = _private_classes(rows, schema, kernel, person_field)
            log.write(f"private features of {rows.height} rows in "
                      f"{time.perf_counter() - t_features:.2f} s")
            del rows
            del table
            run = run_selection(schema, priv, kernel, source, sel, budget.selection_epsilon,
                                cfg.selection_delta,
                                hints=released.class_hints(),
                                progress=_progress(con, log, status.update))
            del priv
        log.write(f"selection ({sel.mode}) in {time.perf_counter() - t_selection:.2f} s")
        entries += selection_entries(cfg, run)
        total += run.accounting.epsilon
        total_delta += run.accounting.delta
        selection = selection_section(cfg, kernel, source, run)
    if total > budget.epsilon + 1e-9 or total_delta > cfg.release_delta * (1 + 1e-9):
        raise RuntimeError("OpenDP accounting exceeds the configured budget")
    doc = build_document(cfg, schema, key_id(key.public_key()), entries, total,
                         counts_block, selection, total_delta,
                         run.accounting.mu if run is not None else None, lifetime,
                         source_key=ledger.store.key(), plan=plan)
    path = write_release(cfg.out, doc, cfg.release_key)
    write_review_html(cfg.out, doc)
    ledger.finish(rid, "released", epsilon=total, delta=total_delta)
    log.write(f"wrote and signed the artifact {time.perf_counter() - t0:.2f} s after the "
              f"start; epsilon {total:g}, delta {total_delta:g}")
    con.print(f"wrote and signed {path}; epsilon spent {total:g} of {budget.epsilon:g} "
              f"(timings and the invalid-row report: {cfg.enclave_log})")
    return ReleaseResult(path, doc)


def _progress(con: Console, log: EnclaveLog,
              update: Callable[[str], None]) -> Callable[[str], None]:
    """Spinner text on a terminal, plain lines otherwise (batch jobs); the timestamped copy
    goes to the enclave log only. Messages name rounds and classes, never private content."""
    def report(message: str) -> None:
        update(message)
        log.write(message)
        if not con.is_terminal:
            con.print(message)
    return report


@dataclass(frozen=True)
class CodedRows:
    """The private rows as the counts read them: one row each, of key, unit and topic codes
    (``frame``), and the phrase vocabularies released on the way (their ledger entries,
    and the (epsilon, delta) OpenDP reports spent); ``topics``: topics per text field."""

    frame: pl.DataFrame
    phrase_entries: list[LedgerEntry]
    vocab: dict[str, PhraseVocabulary]
    spent: tuple[float, float]
    topics: dict[str, int]


def _coded_rows(cfg: ReleaseConfig, schema: Schema, rows: pl.DataFrame, frame: pl.DataFrame,
                unit: PrivacyUnit, person_field: str | None, codebooks: dict[str, Any],
                embedder: Embedder | None, log: EnclaveLog,
                vocabulary_fields: tuple[str, ...]) -> CodedRows:
    """``rows`` (the private rows' typed frame) as codes (``frame``: `derive_frame`'s); in a
    model mode with free text, the DP phrase vocabulary of each of ``vocabulary_fields``
    first (its time goes to ``log``)."""
    if not cfg.counts.is_model:
        return CodedRows(frame, [], {}, (0.0, 0.0), {})
    t0 = time.perf_counter()
    phrase_entries, vocab, spent = _release_phrases(
        cfg, schema, rows, unit, frame[UNIT_COL] if person_field else None, vocabulary_fields)
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
    if vocabulary_fields or codebooks:  # timed also when a vocabulary released nothing
        log.write(f"phrase vocabulary and topic codes in {time.perf_counter() - t0:.2f} s")
    return CodedRows(frame, phrase_entries, vocab, spent, topics)


def _measure_counts(cfg: ReleaseConfig, schema: Schema, coded: CodedRows, unit: PrivacyUnit,
                    codebooks: dict[str, Any], plan: ReleasePlan, size: NoisyCount,
                    ) -> tuple[list[LedgerEntry], dict, float, float]:
    """The counts stage in the configured mode (`release.counts`) with the plan's workload,
    after the row count and the phrase vocabularies: ledger entries, the artifact's counts
    block, and the (epsilon, delta) OpenDP's maps give, the count's and the vocabularies'
    included."""
    vocab, spent = coded.vocab, coded.spent
    topic_records = {name: cb.to_record() for name, cb in codebooks.items()}
    topic_records |= {name: phrase_topics(v) for name, v in vocab.items()}
    rows = CountsRows(coded.frame, unit, coded.topics, {n: v.slots for n, v in vocab.items()},
                      topic_records, plan.workload)
    budget = CountsBudget(cfg.budget.counts_epsilon - size.epsilon - spent[0],
                          cfg.counts_delta - spent[1])
    out = measure(rows, schema, cfg.counts, budget)
    size_entry = LedgerEntry(
        SIZE_ID, f"{size.mechanism} count of the rows, each person's cut to their bound: the "
        "size the release's plan is sized by", SIZE_CONSTRUCTOR, size.scale, size.epsilon, 0.0,
        "all rows", "sequential with the other count queries and the selection")
    return ([size_entry, *coded.phrase_entries, *out.entries], out.block,
            size.epsilon + out.epsilon + spent[0], out.delta + spent[1])


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


def _release_phrases(cfg: ReleaseConfig, schema: Schema, rows: pl.DataFrame,
                     unit: PrivacyUnit, ids: pl.Series | None, fields: tuple[str, ...],
                     ) -> tuple[list[LedgerEntry], dict[str, PhraseVocabulary],
                                tuple[float, float]]:
    """The DP phrase vocabulary of each of ``fields`` (those the plan runs), each at its
    `vocabulary_budget`; fields where OpenDP released no phrase get no topic column.
    ``ids``: each row's unit code (person unit), else None. Returns the ledger entries, the
    vocabularies and the (epsilon, delta) OpenDP reports spent."""
    if not fields:
        return [], {}, (0.0, 0.0)
    c = cfg.counts
    eps, delta = vocabulary_budget(cfg, len(cfg.phrase_fields(schema)))
    deny, deny_sha = read_denylist(c.deny) if c.deny is not None else (frozenset(), None)
    entries, vocab, spent = [], {}, [0.0, 0.0]
    for name in fields:
        kind, per_unit, slots = c.terms(schema.field(name))
        v = release_phrases(name, rows[name].cast(pl.String),
                            unit, ids, eps, delta, per_unit, c.max_phrases, kind, deny, slots)
        spent[0] += v.epsilon
        spent[1] += v.delta
        entries.append(LedgerEntry(
            f"counts/{kind}/{name}", f"{v.mechanism} counts of the {kind} of normalised "
            f"texts, released above OpenDP's threshold {v.threshold} ({len(v.phrases)} "
            f"{kind})", PHRASES_CONSTRUCTOR, v.scale, v.epsilon, v.delta,
            f"field '{name}': each unit counts for at most {v.per_unit} of its {kind}",
            "sequential with the other count queries and the selection", "(epsilon, delta)-DP"))
        if v.phrases:
            vocab[name] = v
    if deny_sha is not None:  # which denylist, never its lines
        vocab = {n: replace(v, denylist={"sha256": deny_sha, "entries": len(deny)})
                 for n, v in vocab.items()}
    return entries, vocab, (spent[0], spent[1])


def _uses_topics(cfg: ReleaseConfig, schema: Schema) -> bool:
    return cfg.topics > 0 and bool(schema.by_kind("text"))


def _codebooks(cfg: ReleaseConfig, schema: Schema, source: CandidateSource | None,
               embedder: Embedder, models: Models) -> dict[str, Any]:
    """Per free-text field, k public anchor texts: from the pool, or from LLM candidates
    (the selection's source when it runs, else one made from the same settings)."""
    sel = cfg.selection
    if source is None:
        source = candidate_source(schema, sel.candidates, sel.model, sel.gpu_layers, sel.seed,
                                  models)
    return {name: build_codebook(name, texts, cfg.topics, embedder, sel.seed, label)
            for name, (texts, label) in public_topic_texts(source, schema,
                                                           TOPIC_TEXTS_PER_CLASS).items()}


def _private_classes(priv_rows: pl.DataFrame, schema: Schema, kernel: Kernel,
                     person_field: str | None) -> PrivateClasses:
    """Private features per class (``priv_rows``: a frame typed by the schema, read by
    column), computed once and kept in memory only."""
    by_class = {c: priv_rows.filter(pl.col(schema.label) == c) for c in schema.classes}
    return PrivateClasses(
        priv_features={c: kernel.featurize_private(rows)  # each row's from that row alone
                       for c, rows in by_class.items() if rows.height},
        priv_unit_ids={c: unit_ids(rows, schema, person_field)
                       for c, rows in by_class.items()})


def selection_entries(cfg: ReleaseConfig, run: SelectionRun) -> list[LedgerEntry]:
    """Ledger entries of the selection: the mode's rounds, then the accounting's own."""
    return (get(cfg.selection.mode).ledger_entries(cfg.selection, run)
            + accounting.closing_entries(run))


def selection_section(cfg: ReleaseConfig, kernel: Kernel, source: CandidateSource,
                      run: SelectionRun) -> dict[str, Any]:
    sel = cfg.selection
    mode = get(sel.mode)
    rounds = run.rounds
    d = mode.descriptor
    out: dict[str, Any] = {
        "mode": sel.mode,
        # what review and decode need of the mode, so a plugin's mode reads off-site
        "mode_description": {"accounting": d.accounting, "review": d.review,
                             "mechanism": d.mechanism, "person_bounding": d.person_bounding},
        "T": sel.rounds, "K": sel.k, "b": sel.batches, "q": sel.q,
        **({"utility": sel.settings.utility} if sel.mode == "selpe" else {}),
        "schedule": [r.epsilon if r.rho is None else r.rho for r in rounds],
        "epsilon": run.accounting.epsilon,
        "accounting": json_form(run.accounting),
        "kernel": kernel.to_json(),
        "candidates": source.describe(),
        "rounds": [json_form(r.to_record(sel.k * r.quota)) for r in rounds],
    }
    block = mode.artifact_block(sel)
    if block is not None and mode.descriptor.block_key is not None:
        out[mode.descriptor.block_key] = json_form(block)
    return out


def build_document(cfg: ReleaseConfig, schema: Schema, release_key_id: str,
                   entries: list[LedgerEntry], total: float, counts: dict[str, Any],
                   selection: dict[str, Any] | None = None, total_delta: float = 0.0,
                   selection_mu: float | None = None,
                   lifetime: LifetimeStamp | None = None, *,
                   source_key: bytes, plan: ReleasePlan | None = None) -> dict[str, Any]:
    """The artifact's document; ``source_key``: the enclave secret that keys a database
    query's HMAC (the ledger folder's key); ``plan``: what the release sized to the table."""
    budget, counts_cfg = cfg.budget, cfg.counts
    unit = privacy_unit_block(cfg, schema, selection is not None)
    guarantees = derived_guarantees(total, total_delta, unit)
    if selection_mu is not None:
        guarantees = replace(guarantees, selection_gdp=gdp_interpretation(
            selection_mu, counts=counts_accounting(cfg, entries)))
    vocabularies = plan.vocabulary_fields if plan is not None else cfg.phrase_fields(schema)
    caps = ((budget.lifetime_epsilon, budget.lifetime_delta) if lifetime is None else
            (lifetime.lifetime_epsilon, lifetime.lifetime_delta))
    budget_block = Budget(
        budget.epsilon, cfg.release_delta,
        {"counts": budget.counts_share, "selection": budget.selection_share},
        counts={"mode": counts_cfg.mode, "class_share": counts_cfg.class_share,
                "topic_share": (counts_cfg.topic_share if counts_cfg.mode == "fixed" and
                                _has_topic_columns(counts) else 0.0),
                "topics": cfg.topics,
                "phrase_share": counts_cfg.phrase_share if vocabularies else 0.0,
                "delta": cfg.counts_delta,
                "gamma": counts_cfg.table_shares(schema)[0],
                "alpha": counts_cfg.table_shares(schema)[1],
                "n_min": counts_cfg.n_min},
        lifetime_epsilon=caps[0], lifetime_delta=caps[1], lifetime_ledger=lifetime,
        plan=plan.record if plan is not None else None,
        leave_out_exhausted=cfg.leave_out_exhausted or None)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tool": tool_versions(),
        "dataset": cfg.dataset,
        "source": source_description(cfg.source, source_key),
        "schema": schema.public_json(),
        "schema_sha256": schema.sha256(),
        "privacy_unit": unit,
        "release_key_id": release_key_id,
        "budget": json_form(budget_block),
        "ledger": ledger_block(entries, total,
                               _accountant(cfg, bool(vocabularies), selection_mu,
                                           selection is not None), total_delta),
        "guarantees": json_form(guarantees),
        "counts": counts,
        "selection": selection,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _has_topic_columns(counts: dict[str, Any]) -> bool:
    """Whether the released model has a free-text topic column (topic_share applies)."""
    return any(c["kind"] == "topic" for c in (counts.get("model") or {}).get("columns", []))


def counts_accounting(cfg: ReleaseConfig, entries: list[LedgerEntry]) -> str:
    """The noisy counts' accounting in words, from their ledger entries: pure epsilon-DP in
    "marginals", else rho-zCDP with OpenDP's (epsilon, delta) conversion (and the phrase
    vocabularies' own (epsilon, delta))."""
    counts = [e for e in entries if e.id.startswith("counts/")]
    if not cfg.counts.needs_delta:
        return f"pure epsilon-DP (epsilon {sum(e.epsilon for e in counts):.4g})"
    conv = next(e for e in counts if e.id == CONVERSION_ID)
    words = (f"rho-zCDP (rho {conv.rho:.4g}, which OpenDP converts to "
             f"({conv.epsilon:.4g}, {conv.delta:.3g})-DP)")
    size = next((e for e in counts if e.id == SIZE_ID), None)
    if size is not None:
        words += f" plus the row count's pure epsilon {size.epsilon:.4g}"
    phrases = [e for e in counts if e.id not in (conv.id, SIZE_ID)
               and e.accounting != "rho-zCDP"]
    if phrases:
        words += (f" plus ({sum(e.epsilon for e in phrases):.4g}, "
                  f"{sum(e.delta for e in phrases):.3g})-DP phrase vocabularies")
    return words


def _accountant(cfg: ReleaseConfig, vocabularies: bool, selection_mu: float | None,
                selects: bool) -> str:
    """How the ledger's entries add up, in words: the plan's row count, the phrase
    vocabularies (if any ran), the counts mode's own accountant, the selection's; the parts
    compose sequentially."""
    parts = [SIZE_ACCOUNTANT, *([PHRASES_ACCOUNTANT] if vocabularies else [])]
    parts.append(counts_mode(cfg.counts.mode).accountant)
    if selects:
        parts.append(GAUSSIAN_SELECTION_ACCOUNTANT if selection_mu is not None
                     else PURE_SELECTION_ACCOUNTANT)
    return (f"OpenDP: {'; '.join(parts)}. The parts compose sequentially (epsilons and "
            "deltas add), each entry's epsilon from OpenDP's privacy map")


def privacy_unit_block(cfg: ReleaseConfig, schema: Schema, selects: bool) -> dict[str, Any]:
    """The unit, what the guarantee protects, and how each mechanism bounds one unit."""
    pu = cfg.privacy_unit.resolved(schema)
    if pu.unit == "person":
        bounding = {"counts": f"OpenDP truncate_per_group: each person's rows are cut to a "
                              f"random sample of at most {pu.max_contributions} before every "
                              "count"}
        if selects:
            bounding["selection"] = get(cfg.selection.mode).descriptor.person_bounding
        unit = records.PrivacyUnit("person", pu.id_field or schema.id_field, pu.max_contributions)
    else:
        bounding = {"counts": "each row is counted once per query",
                    "group": "a person with m rows is protected at m times epsilon"}
        if selects:
            bounding["selection"] = "each row sits in one batch of its class per round"
        unit = records.PrivacyUnit("row")
    return json_form(replace(unit, protects=protects(json_form(unit)), bounding=bounding))


def _person_field(cfg: ReleaseConfig, schema: Schema) -> str | None:
    pu = cfg.privacy_unit.resolved(schema)
    return None if pu.unit == "row" else (pu.id_field or schema.id_field)


def _check_writable(out: Path) -> None:
    """The artifact folder can be written, and no symlink can send a write elsewhere: the
    folder, the folders on its path and everything already in it are no symlinks."""
    absolute = Path(os.path.abspath(out))
    for p in [absolute, *absolute.parents]:
        if p.is_symlink():
            raise UserError(f"{out}: {p} is a symlink; give --out a real folder (a release "
                            "must not write, or delete, files where a link points)")
    if out.is_dir():
        for root, dirs, files in os.walk(out):
            for name in [*dirs, *files]:
                if (Path(root) / name).is_symlink():
                    raise UserError(f"{out}: it holds a symlink ({Path(root) / name}); give "
                                    "--out a folder without links, or a new one")
    probe = out if out.exists() else next((p for p in out.parents if p.exists()), Path("."))
    if not os.access(probe, os.W_OK):
        raise UserError(f"{out}: output folder is not writable")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder")


def _report_table(log: EnclaveLog, table: PrivateTable) -> None:
    """Enclave log only: the number of invalid rows is private and never shipped."""
    if table.ignored_columns:
        log.write(f"ignored {len(table.ignored_columns)} column(s) not in the schema: "
                  f"{', '.join(table.ignored_columns)}")
    if table.dropped_rows:
        log.write(f"dropped {table.dropped_rows} invalid row(s) (--invalid-rows drop); "
                  "first problems:")
        for p in table.problems[:10]:
            log.write(f"  row {p.row}, field '{p.field}': {p.reason}")
