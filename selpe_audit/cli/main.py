"""``selpe-audit``: one console script, one subcommand per job.

User errors print one line and exit non-zero. Unexpected errors do not print a traceback
by default either, because exception messages from libraries can quote private values and
the enclave console is read by people; ``SELPE_AUDIT_DEBUG=1`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata

from rich.console import Console
from rich.markup import escape

from selpe_audit import __version__
from selpe_audit.cli.command import Command
from selpe_audit.errors import UserError

ENTRY_POINT_GROUP = "selpe_audit.commands"
ORDER = ["keygen", "release", "ledger", "review", "approve", "decode", "audit", "demo", "doctor"]

EPILOG = """workflows:
  data steward (enclave):  selpe-audit keygen keys/release.pem
                           selpe-audit release --config release.toml
                           selpe-audit ledger show
  privacy reviewer:        selpe-audit review out/release
                           selpe-audit approve out/release --key me.pem
  analyst (off-site):      selpe-audit decode out/release --trust release.pub.pem \\
                             --n 2000 --out synth.parquet
  auditor (enclave):       selpe-audit audit mia --synthetic synth.parquet ...
  everything, demo data:   selpe-audit demo
"""


def load_commands(name: str | None = None) -> dict[str, Command]:
    """Every registered subcommand, in the order users meet them; only ``name``'s when it
    names one, so a command imports only its own stage (a decode never loads the audits'
    scikit-learn: seconds at every start)."""
    found: dict[str, Command] = {}
    points = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    if any(ep.name == name for ep in points):
        points = [ep for ep in points if ep.name == name]
    for ep in points:
        cmd = ep.load()
        found[cmd.name] = cmd
    return dict(sorted(found.items(), key=lambda kv: ([*ORDER, kv[0]]).index(kv[0])))


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="selpe-audit",
        description="Privacy-audited synthetic structured-text data: a DP release inside the "
                    "enclave, a signed reviewable artifact, and decoding off-site.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"selpe-audit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in commands.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        cmd.add_arguments(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    argv = sys.argv[1:] if argv is None else argv
    named = next((a for a in argv if not a.startswith("-")), None)
    try:  # a stage's plugins load with its command (e.g. release's selection modes)
        parser = build_parser(load_commands(named))
    except UserError as e:
        err.print(f"[bold red]selpe-audit: error:[/] {escape(str(e))}")
        return e.exit_code
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except UserError as e:
        err.print(f"[bold red]selpe-audit {args.command}: error:[/] {escape(str(e))}")
        return e.exit_code
    except KeyboardInterrupt:
        err.print(f"selpe-audit {args.command}: interrupted; finished work was kept")
        return 130
    except Exception as e:
        if os.environ.get("SELPE_AUDIT_DEBUG"):
            raise
        err.print(f"selpe-audit {args.command}: internal error ({type(e).__name__}); this is a "
                  "bug - rerun with SELPE_AUDIT_DEBUG=1 for a traceback (it may show data)")
        return 70


def run() -> None:
    sys.exit(main())
