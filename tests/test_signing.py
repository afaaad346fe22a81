"""Keys, signatures and verification, including stock OpenSSL and single-byte tampering."""

from __future__ import annotations

import shutil
import stat
import subprocess

import pytest

from selpe_audit.artifact.canonical import atomic_write_json
from selpe_audit.artifact.signing import SIGNATURES_DIR, generate_keypair, sign_file, verify_bytes
from selpe_audit.errors import UserError


@pytest.fixture
def signed(tmp_path):
    priv, pub, kid = generate_keypair(tmp_path / "keys" / "release.pem")
    art = tmp_path / "art"
    atomic_write_json(art / "release.json", {"b": [1, 2.5, "é"], "a": None})
    sign_file(art, "release.json", priv)
    return art, priv, pub, kid


def test_keygen_modes_and_no_overwrite(tmp_path):
    priv, pub, kid = generate_keypair(tmp_path / "k.pem")
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert pub.name == "k.pub.pem" and len(kid) == 16
    with pytest.raises(UserError, match="already exists"):
        generate_keypair(tmp_path / "k.pem")


def test_verify_ok(signed):
    art, _, pub, kid = signed
    v = verify_bytes(art, "release.json", [pub])
    assert v.valid_key_ids == (kid,)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_signature_verifies_with_stock_openssl(signed):
    art, _, pub, kid = signed
    cmd = ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(pub), "-rawin",
           "-in", str(art / "release.json"), "-sigfile", str(art / SIGNATURES_DIR / f"{kid}.sig")]
    ok = subprocess.run(cmd, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "Signature Verified Successfully" in ok.stdout
    data = (art / "release.json").read_bytes()
    (art / "release.json").write_bytes(bytes([data[0] ^ 1]) + data[1:])
    assert subprocess.run(cmd, capture_output=True).returncode != 0


def test_every_single_byte_flip_is_refused(signed):
    art, _, pub, _ = signed
    original = (art / "release.json").read_bytes()
    for i in range(len(original)):
        for bit in (0x01, 0x80):
            tampered = bytearray(original)
            tampered[i] ^= bit
            (art / "release.json").write_bytes(bytes(tampered))
            with pytest.raises(UserError, match="does not verify"):
                verify_bytes(art, "release.json", [pub])
    (art / "release.json").write_bytes(original)
    verify_bytes(art, "release.json", [pub])


def test_missing_signature_and_untrusted_key(signed, tmp_path):
    art, _, pub, kid = signed
    _, other_pub, _ = generate_keypair(tmp_path / "other.pem")
    with pytest.raises(UserError, match="no signature by any trusted key"):
        verify_bytes(art, "release.json", [other_pub])
    (art / SIGNATURES_DIR / f"{kid}.sig").unlink()
    with pytest.raises(UserError, match="no signature by any trusted key"):
        verify_bytes(art, "release.json", [pub])
    with pytest.raises(UserError, match="no trusted key"):
        verify_bytes(art, "release.json", [])


def test_bad_key_files(tmp_path, signed):
    art, priv, _, _ = signed
    junk = tmp_path / "junk.pem"
    junk.write_text("hello")
    with pytest.raises(UserError, match="not a PEM public key"):
        verify_bytes(art, "release.json", [junk])
    priv.chmod(0o644)
    with pytest.raises(UserError, match="chmod 600"):
        sign_file(art, "release.json", priv)
