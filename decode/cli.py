"""``selpe-audit decode``: the off-site stage's command."""

from __future__ import annotations

from selpe_audit.command import Command, no_arguments, not_available

COMMAND = Command(
    name="decode",
    help="(off-site) turn a verified artifact into synthetic records",
    description="Not built yet: decoding a verified artifact (issue #6).",
    add_arguments=no_arguments,
    run=not_available("decode", "the decode stage", 6),
)
