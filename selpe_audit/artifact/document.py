"""The release artifact: ``release.json`` (canonical JSON, versioned) plus signatures.

Writing: `write_release` checks the document against the artifact's own JSON Schema,
writes it atomically and signs it with the release key. Reading: `read_release` verifies
signatures against trusted keys *before* parsing, then checks the format version and the
schema. Parsing is plain ``json.loads`` - nothing in the file is ever executed.
"""

from __future__ import annotations

import copy
import json
import platform
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import fastjsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from selpe_audit import __version__
from selpe_audit.artifact import modes
from selpe_audit.artifact.canonical import atomic_write_json, canonical_bytes
from selpe_audit.artifact.model_block import CountsModel, Topics
from selpe_audit.artifact.persons_block import PersonsBlock
from selpe_audit.artifact.records import (
    CLOSED,
    OPEN,
    Budget,
    ClassBalance,
    Cohorts,
    CountsDescription,
    Guarantees,
    Histogram,
    KeyId,
    Ledger,
    Name,
    Rate,
    SelectionBlock,
    Sha256,
    Source,
    UnitRecord,
    schema_of,
)
from selpe_audit.artifact.signing import (
    SIGNATURES_DIR,
    Verification,
    key_id,
    load_private_key,
    sign_file,
    verify_bytes,
)
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.errors import UserError

RELEASE_FILE = "release.json"
FORMAT = "selpe-audit/release"
FORMAT_VERSION = 1

@dataclass(frozen=True)
class CountsBlock:
    """``counts``: every released noisy count, keyed by public values (signed: unbiased,
    possibly negative; decoders clamp at 0), the mode that made them and, for a model mode,
    the model and topic codebooks. Blocks a later format adds are read past."""

    __pydantic_config__ = OPEN

    signed: bool | None = None
    class_balance: ClassBalance | None = None
    histograms: dict[str, Histogram] | None = None
    cohorts: Cohorts | None = None
    rates: tuple[Rate, ...] | None = None
    # any name: a mode registered by a plugin reads off-site, where it is not installed
    mode: Name | None = None
    mode_description: CountsDescription | None = None
    model: CountsModel | None = None  # model modes
    topics: dict[str, Topics] | None = None  # per free-text field, its public codebook


@dataclass(frozen=True)
class ReleaseDocument:
    """The top level of ``release.json``, format version 1: nothing else is allowed."""

    __pydantic_config__ = CLOSED

    format: Literal["selpe-audit/release"]
    format_version: Literal[1]
    tool: dict[str, str]
    dataset: Name
    schema: dict[str, Any]
    schema_sha256: Sha256
    privacy_unit: UnitRecord
    release_key_id: KeyId
    budget: Budget
    ledger: Ledger
    guarantees: Guarantees
    counts: CountsBlock
    selection: SelectionBlock | None
    persons: PersonsBlock | None = None  # a schema with person structure
    source: Source | None = None
    created: str | None = None


def artifact_json_schema() -> dict[str, Any]:
    """The artifact's JSON Schema, generated from `ReleaseDocument`, with the block of each
    selection mode registered now (a block of a mode not registered here is not checked)."""
    schema = copy.deepcopy(schema_of(ReleaseDocument))
    selection = schema["$defs"]["SelectionBlock"]["properties"]
    for d in modes.modes():
        if d.block_key is not None and d.block is not None:
            own = copy.deepcopy(schema_of(d.block))
            schema["$defs"].update(own.pop("$defs", {}))
            selection[d.block_key] = own
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            **schema, "title": f"selpe-audit release.json, format version {FORMAT_VERSION}"}


@dataclass(frozen=True)
class _Validators:
    """The artifact schema compiled twice: fastjsonschema's generated code accepts a good
    document ~40x faster; jsonschema's best match names the field when it does not."""

    fast: Callable[[Any], Any]
    precise: Draft202012Validator


_VALIDATORS: dict[tuple[str, ...], _Validators] = {}


def schema_validators() -> _Validators:
    """One pair per set of registered modes (built once, rebuilt if a mode is added)."""
    names = modes.mode_names()
    if names not in _VALIDATORS:
        schema = artifact_json_schema()
        _VALIDATORS[names] = _Validators(fastjsonschema.compile(schema, use_default=False),
                                         Draft202012Validator(schema))
    return _VALIDATORS[names]


def tool_versions() -> dict[str, str]:
    """Versions of this tool and the libraries whose behaviour the release depends on."""
    out = {"selpe-audit": __version__, "python": platform.python_version()}
    for dist in ("opendp", "polars", "numpy", "jsonschema", "cryptography", "llama-cpp-python",
                 "sentence-transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def check_release_document(doc: Any, source: str = RELEASE_FILE) -> None:
    """Raise a one-line `UserError` unless ``doc`` is a release.json we can read."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise UserError(f"{source}: not a selpe-audit release artifact")
    version = doc.get("format_version")
    if version != FORMAT_VERSION:
        raise UserError(f"{source}: unknown format version {version!r}; this tool reads version "
                        f"{FORMAT_VERSION} - use a matching selpe-audit release")
    validators = schema_validators()
    try:
        validators.fast(doc)
        return
    except fastjsonschema.JsonSchemaException:
        pass
    # best_match descends into a nullable block's anyOf, to name the field that fails
    err = best_match(validators.precise.iter_errors(doc))
    where = "/".join(str(x) for x in err.absolute_path) or "top level" if err else "somewhere"
    raise UserError(f"{source}: malformed at {where} "
                    f"({err.validator if err else 'schema'} check failed)")


def write_release(out_dir: str | Path, doc: dict[str, Any], release_key: str | Path) -> Path:
    """Check, write (atomically, canonical bytes) and sign ``release.json``."""
    d = Path(out_dir)
    key = load_private_key(release_key)
    if doc.get("release_key_id") != key_id(key.public_key()):
        raise ValueError("release_key_id must be the id of the signing key")
    check_release_document(json.loads(canonical_bytes(doc)))
    try:
        d.mkdir(parents=True, exist_ok=True)
        stale = d / SIGNATURES_DIR
        if stale.is_dir():
            for old in stale.glob("*.sig"):  # signatures over an earlier release are void
                old.unlink()
        atomic_write_json(d / RELEASE_FILE, doc)
    except OSError as e:
        raise UserError(f"{d}: cannot write the artifact ({e.strerror})") from None
    sign_file(d, RELEASE_FILE, release_key)
    return d / RELEASE_FILE


@dataclass(frozen=True)
class VerifiedRelease:
    """A release.json whose exact bytes were signed by trusted keys."""

    doc: dict[str, Any]
    verification: Verification

    @property
    def sha256(self) -> str:
        return self.verification.sha256

    @property
    def approvals(self) -> tuple[str, ...]:
        """Distinct trusted signatures other than the release key's - the key the reader
        named (``release_key``), never what the document says about itself; none when the
        reader named no release key."""
        rk = self.verification.release_key_id
        if rk is None:
            return ()
        return tuple(k for k in self.verification.valid_key_ids if k != rk)

    @cached_property
    def view(self) -> ReleaseView:
        """The typed view, every shape checked against the embedded schema; parsed once,
        on first use (a malformed block is a one-line `UserError`)."""
        return ReleaseView.checked(self.doc)


#: why approvals need the release key named by the reader
NEEDS_RELEASE_KEY = ("approvals are the trusted signatures other than the release key's, and "
                     "only you can say which key that is: pass --release-key RELEASE.pub.pem")


def read_release(artifact_dir: str | Path, trusted: list[str | Path],
                 require_approvals: int = 0,
                 release_key: str | Path | None = None) -> VerifiedRelease:
    """Verify, then parse and check. Refuses with a one-line reason on any doubt.
    ``release_key``: the releaser's public key; its signature is required, and approvals
    (``require_approvals``) are counted only against it."""
    d = Path(artifact_dir)
    if not d.is_dir():
        raise UserError(f"{d}: artifact folder not found")
    if require_approvals > 0 and release_key is None:
        raise UserError(f"{d}: --require-approvals {require_approvals}: {NEEDS_RELEASE_KEY}")
    ver = verify_bytes(d, RELEASE_FILE, trusted, release_key)
    try:
        doc = json.loads(ver.data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UserError(f"{d / RELEASE_FILE}: signed but not valid UTF-8 JSON") from None
    check_release_document(doc, str(d / RELEASE_FILE))
    if ver.release_key_id is not None and doc["release_key_id"] != ver.release_key_id:
        raise UserError(f"{d / RELEASE_FILE}: names release key {doc['release_key_id']}, not "
                        f"{ver.release_key_id} (--release-key): do not use it")
    rel = VerifiedRelease(doc, ver)
    if len(rel.approvals) < require_approvals:
        raise UserError(f"{d}: {len(rel.approvals)} approval(s) by distinct trusted reviewer "
                        f"keys, {require_approvals} required; ask a reviewer to run "
                        "'selpe-audit approve' and pass their public key with --trust")
    return rel


def read_release_unverified(artifact_dir: str | Path) -> dict[str, Any]:
    """Parse release.json for display only (review shows signature status separately)."""
    p = Path(artifact_dir) / RELEASE_FILE
    try:
        doc = json.loads(p.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{p}: not found; is {artifact_dir} a release artifact folder?") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UserError(f"{p}: not valid UTF-8 JSON") from None
    check_release_document(doc, str(p))
    return doc
