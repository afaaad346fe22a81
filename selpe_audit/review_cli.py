"""``selpe-audit review`` and ``selpe-audit approve``: the artifact for a human."""

from __future__ import annotations

from selpe_audit.command import Command, no_arguments, not_available

REVIEW = Command(
    name="review",
    help="show every released number, the ledger and the guarantees",
    description="Not built yet: the review view and review.html (issue #8).",
    add_arguments=no_arguments,
    run=not_available("review", "the review view", 8),
)

APPROVE = Command(
    name="approve",
    help="sign a reviewed artifact with a reviewer key",
    description="Not built yet: approvals (issue #8).",
    add_arguments=no_arguments,
    run=not_available("approve", "approval signing", 8),
)
