"""The RESULTS page: short, no JSON dumps, a table per section, plots as SVG files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from benchmarks.report import write_page
from benchmarks.svg import bar_chart, line_chart, nice_ticks

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "RESULTS.json"


def _entry(result: dict) -> dict:
    return {"command": "python -m benchmarks.x", "date": "2026-01-01 00:00 UTC",
            "machine": "2 CPUs (test), Python 3.11, commit abc1234", "seconds": 1.0,
            "result": result}


def _counts_modes_result() -> dict:
    def run(mode, eps, gap):
        models = {m: {"synthetic": 0.9 - gap, "real_sample": 0.9, "gap": gap}
                  for m in ("tfidf_logreg", "hgb_embeddings", "onehot_logreg", "hgb_native")}
        return {"mode": mode, "epsilon": eps, "decoder": "model", "models": models,
                "tvd_1way": 0.05, "tvd_per_field": {"age": 0.01, "sex": 0.02}}
    return {"targets": {"adult_eps2_gap_gb_standard": 0.015, "cortec_gap_eps2": 0.02},
            "adult": {"epsilons": [1.0, 2.0, "inf"], "modes": ["marginals", "fixed"],
                      "runs": [run(m, e, g) for m, g in (("marginals", 0.03), ("fixed", 0.01))
                               for e in (1.0, 2.0, "inf")]},
            "table": "| a | b |\n|---|---|\n| 1 | 2 |", "summary": "one line"}


def test_a_failed_rerun_keeps_the_last_numbers(tmp_path, monkeypatch):
    """A benchmark that raises on a rerun leaves its last measurement in RESULTS.json and on
    the page, the failure beside it; one that never had numbers shows the failure alone."""
    import benchmarks.__main__ as runner
    from benchmarks.suite import Benchmark

    def boom(quick: bool) -> dict:
        raise RuntimeError("boom")

    monkeypatch.setattr(runner, "benchmark", lambda name: Benchmark(name, boom))
    out = tmp_path / "RESULTS.md"
    out.with_suffix(".json").write_text(json.dumps({"plain": _entry(
        {"table": "| a | b |\n|---|---|\n| 1 | 2 |", "summary": "the last good run"})}))
    assert runner.run_benchmarks(["plain", "fresh"], False, out) == ["plain", "fresh"]
    entries = json.loads(out.with_suffix(".json").read_text())
    assert entries["plain"]["result"]["summary"] == "the last good run"
    assert entries["plain"]["last_failure"]["error"] == "RuntimeError: boom"
    assert entries["fresh"]["result"] == {"error": "RuntimeError: boom"}
    text = out.read_text()
    assert "**The last run failed**" in text and "the last good run" in text
    assert "**Failed:** RuntimeError: boom" in text


def test_page_has_tables_and_plots_but_no_json(tmp_path):
    entries = {"counts_modes": _entry(_counts_modes_result()),
               "broken": _entry({"error": "RuntimeError: boom"}),
               "plain": _entry({"x": 1})}
    write_page(tmp_path / "RESULTS.md", entries)
    text = (tmp_path / "RESULTS.md").read_text()
    assert "```" not in text and "one line" in text and "| a | b |" in text
    assert "**Failed:** RuntimeError: boom" in text
    svgs = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert svgs == ["counts_modes-gap-standard.svg", "counts_modes-gap-today.svg",
                    "counts_modes-tvd.svg"]
    for name in svgs:
        assert f"plots/{name}" in text
        ET.fromstring((tmp_path / "plots" / name).read_text())  # well-formed XML


def test_render_the_stored_results_is_short(tmp_path):
    """``--render`` from the committed RESULTS.json: a short page (under 20 lines a section
    on average: a summary and a table or two each; the per-size tables of small_tables and
    the retired budget_parts are the longest), no JSON."""
    shutil.copy(RESULTS, tmp_path / "RESULTS.json")
    out = tmp_path / "RESULTS.md"
    r = subprocess.run([sys.executable, "-m", "benchmarks", "--render", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    names = json.loads(RESULTS.read_text())
    assert len(text.splitlines()) < 20 * len(names) and "```" not in text
    for name in names:
        assert f"## {name}" in text
    section = text.split("## ")[1:]
    assert all("|---|" in s or "**Failed:**" in s for s in section)  # a table in each
    # a retired study keeps its numbers on the page, after the live ones, saying so
    from benchmarks.suite import STUDIES

    retired = [n for n, e in names.items() if "retired" in e]
    assert retired and not set(retired) & set(STUDIES)
    for name in retired:
        part = text.split(f"## {name}\n")[1].split("\n## ")[0]
        assert "**Retired** " in part and "|---|" in part


def test_every_study_is_one_record_in_the_registry():
    """Each registered study's module exports its `Benchmark`, named as registered, and the
    command on the page reruns it alone."""
    from benchmarks.suite import STUDIES, benchmark

    for name in STUDIES:
        b = benchmark(name)
        assert b.name == name and callable(b.run), name
        assert b.command == f"python -m benchmarks --only {name}"
    with pytest.raises(KeyError, match="choose from"):
        benchmark("budget_parts")  # retired: its numbers only


def test_a_study_takes_only_its_own_options():
    """``--set NAME=VALUE`` reaches one study's run as a keyword (a Python literal where it
    reads as one); a name its run does not take, or a second study, is refused before
    anything runs, naming what it does take."""
    from benchmarks.__main__ import parse_options

    assert parse_options(["sizes=10000,100000", "peers=mst", "n=3"]) == {
        "sizes": (10000, 100000), "peers": "mst", "n": 3}
    cmd = [sys.executable, "-m", "benchmarks", "--out", "/nonexistent/RESULTS.md"]
    r = subprocess.run([*cmd, "--only", "counts", "--set", "rows=5", "--set", "nope=1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and r.stderr.strip().endswith("counts takes rows, repeats; not nope")
    r = subprocess.run([*cmd, "--only", "counts,selection", "--set", "rows=5"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "apply to one study" in r.stderr


def test_the_image_timings_script_says_what_it_needs():
    """The images' timings are a script (root, podman, the network-free builds): where they
    cannot run it says so and exits cleanly, building nothing."""
    if shutil.which("podman") is not None:
        pytest.skip("podman is installed: the script would build the images")
    script = Path(__file__).resolve().parents[1] / "scripts" / "image_timings.py"
    r = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "skipped" in r.stdout and "podman" in r.stdout


def test_svg_charts_escape_and_parse():
    svg = line_chart("a <b> & c", ["1", "2", "inf"], {"s<1>": [0.1, None, 0.3]}, "y",
                     reference=(0.2, "target"))
    root = ET.fromstring(svg)
    assert root.find("{http://www.w3.org/2000/svg}title").text == "a <b> & c"
    ET.fromstring(bar_chart("t", ["f1", "f2"], {"m": [0.1, -0.05], "n": [None, 0.2]}))
    assert nice_ticks(0, 0.033)[-1] >= 0.033 and nice_ticks(0, 0)[-1] > 0
