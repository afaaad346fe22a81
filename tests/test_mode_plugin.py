"""A selection mode and a counts mode from another package (entry points) release here, and
the artifact they write is reviewed and decoded in processes where that package is not
installed (issue 34); an audit kind from that package is a subcommand of ``audit``. The
package follows docs/architecture.md's recipes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from selpe_audit.demo.generator import generate_rows
from selpe_audit.schema import demo_schema_path
from tests.conftest import DEMO_SAMPLE

EXE = shutil.which("selpe-audit") or str(Path(__file__).parents[1] / ".venv/bin/selpe-audit")

TOY = '''"""A toy selection mode in its own package: the selpe round under another name."""
from dataclasses import replace

from release.selection.registry import register
from release.selection.selpe import SelpeMode
from selpe_audit.artifact.modes import SELPE


class ToyMode(SelpeMode):
    descriptor = replace(SELPE, name="toy-max", help="a plugin's mode (the selpe round)",
                         review="the toy plugin's noisy max",
                         mechanism="report noisy max per batch (toy plugin)")


MODE = register(ToyMode())
'''

TOY_COUNTS = '''"""A toy counts mode in its own package: OpenDP's Fixed under another name."""
from dataclasses import replace

from release.counts.model import FIXED_MODE
from release.counts.registry import register
from selpe_audit.artifact.counts_modes import FIXED

MODE = register(replace(FIXED_MODE, descriptor=replace(
    FIXED, name="toy-fixed", help="a plugin's counts mode (the fixed workload)",
    review="the toy plugin's noisy marginals")))
'''

TOY_AUDIT = '''"""A toy audit in its own package: how many synthetic rows are valid."""
import time

from audits.io import load_record_schema
from audits.kinds import AuditKind, common_arguments, finish, make_report, read_rows, register


def _run(args):
    t0 = time.perf_counter()
    rows = read_rows(args.synthetic, load_record_schema(args.schema), args.invalid_rows)
    report = make_report("toy-count", {"synthetic": args.synthetic}, {}, {"rows": len(rows)}, t0)
    finish("toy-count", args, report,
           lambda r, console: console.print(f"toy-count: {r['result']['rows']} rows"))
    return 0


AUDIT = register(AuditKind("toy-count", "count the valid synthetic rows (a plugin's toy)",
                           common_arguments, _run, __doc__))
'''


def _plugin(folder: Path) -> Path:
    """The package and its installed metadata (a dist-info with the entry point)."""
    folder.mkdir()
    (folder / "toy_mode.py").write_text(TOY)
    (folder / "toy_counts.py").write_text(TOY_COUNTS)
    (folder / "toy_audit.py").write_text(TOY_AUDIT)
    info = folder / "toy_mode-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-mode\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[selpe_audit.selection_modes]\ntoy = toy_mode\n"
                                           "[selpe_audit.counts_modes]\ntoy = toy_counts\n"
                                           "[selpe_audit.audits]\ntoy = toy_audit\n")
    return folder


def _run(*args: str, plugin: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1", COLUMNS="200")
    env.pop("PYTHONPATH", None)
    if plugin is not None:
        env["PYTHONPATH"] = str(plugin)
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.model
def test_a_plugin_mode_releases_and_reads_off_site_without_the_plugin(tmp_path, keys):
    plugin = _plugin(tmp_path / "plugin")
    helped = _run("release", "--help", plugin=plugin)
    assert "toy-max" in helped.stdout and "toy-fixed" in helped.stdout
    plain = _run("release", "--help").stdout
    assert "toy-max" not in plain and "toy-fixed" not in plain  # not installed: not offered
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "patient_id"}) + "\n"
                            for r in generate_rows(200, seed=2)))
    priv, pub, _ = keys[0]
    art = tmp_path / "out" / "release"
    r = _run("release", "--data", str(DEMO_SAMPLE), "--schema", str(demo_schema_path()),
             "--key", str(priv), "--out", str(art), "--selection", "toy-max", "--counts-share",
             "0.5", "--candidates", str(pool), "--counts-mode", "toy-fixed", "--dataset",
             "plugin-demo", plugin=plugin)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((art / "release.json").read_text())
    assert doc["selection"]["mode"] == "toy-max"
    assert doc["selection"]["mode_description"]["review"] == "the toy plugin's noisy max"
    assert any(e["mechanism"] == "report noisy max per batch (toy plugin)"
               for e in doc["ledger"]["entries"])
    assert doc["counts"]["mode"] == "toy-fixed" and doc["counts"]["model"]["marginals"]
    assert doc["counts"]["mode_description"] == {
        "accounting": "zCDP", "review": "the toy plugin's noisy marginals", "model": True}
    # off-site: the plugin is not installed in these processes
    rv = _run("review", str(art), "--release-key", str(pub))
    assert rv.returncode == 0, rv.stdout[-2000:] + rv.stderr[-2000:]
    page = (art / "review.html").read_text()
    assert "the toy plugin&#x27;s noisy max" in page
    assert "the toy plugin&#x27;s noisy marginals" in page
    out = tmp_path / "syn.csv"
    d = _run("decode", str(art), "--release-key", str(pub), "--decoder", "model", "--n", "40",
             "--out", str(out))
    assert d.returncode == 0, d.stdout[-2000:] + d.stderr[-2000:]
    assert len(out.read_text().splitlines()) == 41


def test_a_broken_plugin_is_one_line_naming_it(tmp_path):
    plugin = _plugin(tmp_path / "plugin")
    (plugin / "toy_mode.py").write_text("raise ImportError('no such thing')\n")
    r = _run("release", "--help", plugin=plugin)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert "selection mode plugin 'toy' (toy_mode) failed to load" in r.stderr


@pytest.mark.slow
def test_a_plugin_audit_is_a_subcommand_and_writes_its_report(tmp_path):
    """docs/architecture.md's audit recipe, in a package of its own: registered through the
    entry point, offered by ``audit --help`` only where installed, run with the shared
    helpers, its report written where asked and never into an artifact folder."""
    plugin = _plugin(tmp_path / "plugin")
    assert "toy-count" in _run("audit", "--help", plugin=plugin).stdout
    assert "toy-count" not in _run("audit", "--help").stdout
    report = tmp_path / "toy.json"
    args = ("audit", "toy-count", "--synthetic", str(DEMO_SAMPLE), "--schema",
            str(demo_schema_path()))
    r = _run(*args, "--report", str(report), plugin=plugin)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads(report.read_text())
    assert doc["kind"] == "toy-count" and doc["result"] == {"rows": 400}
    assert "toy-count: 400 rows" in r.stdout
    art = tmp_path / "art"
    art.mkdir()
    (art / "release.json").write_text("{}")
    r = _run(*args, "--report", str(art / "toy.json"), plugin=plugin)
    assert r.returncode == 2 and "artifact" in r.stderr and r.stderr.count("\n") == 1
