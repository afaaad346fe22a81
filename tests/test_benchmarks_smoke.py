"""CI smoke run of the benchmarks at reduced size: they run and report sane numbers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_benchmarks_quick(tmp_path):
    out = tmp_path / "RESULTS.md"
    r = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only",
                        "counts,selection,adult", "--out", str(out)],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    text = out.read_text()
    blocks = [json.loads(b.split("```")[0]) for b in text.split("```json\n")[1:]]
    counts, selection, adult = blocks
    assert counts["time_ratio"] > 0 and counts["rows"] == 20_000
    assert selection["winners_at_inf_beat_random"]
    gaps = adult["results"][0]
    assert 0.5 < gaps["tfidf_logreg"]["synthetic"] <= 1.0


@pytest.mark.slow
def test_throughput_benchmarks_quick(tmp_path):
    """Decode and generation at reduced size, through the same runner as the full suite."""
    out = tmp_path / "RESULTS.md"
    r = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only",
                        "decode,generation", "--out", str(out)],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    entries = json.loads(out.with_suffix(".json").read_text())
    assert set(entries) == {"decode", "generation"}
    assert all(e["command"].endswith("--quick") for e in entries.values())
    assert "## decode" in out.read_text() and "## generation" in out.read_text()
