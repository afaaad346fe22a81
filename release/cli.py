"""``selpe-audit release``: the enclave stage's command, a thin layer over `release.api`."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from release import counts, selection
from release.api import release_with
from release.config_file import cli_settings, load_config, setting_keys
from selpe_audit.cli.command import Command

#: the argument groups of the config's sections (the top level and budget stay ungrouped)
GROUPS = {"counts": "counts", "selection": "selection (SelPE)"}


def _add_arguments(p: argparse.ArgumentParser) -> None:
    """One argument per setting declared with help in `release.config` and
    `release.config_sections` (its flag, type, choices, help and default come from that
    declaration), plus --config."""
    selection.load_builtins()  # the modes' choices and help include the plugins' modes
    counts.load_builtins()
    p.add_argument("--config", help="release TOML file (see examples/release.toml)")
    groups = {section: p.add_argument_group(title) for section, title in GROUPS.items()}
    for s in cli_settings():
        group = groups.get(s.section or "", p)
        if s.type is bool:  # a switch: given, it sets the setting true
            group.add_argument(s.flag, dest=s.key, action="store_true", default=None,
                               help=s.help)
        else:
            group.add_argument(s.flag, dest=s.key, type=s.type, choices=s.choices,
                               help=s.help)


def _run(args: argparse.Namespace) -> int:
    # every argument named after a setting overrides it (the config declares the keys)
    keys = setting_keys() - {"counts_share"}
    overrides = {k: v for k, v in vars(args).items() if k in keys}
    if args.counts_share is not None:  # one flag for the two shares
        overrides.update(counts_share=args.counts_share, selection_share=1 - args.counts_share)
    cfg = load_config(args.config, overrides)
    console = Console(stderr=True, highlight=False)
    if args.selection_mode and not cfg.selects:  # asked for, but the budget gives it nothing
        console.print(f"note: --selection {args.selection_mode} gets no epsilon (the budget is "
                      "counts only by default) and does not run; --counts-share 0.5 gives it "
                      "half")
    ledger = release_with(cfg, console).document.ledger
    t = Table(title="privacy ledger")
    for col in ("mechanism id", "mechanism", "scale", "epsilon", "delta", "rho"):
        t.add_column(col)
    for e in ledger.entries:
        rho = f"{e.rho:.4g}" if e.rho is not None else ""
        t.add_row(e.id, e.mechanism, f"{e.scale:.3g}", f"{e.epsilon:.4g}", f"{e.delta:.3g}", rho)
    t.add_row("total", "", "", f"{ledger.total_epsilon:.4g}", f"{ledger.total_delta:.3g}", "")
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
