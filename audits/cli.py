"""``selpe-audit audit <kind>``: membership inference, mechanism, fidelity and utility audits.

Each kind writes a JSON report (``--report``; default next to the synthetic file, or in
the current folder) and prints a summary. Reports are statistics of private rows, not DP
outputs: they stay in the enclave and are never written into an artifact folder. Exit
status: 0 when the audit ran and found nothing wrong, 1 when it found a violation (a
mechanism's empirical epsilon above its claim, or an MIA beyond the DP bound), 2 for user
errors. This module is the command only: each kind registers in its own module
(`audits.kinds`).
"""

from __future__ import annotations

import argparse

from audits.kinds import audit_kinds
from release.dp import enable as enable_opendp
from selpe_audit.cli.command import Command
from selpe_audit.errors import UserError


def _add_arguments(p: argparse.ArgumentParser) -> None:
    """One subcommand per registered kind (`audits.kinds`)."""
    sub = p.add_subparsers(dest="audit_kind", metavar="KIND")
    for kind in audit_kinds().values():
        kind.add_arguments(sub.add_parser(
            kind.name, help=kind.help, description=kind.description,
            formatter_class=argparse.RawDescriptionHelpFormatter))


def _run(args: argparse.Namespace) -> int:
    enable_opendp()  # OpenDP's contrib features, once, at the command's entry
    kinds = audit_kinds()
    name = getattr(args, "audit_kind", None)
    if name not in kinds:
        raise UserError(f"choose an audit: {', '.join(kinds)} (see 'selpe-audit audit --help')")
    return kinds[name].run(args)


COMMAND = Command(
    name="audit",
    help="(enclave) membership-inference, mechanism, fidelity and utility audits",
    description="Audits of a release and of synthetic records, run where the private rows "
                "are (one subcommand per kind, below). Reports hold statistics of private "
                "rows: keep them in the enclave. Audits never write into an artifact folder.",
    add_arguments=_add_arguments,
    run=_run,
)
