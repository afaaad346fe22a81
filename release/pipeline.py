"""The release, step by step: check, reserve budget, read once, measure, write, sign.

Only DP outputs (and post-processing of them) go into the artifact. The console shows
progress and the invalid-row report (row numbers and reasons only); neither is shipped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from release.candidates import candidate_source
from release.config import ReleaseConfig
from release.counts import UNIT_COL, counts_section, derive_frame, plan_queries
from release.ledger import LedgerEntry, LifetimeLedger, ledger_block
from release.opendp_mechanisms import (
    CONVERSION_CONSTRUCTOR,
    GAUSSIAN_CONSTRUCTOR,
    PrivacyUnit,
    release_counts,
)
from release.private_data import PrivateTable, read_private_rows
from release.selection import (
    CONSTRUCTOR,
    PrivateClasses,
    RoundOutput,
    SelectionRun,
    one_class_per_unit,
    run_selection,
    unit_id_of,
)
from selpe_audit.artifact.document import FORMAT, FORMAT_VERSION, tool_versions, write_release
from selpe_audit.kernel.embeddings import Embedder
from selpe_audit.errors import UserError
from selpe_audit.artifact.guarantees import derived_guarantees, gdp_interpretation
from selpe_audit.kernel.distance import Kernel, KernelConfig
from selpe_audit.review.page import write_review_html
from selpe_audit.schema import Schema, load_schema
from selpe_audit.artifact.signing import key_id, load_private_key

ACCOUNTANT = ("OpenDP: a Context compositor over the count queries and an adaptive "
              "compositor over the selection rounds, each entry's epsilon from its privacy "
              "map; the two parts compose sequentially (total = their sum)")
GAUSSIAN_ACCOUNTANT = (
    "OpenDP: a Context compositor over the count queries (pure epsilon-DP) and an adaptive "
    "compositor in zero-concentrated DP over the Gaussian selection rounds (rho adds up), "
    "whose total rho OpenDP converts to (epsilon, delta) at the configured delta "
    "(selection/zcdp-to-approx-dp); the two parts compose sequentially (epsilons add, the "
    "delta is the selection's). Round entries state rho and mu; their epsilon is counted "
    "in the conversion entry.")
MECHANISMS = {"pe-histogram": "Gaussian noise on the vote histogram (pe-histogram)",
              "representatives": "Gaussian noise on anchor counts and clipped offset sums "
                                 "(representatives, SecPE)"}


@dataclass(frozen=True)
class ReleaseResult:
    path: Path
    doc: dict[str, Any]


def run_release(cfg: ReleaseConfig, console: Console | None = None) -> ReleaseResult:
    con = console or Console(stderr=True, highlight=False)
    schema = load_schema(cfg.schema)
    cfg.check(schema)
    key = load_private_key(cfg.release_key)
    _check_writable(cfg.out)
    person_field = _person_field(cfg, schema)
    unit = PrivacyUnit(UNIT_COL if person_field else None, cfg.max_contributions)

    ledger = LifetimeLedger(cfg.lifetime_ledger, cfg.dataset, cfg.lifetime_epsilon,
                            cfg.lifetime_delta)
    planned = cfg.epsilon
    source = None
    if cfg.selection_share > 0:  # load models before any row is read: failures cost nothing
        with con.status("loading the candidate generator and the embedder"):
            source = candidate_source(schema, cfg.candidates, cfg.model, cfg.gpu_layers,
                                      cfg.generation_seed)
            kernel = Kernel(schema, Embedder(), KernelConfig(channels=cfg.channels))
    rid = ledger.reserve(planned, cfg.selection_delta, note=f"release to {cfg.out}")
    spent_eps, spent_delta = ledger.spent()
    delta_note = (f"; delta {spent_delta:g} of {cfg.lifetime_delta:g}"
                  if cfg.selection_delta else "")
    con.print(f"[bold]release[/] {cfg.dataset}: epsilon {planned:g} reserved in the lifetime "
              f"ledger ({spent_eps:g} of {cfg.lifetime_epsilon:g} now committed{delta_note})")
    try:
        t0 = time.perf_counter()
        with con.status("reading private rows (once)"):
            table = read_private_rows(cfg.data, schema, invalid=cfg.invalid_rows)
        _report_table(con, cfg, table)
    except BaseException:
        ledger.finish(rid, "aborted")
        raise
    # From here on DP mechanisms run: the reservation stands whatever happens.
    with con.status("noisy counts (OpenDP)"):
        frame = derive_frame(table.priv_rows, schema, cfg, person_field)
        counts = release_counts(frame, unit, plan_queries(schema, cfg))
    entries = [LedgerEntry(r.id, r.mechanism, r.constructor, r.scale, r.epsilon, 0.0, r.scope,
                           r.composition) for r in counts.results]
    counts_block = counts_section(schema, cfg, counts)
    total, total_delta = counts.total_epsilon, 0.0
    selection, run = None, None
    if source is not None:
        with con.status(f"selection ({cfg.selection_mode})") as status:
            rows = table.priv_rows
            if cfg.selection_mode == "selpe":  # the Gaussian modes weight rows instead
                rows = one_class_per_unit(rows, schema, person_field)
            priv = _private_classes(rows, schema, kernel, person_field)
            del rows
            del table
            run = run_selection(schema, priv, kernel, source, cfg.selection_config(),
                                cfg.selection_epsilon, cfg.selection_delta,
                                hints=class_hints(counts_block),
                                progress=_progress(con, status.update))
            del priv
        entries += selection_entries(cfg, run)
        total += run.accounting.epsilon
        total_delta = run.accounting.delta
        selection = selection_section(cfg, kernel, source, run)
    if total > cfg.epsilon + 1e-9 or total_delta > cfg.selection_delta * (1 + 1e-9):
        raise RuntimeError("OpenDP accounting exceeds the configured budget")
    doc = build_document(cfg, schema, key_id(key.public_key()), entries, total,
                         counts_block, selection, total_delta,
                         run.accounting.mu if run is not None else None)
    path = write_release(cfg.out, doc, cfg.release_key)
    write_review_html(cfg.out, doc)
    ledger.finish(rid, "released", epsilon=total, delta=total_delta)
    con.print(f"wrote and signed {path} in {time.perf_counter() - t0:.1f} s; "
              f"epsilon spent {total:g} of {cfg.epsilon:g}")
    return ReleaseResult(path, doc)


def _progress(con: Console, update: Callable[[str], None]) -> Callable[[str], None]:
    """Spinner text on a terminal; timestamped lines in a log file (batch jobs in the enclave).
    Progress messages name rounds and classes only, never private content."""
    def report(message: str) -> None:
        update(message)
        if not con.is_terminal:
            con.print(f"{time.strftime('%H:%M:%S')} {message}")
    return report


def _private_classes(priv_rows: list[dict[str, Any]], schema: Schema, kernel: Kernel,
                     person_field: str | None) -> PrivateClasses:
    """Private features per class, computed once and kept in memory only."""
    by_class: dict[Any, list[dict[str, Any]]] = {c: [] for c in schema.classes}
    for row in priv_rows:
        by_class[row[schema.label]].append(row)
    return PrivateClasses(
        priv_features={c: kernel.featurize(rows) for c, rows in by_class.items() if rows},
        priv_unit_ids={c: [unit_id_of(r, schema, person_field) for r in rows]
                       for c, rows in by_class.items()})


def class_hints(counts: dict[str, Any]) -> dict[Any, dict[str, str]]:
    """Post-processing of DP counts: each class's most frequent category or bin per field."""
    classes = counts["class_balance"]["classes"]
    hints: dict[Any, dict[str, str]] = {c: {} for c in classes}
    for name, h in counts["histograms"].items():
        for c, row in zip(classes, h["dp_counts_by_class"], strict=True):
            hints[c][name] = str(h["keys"][max(range(len(row)), key=row.__getitem__)])
    return hints


def selection_entries(cfg: ReleaseConfig, run: SelectionRun) -> list[LedgerEntry]:
    """Ledger entries of the selection: one per round (plus the zCDP conversion)."""
    if cfg.selection_mode == "selpe":
        return [LedgerEntry(
            f"selection/round/{r.round}", "report noisy max per batch", CONSTRUCTOR, r.scale,
            float(r.epsilon or 0.0), 0.0,
            f"round {r.round}: every class, {cfg.batches} disjoint batches each",
            "parallel across batches and classes; sequential across rounds (OpenDP adaptive "
            "composition)") for r in run.rounds]
    acc = run.accounting
    entries = [LedgerEntry(
        f"selection/round/{r.round}", MECHANISMS[cfg.selection_mode], GAUSSIAN_CONSTRUCTOR,
        r.scale, 0.0, 0.0,
        f"round {r.round}: every class in one Gaussian (L2 sensitivity {r.sensitivity:.4g} "
        "per privacy unit)",
        "sequential across rounds in zCDP (OpenDP adaptive composition); its epsilon and "
        "delta are in selection/zcdp-to-approx-dp", "rho-zCDP", rho=r.rho, mu=r.mu)
        for r in run.rounds]
    entries.append(LedgerEntry(
        "selection/zcdp-to-approx-dp", "conversion of the rounds' total rho-zCDP to "
        "(epsilon, delta) (no noise of its own)", CONVERSION_CONSTRUCTOR, 0.0, acc.epsilon,
        acc.delta, f"all {len(run.rounds)} selection rounds: rho {acc.rho:.6g}, mu "
        f"{acc.mu:.6g}", "sequential with the counts (epsilons add)",
        "(epsilon, delta)-DP from rho-zCDP", rho=acc.rho, mu=acc.mu))
    return entries


def _round_json(r: RoundOutput, pool_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {"round": r.round, "epsilon": r.epsilon, "scale": r.scale,
                           "quota": r.quota, "pool_size": pool_size, "classes": r.classes}
    if r.rho is not None:
        out.update(rho=r.rho, mu=r.mu, sensitivity=r.sensitivity)
    return out


def selection_section(cfg: ReleaseConfig, kernel: Kernel, source: Any,
                      run: SelectionRun) -> dict[str, Any]:
    sel = cfg.selection_config()
    rounds = run.rounds
    out: dict[str, Any] = {
        "mode": sel.mode,
        "T": sel.rounds, "K": sel.k, "b": sel.batches, "q": sel.q,
        "schedule": [r.epsilon if r.rho is None else r.rho for r in rounds],
        "epsilon": run.accounting.epsilon,
        "accounting": run.accounting.to_json(),
        "kernel": kernel.to_json(),
        "candidates": source.describe(),
        "rounds": [_round_json(r, sel.k * r.quota) for r in rounds],
    }
    if sel.mode == "pe-histogram":
        out["pe_histogram"] = {
            "threshold_noise_scales": sel.threshold,
            "votes": "each private row votes for its nearest candidate (kernel distance) "
                     "with weight 1 / (its privacy unit's rows): L2 sensitivity 1",
            "survivors": "candidates with noisy votes above threshold x scale, most votes "
                         "first, up to the quota (at least the top one)"}
    elif sel.mode == "representatives":
        out["representatives"] = {
            "anchors": sel.anchors or "the round's quota", "radius": sel.radius,
            "dims": sel.dims,
            "skeleton": "k-means anchors and a PCA basis of the round's candidates (public)",
            "votes": "noisy center = anchor + basis (noisy offset sum / max(noisy count, 1)); "
                     "each votes for its nearest candidate with its noisy count"}
    return out


def build_document(cfg: ReleaseConfig, schema: Schema, release_key_id: str,
                   entries: list[LedgerEntry], total: float, counts: dict[str, Any],
                   selection: dict[str, Any] | None = None, total_delta: float = 0.0,
                   selection_mu: float | None = None) -> dict[str, Any]:
    guarantees = derived_guarantees(total, total_delta)
    if selection_mu is not None:
        guarantees["selection_gdp"] = gdp_interpretation(selection_mu)
    unit: dict[str, Any] = {"unit": cfg.unit}
    if cfg.unit == "person":
        unit.update(id_field=cfg.id_field or schema.id_field,
                    max_contributions=cfg.max_contributions,
                    bounding="OpenDP truncate_per_group: a random sample of each person's rows")
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "tool": tool_versions(),
        "dataset": cfg.dataset,
        "schema": schema.public_json(),
        "schema_sha256": schema.sha256(),
        "privacy_unit": unit,
        "release_key_id": release_key_id,
        "budget": {"epsilon": cfg.epsilon, "delta": cfg.selection_delta,
                   "split": {"counts": cfg.counts_share, "selection": cfg.selection_share},
                   "counts": {"gamma": cfg.gamma if cfg.cohorts else 0.0,
                              "alpha": cfg.alpha if cfg.rates else 0.0, "n_min": cfg.n_min},
                   "lifetime_epsilon": cfg.lifetime_epsilon,
                   "lifetime_delta": cfg.lifetime_delta},
        "ledger": ledger_block(entries, total,
                               GAUSSIAN_ACCOUNTANT if selection_mu is not None else ACCOUNTANT,
                               total_delta),
        "guarantees": guarantees,
        "counts": counts,
        "selection": selection,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _person_field(cfg: ReleaseConfig, schema: Schema) -> str | None:
    return None if cfg.unit == "row" else (cfg.id_field or schema.id_field)


def _check_writable(out: Path) -> None:
    probe = out if out.exists() else next((p for p in out.parents if p.exists()), Path("."))
    if not os.access(probe, os.W_OK):
        raise UserError(f"{out}: output folder is not writable")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder")


def _report_table(con: Console, cfg: ReleaseConfig, table: PrivateTable) -> None:
    """Enclave console only: counts of invalid rows are private and never shipped."""
    if table.ignored_columns:
        con.print(f"ignored {len(table.ignored_columns)} column(s) not in the schema: "
                  f"{', '.join(table.ignored_columns)}")
    if table.dropped_rows:
        con.print(f"[yellow]dropped {table.dropped_rows} invalid row(s) "
                  "(--invalid-rows drop); first problems:[/]")
        for p in table.problems[:10]:
            con.print(f"  {cfg.data}: row {p.row}, field '{p.field}': {p.reason}")
