"""Ed25519 keys and detached signatures over the exact bytes of ``release.json``.

Keys are PEM (PKCS#8 private, SubjectPublicKeyInfo public) so stock OpenSSL reads them;
a signature file holds the raw 64-byte Ed25519 signature, which is what
``openssl pkeyutl -verify -pubin -inkey K.pub.pem -rawin -in release.json -sigfile S``
expects. A key id is the first 16 hex digits of SHA-256 over the raw public key.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from selpe_audit.artifact.canonical import atomic_write_bytes
from selpe_audit.errors import UserError

SIGNATURES_DIR = "signatures"


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_key_path(private_path: str | Path) -> Path:
    p = Path(private_path)
    stem = p.name[:-4] if p.name.endswith(".pem") else p.name
    return p.with_name(f"{stem}.pub.pem")


def generate_keypair(private_path: str | Path, force: bool = False) -> tuple[Path, Path, str]:
    """Write a new private key (mode 0600) and its public key; never overwrite silently."""
    priv_p = Path(private_path)
    pub_p = public_key_path(priv_p)
    for p in (priv_p, pub_p):
        if p.exists() and not force:
            raise UserError(f"{p}: already exists; choose another path or pass --force")
    key = Ed25519PrivateKey.generate()
    priv_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    pub_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        atomic_write_bytes(priv_p, priv_pem, mode=0o600)
        atomic_write_bytes(pub_p, pub_pem, mode=0o644)
    except OSError as e:
        raise UserError(f"{priv_p.parent}: cannot write keys ({e.strerror})") from None
    return priv_p, pub_p, key_id(key.public_key())


#: Keys known to be public: this repository tracked ``keys/release.pem`` until December 2026,
#: so anyone with a clone holds it; no signature by it proves anything.
COMPROMISED_KEY_IDS = frozenset({"c84bfed9eaf6a9d4"})


def _not_compromised(p: Path, public_key: Ed25519PublicKey) -> None:
    if key_id(public_key) in COMPROMISED_KEY_IDS:
        raise UserError(f"{p}: key {key_id(public_key)} was committed to the selpe-audit "
                        "repository and is compromised; make a new one with 'selpe-audit "
                        "keygen' and never trust this one")


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UserError(f"{p}: cannot read signing key ({e.strerror})") from None
    if os.name == "posix" and p.stat().st_mode & 0o077:
        raise UserError(f"{p}: private key is readable by others; run chmod 600 on it")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise UserError(f"{p}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UserError(f"{p}: not an Ed25519 key; make one with 'selpe-audit keygen'")
    _not_compromised(p, key.public_key())
    return key


def load_public_key(path: str | Path) -> Ed25519PublicKey:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UserError(f"{p}: cannot read trusted key ({e.strerror})") from None
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise UserError(f"{p}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise UserError(f"{p}: not an Ed25519 public key")
    _not_compromised(p, key)
    return key


def sign_file(artifact_dir: str | Path, file_name: str, private_key_path: str | Path) -> Path:
    """Sign the exact bytes of ``artifact_dir/file_name``; write signatures/<key-id>.sig."""
    key = load_private_key(private_key_path)
    d = Path(artifact_dir)
    data = (d / file_name).read_bytes()
    sig_path = d / SIGNATURES_DIR / f"{key_id(key.public_key())}.sig"
    atomic_write_bytes(sig_path, key.sign(data))
    return sig_path


@dataclass(frozen=True)
class Verification:
    """Which trusted keys signed the exact bytes that were read, and which did not."""

    data: bytes
    sha256: str
    valid_key_ids: tuple[str, ...]  # distinct, in the order given
    missing_key_ids: tuple[str, ...] = ()  # trusted keys with no signature on the file
    release_key_id: str | None = None  # the release key, when the caller named it


def verify_bytes(artifact_dir: str | Path, file_name: str, trusted: list[str | Path],
                 release_key: str | Path | None = None) -> Verification:
    """Check every trusted key's signature over ``file_name``; refuse on any failure.

    ``release_key``: the releaser's public key, named by the caller (never by the file):
    its valid signature is required. Signatures by keys the user does not trust are ignored:
    they prove nothing. A trusted key whose signature is present but wrong means the file
    changed after signing; one whose signature is missing is listed (the caller reports
    it). A key given twice counts once.
    """
    d = Path(artifact_dir)
    path = d / file_name
    if not trusted and release_key is None:
        raise UserError("no trusted key given; pass --trust KEY.pub.pem (repeatable)")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: not found; is {d} a release artifact folder?") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    keys: dict[str, Ed25519PublicKey] = {}
    release_kid = None
    if release_key is not None:
        pub = load_public_key(release_key)
        release_kid = key_id(pub)
        keys[release_kid] = pub
    for tp in trusted:
        pub = load_public_key(tp)
        keys.setdefault(key_id(pub), pub)
    valid: list[str] = []
    missing: list[str] = []
    for kid, pub in keys.items():
        sig_path = d / SIGNATURES_DIR / f"{kid}.sig"
        if not sig_path.is_file():
            if kid == release_kid:
                raise UserError(f"{path}: no signature by the release key {kid} "
                                f"({release_key}); it was not released by that key, or "
                                "changed and was signed again by others - do not use it")
            missing.append(kid)
            continue
        try:
            pub.verify(sig_path.read_bytes(), data)
        except InvalidSignature:
            raise UserError(f"{sig_path}: signature by trusted key {kid} does not verify; "
                            f"{file_name} changed after it was signed - do not use it") from None
        valid.append(kid)
    if not valid:
        raise UserError(f"{path}: no signature by any trusted key "
                        f"({len(keys)} trusted); ask the releaser for the right public key")
    return Verification(data, hashlib.sha256(data).hexdigest(), tuple(valid), tuple(missing),
                        release_kid)
