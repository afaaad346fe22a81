"""The kinds of ``selpe-audit audit``: a registry, and what every kind shares.

A kind is one `AuditKind` (its name, --help words, arguments and run) registered by the
module that implements it (`KINDS` names the built-in modules); `audits.cli` builds the
subcommands from the registry, built-ins first, then the kinds of other packages
(entry-point group ``selpe_audit.audits``). What a kind shares: `common_arguments`,
`read_rows` (private or synthetic rows, by the release's own reader), `artifact_view` (a
release's ledger and guarantees), `make_report` (the report's envelope) and `finish` (write
it, never into an artifact folder, and print its summary).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from audits.io import REPORT_NOTE, default_report_path, file_info, write_report
from release.frame_source import FrameSource
from release.private_data import InvalidPolicy, read_private_rows
from selpe_audit import __version__
from selpe_audit.registry import Registry
from selpe_audit.schema import Schema

#: the entry-point group of audit kinds from other packages
PLUGIN_GROUP = "selpe_audit.audits"


@dataclass(frozen=True)
class AuditKind:
    """One ``selpe-audit audit <name>``: ``run`` returns the exit status (0: nothing wrong,
    1: a violation found); ``description``: its --help text (the module docstring)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


#: the kinds of ``selpe-audit audit``: the built-ins (their modules, in --help's order), then
#: those of installed plugins
KINDS: Registry[AuditKind] = Registry(
    "audit", builtins=("audits.mia", "audits.mechanism_kind", "audits.fidelity",
                       "audits.utility", "audits.report"), group=PLUGIN_GROUP)


def register(kind: AuditKind) -> AuditKind:
    """Make ``kind`` a subcommand of ``selpe-audit audit`` (a name once, `Registry.add`)."""
    return KINDS.add(kind.name, kind, stacklevel=2)


def audit_kinds() -> dict[str, AuditKind]:
    """Every registered kind, the built-ins first."""
    return dict(KINDS.items())


def common_arguments(p: argparse.ArgumentParser, synthetic: bool = True) -> None:
    """--synthetic, --schema and --invalid-rows (``synthetic``), and --report."""
    if synthetic:
        p.add_argument("--synthetic", required=True,
                       help="synthetic records (.csv, .parquet or .jsonl)")
        p.add_argument("--schema", required=True, help="dataset schema (JSON)")
        p.add_argument("--invalid-rows", choices=["fail", "drop"], default="fail",
                       help="private rows that break the schema: stop (default) or leave out")
    p.add_argument("--report", help="JSON report to write (default: next to the synthetic "
                                    "file, else ./audit-<kind>.json)")


def read_rows(path: Any, schema: Schema, invalid: InvalidPolicy) -> list[dict[str, Any]]:
    """Rows of a data file, checked against the schema: private (members, real) or synthetic
    alike - the audits read both in the enclave, by the release's own reader."""
    return read_private_rows(path, schema, invalid=invalid).priv_rows


def artifact_view(artifact: str, trust: list[str]) -> Any:
    """The artifact's `ReleaseView`: verified against ``trust`` when given, else read
    unverified. Only its ledger, guarantees and codebooks are read (the JSON Schema types
    them), so the view is read tolerantly."""
    from selpe_audit.artifact.document import read_release, read_release_unverified
    from selpe_audit.artifact.view import ReleaseView

    doc = read_release(artifact, trust).doc if trust else read_release_unverified(artifact)
    return ReleaseView.parse(doc)


def make_report(kind: str, inputs: dict[str, Any], config: dict[str, Any],
                result: dict[str, Any], t0: float) -> dict[str, Any]:
    """The report's envelope: kind, tool, what it is (never DP), inputs' hashes, settings,
    the result and the time it took since ``t0`` (`time.perf_counter`)."""
    note = ("computed from fictional demo data and the release's mechanisms only"
            if kind == "mechanism" else REPORT_NOTE)
    return {"kind": kind, "tool": f"selpe-audit {__version__}", "privacy": note,
            "inputs": {k: _input_info(v) for k, v in inputs.items()}, "config": config,
            "result": result, "elapsed_s": round(time.perf_counter() - t0, 3)}


def _input_info(data: Any) -> dict[str, Any]:
    """A file's name and SHA-256; a DataFrame's kind and size (the API's in-memory rows)."""
    frame = FrameSource.of(data)
    if frame is None:
        return file_info(data)
    return {"path": f"{frame.display} ({frame.frame.height} rows)", "sha256": "-"}


def finish(kind: str, args: argparse.Namespace, report: dict[str, Any],
           render: Callable[[dict[str, Any], Console], None]) -> Path:
    """Write the report (--report, else beside the synthetic file; never into an artifact
    folder) and print its summary."""
    path = Path(args.report) if args.report else default_report_path(
        kind, getattr(args, "synthetic", None))
    out = write_report(path, report)
    render(report, Console(highlight=False))
    Console(highlight=False).print(f"report: {out}")
    return out
