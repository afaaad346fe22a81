"""``selpe-audit demo``: every stage end to end on the bundled demo data."""

from __future__ import annotations

from selpe_audit.command import Command, no_arguments, not_available

COMMAND = Command(
    name="demo",
    help="run keygen, release, review, approve, decode and audits on the demo data",
    description="Not built yet: the end-to-end demo (issue #10).",
    add_arguments=no_arguments,
    run=not_available("demo", "the end-to-end demo", 10),
)
