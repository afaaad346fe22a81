"""What the repository itself must never hold (issue 32 item 3)."""

from __future__ import annotations

import subprocess

import pytest
from conftest import ROOT

PEM_PRIVATE = b"PRIVATE" + b" KEY-----"  # split so this file does not match itself


def test_no_private_key_is_tracked_in_git():
    """Every tracked file is free of a PEM private key, and keys/*.pem is ignored: a key
    anyone who cloned the repository holds would sign releases nobody made."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")
    holding = [name for name in tracked if name and (ROOT / name).is_file()
               and PEM_PRIVATE in (ROOT / name).read_bytes()]
    assert holding == []
    ignored = subprocess.run(["git", "check-ignore", "-q", "keys/release.pem"], cwd=ROOT)
    assert ignored.returncode == 0


#: the public half of the key this repository once tracked (public: safe to keep here)
ONCE_COMMITTED = """-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAcNUjC794ad3doWUrPAUHcl9qLDwdmY1TP+ZUgpW8JmQ=
-----END PUBLIC KEY-----
"""


def test_the_once_committed_key_is_never_trusted(tmp_path):
    """Trusting (or signing with) the key that was in the repository is a one-line error."""
    from selpe_audit.artifact.signing import load_public_key
    from selpe_audit.errors import UserError

    path = tmp_path / "release.pub.pem"
    path.write_text(ONCE_COMMITTED)
    with pytest.raises(UserError, match="compromised"):
        load_public_key(path)


def test_every_data_file_of_a_package_goes_into_the_wheel():
    """A non-editable install (the images, the wheelhouse) carries only what package-data
    names: `selpe-audit demo` died in the image when the demo's TOML was left out."""
    import fnmatch
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = meta["tool"]["setuptools"]["package-data"]
    tracked = subprocess.run(["git", "ls-files", "selpe_audit", "release", "decode", "audits"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    data = [p for p in tracked if not p.endswith(".py")]
    assert data, "no data files found: is this a git checkout?"
    for path in data:
        package, _, rest = path.partition("/")
        assert any(fnmatch.fnmatch(rest, pat) for pat in patterns.get(package, [])), (
            f"{path} is not in [tool.setuptools.package-data] {package}")
