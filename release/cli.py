"""``selpe-audit release``: the enclave stage's command."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields
from typing import Any

from rich.console import Console
from rich.table import Table

from release.config import (
    COUNTS_MODES,
    DEFAULT_DELTA,
    DEFAULT_EPSILON,
    DEFAULT_LIFETIME_DELTA,
    DEFAULT_LIFETIME_EPSILON,
    DEFAULT_TOPICS,
    UTILITIES,
    BudgetConfig,
    PrivacyUnitConfig,
    SelectionConfig,
    load_config,
)
from release.pipeline import run_release
from selpe_audit.artifact.modes import mode_names, modes, or_list
from selpe_audit.cli.command import Command


def _default(cls: type, name: str) -> Any:
    """A config field's default, so that --help states what a run really uses."""
    (f,) = [f for f in fields(cls) if f.name == name]
    assert f.default is not MISSING, name
    return f.default


def _add_arguments(p: argparse.ArgumentParser) -> None:
    default = {n: _default(SelectionConfig, n) for n in ("rounds", "batches", "k")}
    p.add_argument("--config", help="release TOML file (see examples/release.toml)")
    p.add_argument("--data", help="private rows: .csv, .parquet or .jsonl, or a database "
                                  "postgresql://user@host[:port]/db (password from PGPASSWORD "
                                  "or PGPASSFILE, never here) with --query or --table")
    p.add_argument("--query", help="with a database --data: the SELECT that returns the rows "
                                   "(run once, read-only, in one repeatable-read snapshot)")
    p.add_argument("--table", help="with a database --data: read schema.name whole")
    p.add_argument("--schema", help="dataset schema (JSON Schema with x-label, x-bins)")
    p.add_argument("--dataset", help="dataset name (the lifetime ledger is per dataset)")
    p.add_argument("--out", help="artifact folder to write (default out/release)")
    p.add_argument("--key", dest="release_key", help="release signing key (PEM)")
    p.add_argument("--epsilon", type=float,
                   help=f"total epsilon of this release (default {DEFAULT_EPSILON:g})")
    p.add_argument("--delta", type=float,
                   help="the release's total delta, split over its zCDP parts (model counts "
                        f"modes, Gaussian selection modes; default {DEFAULT_DELTA:g}); counts "
                        "mode 'marginals' with selpe is pure epsilon-DP")
    p.add_argument("--unit", choices=["row", "person"],
                   help="privacy unit (default: person when --id-field is given or the schema "
                        "names x-id, else row)")
    p.add_argument("--id-field", help="person id field (unit = person; default: the schema's "
                                      "x-id)")
    max_c = _default(PrivacyUnitConfig, "max_contributions")
    p.add_argument("--max-contributions", type=int,
                   help=f"rows kept per person (unit = person; default {max_c})")
    p.add_argument("--lifetime-ledger", help="folder of the per-dataset lifetime ledgers")
    p.add_argument("--lifetime-epsilon", type=float,
                   help="lifetime budget of a new dataset (default and maximum: the "
                        f"installation's, {DEFAULT_LIFETIME_EPSILON:g} without "
                        "/etc/selpe-audit/installation.toml); can only lower an existing one")
    p.add_argument("--lifetime-delta", type=float,
                   help="lifetime cap on the sum of the releases' deltas (default and "
                        f"maximum: the installation's, {DEFAULT_LIFETIME_DELTA:g} without the "
                        "file)")
    p.add_argument("--invalid-rows", choices=["fail", "drop"],
                   help="what to do with rows that break the schema (default fail)")
    cnt = p.add_argument_group("counts")
    cnt.add_argument("--counts-mode", choices=list(COUNTS_MODES),
                     help="fixed (default: the label's 2-way marginals with every field, "
                          "OpenDP contingency tables, zCDP), aim, mst, or marginals (Laplace "
                          "class-conditional histograms, pure epsilon-DP)")
    cnt.add_argument("--topics", type=int,
                     help="topic anchors per free-text field in the model modes (default: "
                          f"{DEFAULT_TOPICS} with a --candidates pool, else 0; > 0 without a "
                          "pool builds the codebook from LLM candidates)")
    sel = p.add_argument_group("selection (SelPE)")
    sel.add_argument("--selection", dest="selection_mode", choices=list(mode_names()),
                     help="selection mechanism: " + or_list(
                         [f"{d.name} ({d.help})" for d in modes()])
                     + "; the Gaussian modes are (epsilon, delta)-DP")
    sel.add_argument("--counts-share", type=float,
                     help="share of epsilon for noisy counts; the rest goes to selection "
                          f"(default {_default(BudgetConfig, 'counts_share'):g}; 1 = counts "
                          "only)")
    sel.add_argument("--candidates", help="public JSONL pool of schema-valid candidate "
                                          "records instead of LLM generation")
    sel.add_argument("--model", help="GGUF for candidate generation (default: the bundled "
                                     "Gemma 3 270M)")
    sel.add_argument("--gpu-layers", type=int, help="layers to offload to a GPU (-1 = all)")
    sel.add_argument("--rounds", type=int,
                     help=f"T, selection rounds (default {default['rounds']})")
    sel.add_argument("--batches", type=int,
                     help=f"b, disjoint private batches (default {default['batches']})")
    sel.add_argument("--k", type=int,
                     help=f"K, candidates per quota slot (default {default['k']})")
    sel.add_argument("--utility", choices=list(UTILITIES),
                     help="selpe: each batch's utilities min-max rescaled to span [-1, 0] "
                          "(minmax, default; same sensitivity and noise) or -g as is (raw)")


def _run(args: argparse.Namespace) -> int:
    overrides = {k: getattr(args, k) for k in (
        "data", "query", "table", "schema", "dataset", "out", "release_key", "epsilon", "delta",
        "selection_mode", "unit", "id_field", "max_contributions", "lifetime_ledger",
        "lifetime_epsilon", "lifetime_delta", "invalid_rows",
        "candidates", "model", "gpu_layers", "rounds", "batches", "k", "utility",
        "counts_mode", "topics")}
    if args.counts_share is not None:
        overrides.update(counts_share=args.counts_share, selection_share=1 - args.counts_share)
    cfg = load_config(args.config, overrides)
    console = Console(stderr=True, highlight=False)
    result = run_release(cfg, console)
    ledger = result.doc["ledger"]
    t = Table(title="privacy ledger")
    for col in ("mechanism id", "mechanism", "scale", "epsilon", "delta", "rho"):
        t.add_column(col)
    for e in ledger["entries"]:
        rho = f"{e['rho']:.4g}" if "rho" in e else ""
        t.add_row(e["id"], e["mechanism"], f"{e['scale']:.3g}", f"{e['epsilon']:.4g}",
                  f"{e['delta']:.3g}", rho)
    t.add_row("total", "", "", f"{ledger['total_epsilon']:.4g}",
              f"{ledger['total_delta']:.3g}", "")
    Console(highlight=False).print(t)
    return 0


COMMAND = Command(
    name="release",
    help="(enclave) read private rows once and write the signed DP artifact",
    description="Read the private rows once and release, with OpenDP mechanisms only, noisy "
                "counts (class balance, class-conditional histograms over public bins, cohorts, "
                "conditional rates) and DP-selected synthetic exemplars (SelPE rounds of noisy-max "
                "selection among public candidates: LLM-generated, or a --candidates pool) "
                "into a signed release.json. Refuses to exceed the "
                "dataset's lifetime budget; the refusal happens before any row is read.",
    add_arguments=_add_arguments,
    run=_run,
)
