"""The artifact written and signed with the release key, and its review page beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from release.config import ReleaseConfig
from release.stages.document import DocumentDraft
from selpe_audit.artifact.document import write_release
from selpe_audit.review.page import write_review_html


def write_and_sign(cfg: ReleaseConfig,
                   document: DocumentDraft) -> tuple[Path, dict[str, Any]]:
    """``document`` as the signed artifact in ``cfg.out``, with the review page beside it:
    its path and the JSON written (the one place the records become JSON)."""
    doc = document.to_json()
    path = write_release(cfg.out, doc, cfg.release_key)
    write_review_html(cfg.out, doc)
    return path, doc
