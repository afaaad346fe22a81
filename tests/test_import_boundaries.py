"""The air gap in the import graph, checked with import-linter (contracts in pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

PACKAGES = ["selpe_audit", "release", "decode", "audits", "benchmarks"]


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root))
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--config", str(root / "pyproject.toml"), "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True)


def _copy_tree(tmp_path: Path) -> Path:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_contracts_hold_on_the_real_tree(tmp_path):
    result = _lint(_copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_decode_importing_release_is_caught(tmp_path):
    root = _copy_tree(tmp_path)
    (root / "decode" / "sneaky.py").write_text("from release import private_data  # noqa\n")
    result = _lint(root)
    assert result.returncode != 0
    assert "decode never imports release" in result.stdout


def test_core_importing_a_stage_is_caught(tmp_path):
    root = _copy_tree(tmp_path)
    (root / "selpe_audit" / "sneaky.py").write_text("import audits  # noqa\n")
    result = _lint(root)
    assert result.returncode != 0
    assert "shared core imports no stage package" in result.stdout


def test_a_lower_core_layer_importing_a_higher_one_is_caught(tmp_path):
    root = _copy_tree(tmp_path)
    (root / "selpe_audit" / "artifact" / "sneaky.py").write_text(
        "from selpe_audit.review import view  # noqa\n")
    result = _lint(root)
    assert result.returncode != 0
    assert "the shared core in layers" in result.stdout


def test_an_import_cycle_in_audits_is_caught(tmp_path):
    """The cycle issue 34 found (text_quality <-> utility) may not come back."""
    root = _copy_tree(tmp_path)
    path = root / "audits" / "text_quality.py"
    path.write_text(path.read_text() + "\nfrom audits.utility import STANDARD  # noqa\n")
    result = _lint(root)
    assert result.returncode != 0
    assert "no import cycles inside decode, audits or benchmarks" in " ".join(
        result.stdout.split())


def test_opendp_imported_outside_its_adapter_is_caught(tmp_path):
    """OpenDP is reached through release.dp only (issue 61): a selection module that imports
    it directly, even for a type, breaks the contract (planted in a copy of the tree)."""
    root = _copy_tree(tmp_path)
    (root / "release" / "selection" / "sneaky.py").write_text(
        "import opendp.prelude as dp  # noqa\n")
    result = _lint(root)
    assert result.returncode != 0
    assert "OpenDP only behind its one adapter" in result.stdout
    assert "release.selection.sneaky -> opendp" in result.stdout
