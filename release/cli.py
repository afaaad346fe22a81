"""``selpe-audit release``: the enclave stage's command."""

from __future__ import annotations

from selpe_audit.command import Command, no_arguments, not_available

COMMAND = Command(
    name="release",
    help="(enclave) read private rows once and write the signed DP artifact",
    description="Not built yet: OpenDP noisy counts and SelPE selection (issues #4, #5).",
    add_arguments=no_arguments,
    run=not_available("release", "the release stage (OpenDP noisy counts)", 4),
)
