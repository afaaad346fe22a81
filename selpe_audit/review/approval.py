"""An approval: a reviewer's detached signature over the exact bytes of ``release.json``
that the releaser signed (``selpe-audit approve``, and `approve` in a notebook)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature

from selpe_audit.artifact.document import RELEASE_FILE
from selpe_audit.artifact.signing import key_id, load_private_key, sign_file, verify_bytes
from selpe_audit.errors import UserError

__all__ = ["approve", "released_bytes", "sign_approval"]


def released_bytes(d: Path, release_key: str | Path) -> tuple[bytes, dict[str, Any]]:
    """The bytes of release.json that the release key signed, and their document: nothing
    is shown or approved unless the releaser's own signature verifies over them."""
    ver = verify_bytes(d, RELEASE_FILE, [], release_key=release_key)
    try:
        doc = json.loads(ver.data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise UserError(f"{d / RELEASE_FILE}: signed but not valid UTF-8 JSON") from None
    if not isinstance(doc, dict) or doc.get("release_key_id") != ver.release_key_id:
        raise UserError(f"{d / RELEASE_FILE}: does not name {ver.release_key_id} "
                        f"({release_key}) as its release key; do not approve it")
    return ver.data, doc


def reviewer_key_id(key_path: str | Path, doc: dict[str, Any]) -> str:
    """The reviewer key's id; refused when it is the release key itself."""
    kid = key_id(load_private_key(key_path).public_key())
    if kid == doc.get("release_key_id"):
        raise UserError(f"{key_path}: this is the release key ({kid}); an approval must come "
                        "from a different key - make a reviewer key with 'selpe-audit keygen'")
    return kid


def sign_approval(d: Path, data: bytes, key_path: str | Path) -> Path:
    """Sign release.json with the reviewer key; refused (nothing left) unless the signed
    bytes are ``data``, the bytes the reviewer saw."""
    key = load_private_key(key_path)
    sig = sign_file(d, RELEASE_FILE, key_path)
    try:
        key.public_key().verify(sig.read_bytes(), data)
    except InvalidSignature:
        sig.unlink(missing_ok=True)
        raise UserError(f"{d / RELEASE_FILE}: changed after it was shown; nothing was "
                        "approved - run approve again") from None
    return sig


def approve(artifact: str | Path, *, key: str | Path, release_key: str | Path) -> Path:
    """Approve a reviewed artifact: sign its release.json with your reviewer key.

    Call it once you have read every number (``selpe-audit review``, or the artifact's
    display in a notebook): it does not ask again.

    Parameters
    ----------
    artifact : path
        The artifact folder.
    key : path
        Your reviewer private key (not the release key).
    release_key : path
        The releaser's public key: nothing is signed unless its signature verifies.

    Returns
    -------
    Path
        The signature written (``signatures/<key id>.sig``).
    """
    d = Path(artifact)
    data, doc = released_bytes(d, release_key)
    reviewer_key_id(key, doc)
    return sign_approval(d, data, key)
