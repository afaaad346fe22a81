"""SelPE's selection of exemplars among public candidates, when the budget gives it a share:
the private rows' features per class (computed once, kept in memory only), the mode's rounds
(`release.selection.run_selection`), and the artifact's ``selection`` block."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl
from rich.console import Console

from release.config import ReleaseConfig
from release.enclave_log import EnclaveLog
from release.selection import (
    PrivateClasses,
    SelectionRun,
    accounting,
    get,
    run_selection,
    unit_ids,
)
from release.selection.candidates import CandidateSource
from release.spent import Spent
from selpe_audit.artifact.records import (
    LedgerEntry,
    SelectionAccounting,
    SelectionRound,
    json_form,
)
from selpe_audit.artifact.view import Counts
from selpe_audit.kernel.distance import Kernel
from selpe_audit.schema import Schema


@dataclass(frozen=True)
class SelectionPart:
    """The document's ``selection`` as the release made it: the mode, what review and
    decode need of it (its description, the settings its descriptor names, its own block),
    the rounds and their accounting; JSON once the document is written (the artifact's
    reading of it is `selpe_audit.artifact.records.SelectionBlock`)."""

    mode: str
    mode_description: dict[str, str]
    rounds_t: int
    k: int
    batches: int
    q: float
    settings: dict[str, Any]  # the descriptor's section settings, by name
    schedule: tuple[float, ...]
    accounting: SelectionAccounting
    kernel: dict[str, Any]
    candidates: dict[str, Any]
    rounds: tuple[SelectionRound, ...]
    mode_block: tuple[str, Any] | None  # (the descriptor's key, the mode's own record)

    def to_json(self) -> dict[str, Any]:
        """The block as the artifact stores it."""
        out: dict[str, Any] = {
            "mode": self.mode, "mode_description": self.mode_description,
            "T": self.rounds_t, "K": self.k, "b": self.batches, "q": self.q,
            **self.settings, "schedule": list(self.schedule),
            "epsilon": self.accounting.epsilon, "accounting": json_form(self.accounting),
            "kernel": self.kernel, "candidates": self.candidates,
            "rounds": [json_form(r) for r in self.rounds]}
        if self.mode_block is not None:
            out[self.mode_block[0]] = json_form(self.mode_block[1])
        return out


@dataclass(frozen=True)
class SelectionReleased:
    """The selection's block, its ledger entries and spend, and the rounds' Gaussian mu
    (None for a pure-epsilon mode)."""

    block: SelectionPart
    entries: list[LedgerEntry]
    spent: Spent
    mu: float | None


def private_features(cfg: ReleaseConfig, schema: Schema, rows: pl.DataFrame, kernel: Kernel,
                     person_field: str | None, log: EnclaveLog) -> PrivateClasses:
    """The rows the selection mode may read (selpe: one class per person), as features per
    class; the time goes to ``log``."""
    t0 = time.perf_counter()
    mine = get(cfg.selection.mode).private_rows(rows, schema, person_field)
    priv = private_classes(mine, schema, kernel, person_field)
    log.write(f"private features of {mine.height} rows in {time.perf_counter() - t0:.2f} s")
    return priv


def private_classes(priv_rows: pl.DataFrame, schema: Schema, kernel: Kernel,
                    person_field: str | None) -> PrivateClasses:
    """Private features per class (``priv_rows``: a frame typed by the schema, read by
    column), computed once and kept in memory only."""
    by_class = {c: priv_rows.filter(pl.col(schema.label) == c) for c in schema.classes}
    return PrivateClasses(
        priv_features={c: kernel.featurize_private(rows)  # each row's from that row alone
                       for c, rows in by_class.items() if rows.height},
        priv_unit_ids={c: unit_ids(rows, schema, person_field)
                       for c, rows in by_class.items()})


def select_exemplars(cfg: ReleaseConfig, schema: Schema, priv: PrivateClasses,
                     kernel: Kernel, source: CandidateSource, released: Counts,
                     progress: Callable[[str], None]) -> SelectionReleased:
    """The selection's rounds on ``priv``; LLM candidates take their fields from the
    ``released`` counts, which also give the rounds their public hints."""
    source.use_counts(released)
    run = run_selection(schema, priv, kernel, source, cfg.selection,
                        cfg.budget.selection_epsilon, cfg.selection_delta,
                        hints=released.class_hints(), progress=progress)
    return SelectionReleased(selection_block(cfg, kernel, source, run),
                             selection_entries(cfg, run),
                             Spent(run.accounting.epsilon, run.accounting.delta),
                             run.accounting.mu)


def selection_entries(cfg: ReleaseConfig, run: SelectionRun) -> list[LedgerEntry]:
    """Ledger entries of the selection: the mode's rounds, then the accounting's own."""
    return (get(cfg.selection.mode).ledger_entries(cfg.selection, run)
            + accounting.closing_entries(run))


def selection_block(cfg: ReleaseConfig, kernel: Kernel, source: CandidateSource,
                    run: SelectionRun) -> SelectionPart:
    """The selection's block: the rounds and what review and decode need of the mode (so a
    plugin's mode reads off-site)."""
    sel = cfg.selection
    mode = get(sel.mode)
    d = mode.descriptor
    block = mode.artifact_block(sel)
    return SelectionPart(
        sel.mode,
        {"accounting": d.accounting, "review": d.review, "mechanism": d.mechanism,
         "person_bounding": d.person_bounding},
        sel.rounds, sel.k, sel.batches, sel.q,
        {name: getattr(sel.settings, name) for name in d.section_settings},
        tuple(r.epsilon if r.rho is None else r.rho for r in run.rounds),
        run.accounting, kernel.to_json(), source.describe(),
        tuple(r.to_record(sel.k * r.quota) for r in run.rounds),
        (d.block_key, block) if block is not None and d.block_key is not None else None)


def progress_reporter(con: Console, log: EnclaveLog,
                      update: Callable[[str], None]) -> Callable[[str], None]:
    """Spinner text on a terminal, plain lines otherwise (batch jobs); the timestamped copy
    goes to the enclave log only. Messages name rounds and classes, never private content."""
    def report(message: str) -> None:
        update(message)
        log.write(message)
        if not con.is_terminal:
            con.print(message)
    return report
