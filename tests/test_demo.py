"""``selpe-audit demo`` end to end, as `make demo` runs it: a result, not a log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

EXE = shutil.which("selpe-audit") or str(Path(__file__).parents[1] / ".venv/bin/selpe-audit")


@pytest.mark.model
def test_demo_fits_two_screens_and_ends_with_the_report(tmp_path):
    out = Path("out/demo")  # as make demo: relative to where the user stands
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1", COLUMNS="80")
    r = subprocess.run([EXE, "demo", "--out", str(out), "--llm-n", "2"], capture_output=True,
                       text=True, env=env, timeout=900, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert len(lines) < 80, r.stdout  # make demo adds doctor's ~50 lines: under 150 in all
    steps = [x for x in lines if x.startswith(("✓", "✗"))]
    assert len(steps) == 8 and all(x.startswith("✓") for x in steps), r.stdout
    flat = " ".join(r.stdout.split())
    assert "warnings (small counts" in flat and "review.html" in flat and "review --all" in flat
    assert f"audit report: {out / 'report.html'}" in flat
    assert lines[-1] == f"everything is under {out}/"
    # every step's full output is kept, one log each; the review's warnings among them
    out = tmp_path / out
    logs = sorted((out / "logs").iterdir())
    assert len(logs) == 8 and "counted by kind" in logs[3].read_text()
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") > 10
    report = json.loads((out / "report.json").read_text())
    assert report["artifact"]["verified"] is True and report["result"]["mia"]["dp_bound"]
    assert (out / "release" / "review.html").exists()
    # the results put the TSTR in context: what the benchmark measured at this size
    assert "what a table this size gets" in flat and "smartnoise AIM" in flat


def test_the_demo_quotes_the_benchmark_at_the_sizes_around_its_own(tmp_path):
    """The context line reads the measured gaps at the size at or below the release's DP row
    count and the next one up, and says so when they were measured at another epsilon."""
    from selpe_audit.demo.command import EXPECTED_GAPS, expected_gaps

    measured = {"epsilon": 2.0, "gaps": {
        "400": {"ours": {"lr": 0.13, "gb": 0.12}, "aim": {"lr": 0.17, "gb": 0.16}},
        "1000": {"ours": {"lr": 0.09, "gb": 0.08}},
        "3000": {"ours": {"lr": 0.05, "gb": 0.06}}}}
    path = tmp_path / "gaps.json"
    path.write_text(json.dumps(measured))
    art = {"budget": {"epsilon": 2.0, "plan": {"rows": 371}}}
    line = expected_gaps(art, path)
    assert line.startswith("about 371 rows here; at 400 rows a gap of 0.13 (LR) / 0.12 (GB), "
                           "smartnoise AIM 0.17 / 0.16; at 1,000 rows a gap of 0.09")
    art = {"budget": {"epsilon": 1.0, "plan": {"rows": 2500}}}
    line = expected_gaps(art, path)
    assert "at 1,000 rows" in line and "at 3,000 rows" in line
    assert "(measured at epsilon 2)" in line
    assert expected_gaps({"budget": {"epsilon": 2.0}}, path) is None  # no plan: no line
    assert expected_gaps(art, tmp_path / "missing.json") is None
    assert EXPECTED_GAPS.exists()  # the measured file ships with the package


def test_the_shipped_gaps_are_the_last_full_small_tables_run():
    """`make expected-gaps` writes selpe_audit/data/expected_gaps.json from RESULTS.json (no
    benchmark run writes into the product); the shipped file is what it writes now, and a
    --quick entry is refused."""
    from benchmarks import expected_gaps as eg

    entry = json.loads(eg.RESULTS.read_text(encoding="utf-8"))["small_tables"]
    assert eg.EXPECTED.read_text(encoding="utf-8") == eg.text(entry)
    with pytest.raises(ValueError, match="--quick"):
        eg.expected_gaps({**entry, "command": entry["command"] + " --quick"})
