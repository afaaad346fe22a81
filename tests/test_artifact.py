"""release.json: canonical bytes, its own JSON Schema, versioning, atomic signed writes."""

from __future__ import annotations

import json
import math

import pytest

from selpe_audit.artifact.canonical import canonical_bytes
from selpe_audit.artifact.document import (
    FORMAT,
    FORMAT_VERSION,
    RELEASE_FILE,
    read_release,
    tool_versions,
    write_release,
)
from selpe_audit.artifact.signing import SIGNATURES_DIR, generate_keypair, sign_file
from selpe_audit.errors import UserError


def minimal_doc(schema, kid):
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "tool": tool_versions(),
        "dataset": "demo", "schema": schema.public_json(), "schema_sha256": schema.sha256(),
        "privacy_unit": {"unit": "row"}, "release_key_id": kid,
        "budget": {"epsilon": 2.0, "delta": 0.0, "split": {"counts": 1.0}},
        "ledger": {"entries": [], "total_epsilon": 0.0, "total_delta": 0.0,
                   "accountant": "opendp"},
        "guarantees": {}, "counts": {}, "selection": None,
    }


@pytest.fixture
def keys(tmp_path):
    return generate_keypair(tmp_path / "release.pem")


def test_canonical_bytes_rules():
    assert canonical_bytes({"b": 1, "a": [0.1, "é"]}) == '{"a":[0.1,"é"],"b":1}\n'.encode()
    for bad in (math.nan, math.inf, 2**60, {1: 2}, object()):
        with pytest.raises(ValueError):
            canonical_bytes({"x": bad})


def test_write_then_read(tmp_path, demo_schema, keys):
    priv, pub, kid = keys
    doc = minimal_doc(demo_schema, kid)
    path = write_release(tmp_path / "art", doc, priv)
    assert path.read_bytes() == canonical_bytes(doc)
    rel = read_release(tmp_path / "art", [pub])
    assert rel.doc == json.loads(canonical_bytes(doc))
    assert rel.approvals == ()


def test_approvals_count_trusted_reviewers_only(tmp_path, demo_schema, keys):
    priv, pub, kid = keys
    write_release(tmp_path / "art", minimal_doc(demo_schema, kid), priv)
    rpriv, rpub, _ = generate_keypair(tmp_path / "reviewer.pem")
    upriv, _, _ = generate_keypair(tmp_path / "stranger.pem")
    sign_file(tmp_path / "art", RELEASE_FILE, rpriv)
    sign_file(tmp_path / "art", RELEASE_FILE, upriv)
    with pytest.raises(UserError, match="0 approval"):
        read_release(tmp_path / "art", [pub], require_approvals=1, release_key=pub)
    assert len(read_release(tmp_path / "art", [rpub], require_approvals=1,
                            release_key=pub).approvals) == 1
    with pytest.raises(UserError, match="--release-key"):  # who is the releaser? only you say
        read_release(tmp_path / "art", [pub, rpub], require_approvals=1)
    # a re-release voids old approvals
    write_release(tmp_path / "art", minimal_doc(demo_schema, kid), priv)
    assert len(list((tmp_path / "art" / SIGNATURES_DIR).glob("*.sig"))) == 1


# ----- signatures by role (issue 32): each bypass refused in one line ----------------------

def _released(tmp_path, demo_schema, keys):
    priv, pub, kid = keys
    art = tmp_path / "art"
    write_release(art, minimal_doc(demo_schema, kid), priv)
    rpriv, rpub, rkid = generate_keypair(tmp_path / "reviewer.pem")
    return art, priv, pub, rpriv, rpub, rkid


def test_an_edited_release_key_id_approves_nothing(tmp_path, demo_schema, keys):
    """The releaser edits release_key_id and signs again with the release key: with the
    release key named by the reader, the document's claim counts for nothing."""
    art, priv, pub, *_ = _released(tmp_path, demo_schema, keys)
    path = art / RELEASE_FILE
    doc = json.loads(path.read_bytes())
    path.write_bytes(canonical_bytes({**doc, "release_key_id": "0" * 16}))
    sign_file(art, RELEASE_FILE, priv)
    with pytest.raises(UserError, match="names release key 0000000000000000"):
        read_release(art, [], require_approvals=1, release_key=pub)
    with pytest.raises(UserError, match="--release-key"):
        read_release(art, [pub], require_approvals=1)


def test_a_reviewer_trusted_twice_approves_once(tmp_path, demo_schema, keys):
    art, _, pub, rpriv, rpub, rkid = _released(tmp_path, demo_schema, keys)
    sign_file(art, RELEASE_FILE, rpriv)
    rel = read_release(art, [rpub, rpub, pub], require_approvals=1, release_key=pub)
    assert rel.approvals == (rkid,)
    with pytest.raises(UserError, match="1 approval"):
        read_release(art, [rpub, rpub], require_approvals=2, release_key=pub)


def test_a_trusted_key_without_a_signature_is_reported(tmp_path, demo_schema, keys):
    art, _, pub, _, rpub, rkid = _released(tmp_path, demo_schema, keys)
    rel = read_release(art, [rpub], release_key=pub)
    assert rel.verification.missing_key_ids == (rkid,) and rel.approvals == ()


def test_a_tampered_document_approved_after_the_fact_is_refused(tmp_path, demo_schema, keys):
    """Changed after release, the release signature deleted, then signed by a reviewer:
    the release key's signature is required, so decode refuses."""
    art, _, pub, rpriv, rpub, _ = _released(tmp_path, demo_schema, keys)
    path = art / RELEASE_FILE
    path.write_bytes(path.read_bytes().replace(b'"dataset":"', b'"dataset":"X', 1))
    for sig in (art / SIGNATURES_DIR).glob("*.sig"):
        sig.unlink()
    sign_file(art, RELEASE_FILE, rpriv)
    with pytest.raises(UserError, match="no signature by the release key"):
        read_release(art, [rpub], require_approvals=1, release_key=pub)


def test_unknown_version_and_malformed(tmp_path, demo_schema, keys):
    priv, pub, kid = keys
    art = tmp_path / "art"
    doc = minimal_doc(demo_schema, kid)
    write_release(art, doc, priv)
    for change, needle in ((lambda d: d.update(format_version=99), "unknown format version 99"),
                           (lambda d: d.pop("ledger"), "malformed"),
                           (lambda d: d.update(format="other"), "not a selpe-audit")):
        d = json.loads(canonical_bytes(doc))
        change(d)
        (art / RELEASE_FILE).write_bytes(canonical_bytes(d))
        sign_file(art, RELEASE_FILE, priv)
        with pytest.raises(UserError, match=needle):
            read_release(art, [pub])


def test_write_refuses_invalid_document(tmp_path, demo_schema, keys):
    priv, _, kid = keys
    doc = minimal_doc(demo_schema, kid)
    doc["budget"]["epsilon"] = -1
    with pytest.raises(UserError, match="budget"):
        write_release(tmp_path / "art", doc, priv)
    assert not (tmp_path / "art" / RELEASE_FILE).exists()


def test_missing_folder(tmp_path, keys):
    with pytest.raises(UserError, match="artifact folder not found"):
        read_release(tmp_path / "nope", [keys[1]])
