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
from selpe_audit.artifact.records import LedgerEntry, json_form
from selpe_audit.artifact.view import counts_view
from selpe_audit.kernel.distance import Kernel
from selpe_audit.schema import Schema


@dataclass(frozen=True)
class SelectionReleased:
    """The artifact's ``selection`` block, its ledger entries and spend, and the rounds'
    Gaussian mu (None for a pure-epsilon mode)."""

    block: dict[str, Any]
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
                     kernel: Kernel, source: CandidateSource, counts_block: dict[str, Any],
                     progress: Callable[[str], None]) -> SelectionReleased:
    """The selection's rounds on ``priv``; LLM candidates take their fields from the
    released counts, which also give the rounds their public hints."""
    released = counts_view(counts_block)
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
                    run: SelectionRun) -> dict[str, Any]:
    """The artifact's ``selection``: the rounds and what review and decode need of the mode
    (its description, the settings its descriptor names, its own block)."""
    sel = cfg.selection
    mode = get(sel.mode)
    d = mode.descriptor
    out: dict[str, Any] = {
        "mode": sel.mode,
        # what review and decode need of the mode, so a plugin's mode reads off-site
        "mode_description": {"accounting": d.accounting, "review": d.review,
                             "mechanism": d.mechanism, "person_bounding": d.person_bounding},
        "T": sel.rounds, "K": sel.k, "b": sel.batches, "q": sel.q,
        **{name: getattr(sel.settings, name) for name in d.section_settings},
        "schedule": [r.epsilon if r.rho is None else r.rho for r in run.rounds],
        "epsilon": run.accounting.epsilon,
        "accounting": json_form(run.accounting),
        "kernel": kernel.to_json(),
        "candidates": source.describe(),
        "rounds": [json_form(r.to_record(sel.k * r.quota)) for r in run.rounds],
    }
    block = mode.artifact_block(sel)
    if block is not None and d.block_key is not None:
        out[d.block_key] = json_form(block)
    return out


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
