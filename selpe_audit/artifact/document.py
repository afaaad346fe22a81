"""The release artifact: ``release.json`` (canonical JSON, versioned) plus signatures.

Writing: `write_release` checks the document against the artifact's own JSON Schema,
writes it atomically and signs it with the release key. Reading: `read_release` verifies
signatures against trusted keys *before* parsing, then checks the format version and the
schema. Parsing is plain ``json.loads`` - nothing in the file is ever executed.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from selpe_audit import __version__
from selpe_audit.artifact import modes
from selpe_audit.artifact.canonical import atomic_write_json, canonical_bytes
from selpe_audit.artifact.model_block import DP_VOCABULARY
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

_NUM = {"type": "number"}
_LEDGER_ENTRY = {
    "type": "object",
    "required": ["id", "mechanism", "constructor", "scale", "epsilon", "delta", "scope",
                 "composition"],
    "properties": {
        "id": {"type": "string"},
        "mechanism": {"type": "string"},
        "constructor": {"type": "string"},
        "scale": _NUM,
        "epsilon": {"type": "number", "minimum": 0},
        "delta": {"type": "number", "minimum": 0, "maximum": 1},
        "scope": {"type": "string"},
        "composition": {"type": "string"},
        # Gaussian selection modes: accounting "rho-zCDP" (rho, mu per round) or the
        # conversion entry's "(epsilon, delta)-DP from rho-zCDP"; absent: pure epsilon-DP
        "accounting": {"type": "string"},
        "rho": {"type": "number", "minimum": 0},
        "mu": {"type": "number", "minimum": 0},
    },
}
_TEXT = {"type": "string"}
#: Optional (format 1): which enclave ledger and which entry of it charged the release. No
#: path: the ledger id is random per ledger folder, the reservation id random per release.
_LIFETIME_LEDGER = {
    "type": "object",
    "required": ["ledger_id", "dataset", "reservation_id"],
    "properties": {
        "ledger_id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
        "dataset": {"type": "string", "minLength": 1},
        "reservation_id": {"type": "string", "pattern": "^[0-9a-f]{12}$"},
        "lifetime_epsilon": {"type": "number", "exclusiveMinimum": 0},
        "lifetime_delta": {"type": "number", "minimum": 0, "maximum": 1},
        "committed_epsilon": {"type": "number", "minimum": 0},
        "committed_delta": {"type": "number", "minimum": 0, "maximum": 1},
    },
}
_STR_LIST = {"type": "array", "items": {"type": "string"}}
#: Optional (format 1): the counts as a graphical model - every released marginal (null cell
#: last in each key set), its noise and measure, so decode rebuilds the model from it alone.
_MODEL = {
    "type": "object",
    "required": ["algorithm", "measure", "rho", "columns", "marginals"],
    "properties": {
        "algorithm": {"type": "string", "minLength": 1},
        "measure": {"const": "zero-concentrated"},
        "rho": {"type": "number", "minimum": 0},
        "estimator": {"type": "string"},
        "total": _NUM,
        "columns": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "field", "kind", "keys"],
            "properties": {"name": {"type": "string"}, "field": {"type": "string"},
                           "kind": {"enum": ["class", "categories", "bins", "topic"]},
                           "keys": {"type": "array", "minItems": 1}}}},
        "marginals": {"type": "array", "items": {
            "type": "object", "required": ["clique", "stddev", "values"],
            "properties": {"clique": _STR_LIST,
                           "stddev": {"type": "number", "exclusiveMinimum": 0},
                           "values": {"type": "array", "items": _NUM}}}},
    },
}
#: Optional (format 1): per free-text field, its public topic codebook.
_TOPICS = {"type": "object", "additionalProperties": {
    "type": "object", "required": ["k", "source", "anchors"],
    "properties": {
        "k": {"type": "integer", "minimum": 1},
        "source": {"enum": ["public pool", "llm candidates", DP_VOCABULARY]},
        "embedding_model": {"type": "string"},
        "texts_considered": {"type": "integer", "minimum": 0},
        "anchors": {"type": "array", "items": {
            "type": "object", "required": ["text", "members"],
            "properties": {"text": {"type": "string"}, "members": _STR_LIST}}},
        "embeddings": {"type": "array", "items": {"type": "array", "items": _NUM}},
        "phrases": {"type": "object", "properties": {
            "kind": {"enum": ["phrases", "keywords"]},
            "slots": {"type": "integer", "minimum": 1}}},
    }}}
_COUNTS = {"type": "object", "properties": {
    # any name: a mode registered by a plugin reads off-site, where it is not installed
    "mode": {"type": "string", "minLength": 1},
    "mode_description": {"type": "object", "properties": {
        "accounting": {"enum": ["pure", "zCDP"]}, "review": {"type": "string"},
        "model": {"type": "boolean"}}},
    "model": _MODEL,
    "topics": _TOPICS,
}}
_PR = {"type": "array", "items": {"type": "object", "required": ["prior", "success_max"],
                                  "properties": {"prior": _NUM, "success_max": _NUM}}}


def _selection_schema() -> dict[str, Any]:
    """The selection block: its mode's name and description, and the block of each mode
    registered here (a block of a mode not registered here is not checked)."""
    props: dict[str, Any] = {
        # any name: a mode registered by a plugin reads off-site, where it is not installed
        "mode": {"type": "string", "minLength": 1},
        "mode_description": {"type": "object", "properties": {
            "accounting": {"enum": ["pure", "zCDP"]}, "review": {"type": "string"},
            "mechanism": {"type": "string"}, "person_bounding": {"type": "string"}}},
        "accounting": {
            "type": "object",
            "required": ["mode", "measure", "epsilon", "delta"],
            "properties": {"epsilon": {"type": "number", "minimum": 0},
                           "delta": {"type": "number", "minimum": 0, "maximum": 1},
                           "rho": {"type": ["number", "null"], "minimum": 0},
                           "mu": {"type": ["number", "null"], "minimum": 0}},
        },
    }
    for d in modes.modes():
        if d.block_key is not None:
            props[d.block_key] = dict(d.block_schema)
    return {"type": ["object", "null"], "properties": props}


def artifact_json_schema() -> dict[str, Any]:
    """The artifact's JSON Schema, with the selection modes registered now."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "selpe-audit release.json, format version 1",
        "type": "object",
        "required": ["format", "format_version", "tool", "dataset", "schema", "schema_sha256",
                     "privacy_unit", "release_key_id", "budget", "ledger", "guarantees", "counts",
                     "selection"],
        "additionalProperties": False,
        "properties": {
            "format": {"const": FORMAT},
            "format_version": {"const": FORMAT_VERSION},
            "tool": {"type": "object", "additionalProperties": {"type": "string"}},
            "dataset": {"type": "string", "minLength": 1},
            # Where the private rows came from, without saying where that is: a file format,
            # or a database kind and the query's HMAC-SHA256 under an enclave secret (never
            # host, user or query; a plain hash of a short query is undone by guessing).
            "source": {"type": "object", "additionalProperties": False,
                       "required": ["kind"],
                       "properties": {"kind": {"enum": ["file", "postgresql"]},
                                      "format": {"enum": ["csv", "parquet", "jsonl"]},
                                      "query_hmac_sha256": {"type": "string",
                                                            "pattern": "^[0-9a-f]{64}$"}}},
            "schema": {"type": "object"},
            "schema_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "privacy_unit": {
                "type": "object",
                "required": ["unit"],
                "properties": {
                    "unit": {"enum": ["row", "person"]},
                    "id_field": {"type": "string"},
                    "max_contributions": {"type": "integer", "minimum": 1},
                    # optional (format 1): the guarantee's subject in words, and how each
                    # mechanism bounds one unit's rows
                    "protects": _TEXT,
                    "bounding": {"type": "object", "additionalProperties": _TEXT},
                },
            },
            "release_key_id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
            "budget": {
                "type": "object",
                "required": ["epsilon", "delta", "split"],
                "properties": {
                    "epsilon": {"type": "number", "exclusiveMinimum": 0},
                    "delta": {"type": "number", "minimum": 0, "maximum": 1},
                    "split": {"type": "object", "additionalProperties": _NUM},
                    "lifetime_ledger": _LIFETIME_LEDGER,
                },
            },
            "ledger": {
                "type": "object",
                "required": ["entries", "total_epsilon", "total_delta", "accountant"],
                "properties": {
                    "entries": {"type": "array", "items": _LEDGER_ENTRY},
                    "total_epsilon": {"type": "number", "minimum": 0},
                    "total_delta": {"type": "number", "minimum": 0, "maximum": 1},
                    "accountant": {"type": "string"},
                },
            },
            "guarantees": {
                "type": "object",
                "properties": {"protects": _TEXT, "selection_gdp": {
                    "type": "object", "required": ["mu", "formula", "reconstruction_success_max"],
                    "properties": {"mu": {"type": "number", "minimum": 0},
                                   "reconstruction_success_max": _PR}}},
            },
            "counts": _COUNTS,
            "selection": _selection_schema(),
            "created": {"type": "string"},
        },
    }


_VALIDATORS: dict[tuple[str, ...], Draft202012Validator] = {}


def _validator() -> Draft202012Validator:
    """One validator per set of registered modes (built once, rebuilt if a mode is added)."""
    names = modes.mode_names()
    if names not in _VALIDATORS:
        _VALIDATORS[names] = Draft202012Validator(artifact_json_schema())
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
    err = next(iter(sorted(_validator().iter_errors(doc), key=lambda e: list(e.path))), None)
    if err is not None:
        where = "/".join(str(x) for x in err.absolute_path) or "top level"
        raise UserError(f"{source}: malformed at {where} ({err.validator} check failed)")


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
