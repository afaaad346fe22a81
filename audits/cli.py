"""``selpe-audit audit``: membership inference, mechanism, fidelity and utility audits."""

from __future__ import annotations

from selpe_audit.command import Command, no_arguments, not_available

COMMAND = Command(
    name="audit",
    help="(enclave) membership-inference, mechanism, fidelity and utility audits",
    description="Not built yet: the audits (issue #7).",
    add_arguments=no_arguments,
    run=not_available("audit", "the audits", 7),
)
