"""``selpe-audit demo`` end to end, as `make demo` runs it: a result, not a log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

EXE = shutil.which("selpe-audit") or str(Path(__file__).parents[1] / ".venv/bin/selpe-audit")


@pytest.mark.slow
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
