"""CI smoke run of the benchmarks at reduced size, in this process: they run and report
numbers in plausible ranges.

Every benchmark runs through the runner (`benchmarks.__main__.run_benchmarks`, as
``python -m benchmarks --quick --only NAME`` does) with the session's models, so no test
loads the LLM or the embedder again. Each check is one a broken benchmark fails: a validity
of 1.0, a ratio in a plausible range, a non-empty table, an AUC above chance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.__main__ import run_benchmarks


def _run_runner(tmp_path, names: str) -> Path:
    """``--quick --only NAMES`` into tmp_path (in this process); the RESULTS.md path."""
    out = tmp_path / "RESULTS.md"
    failed = run_benchmarks(names.split(","), True, out)
    if failed:
        entries = json.loads(out.with_suffix(".json").read_text())
        pytest.fail("; ".join(f"{n}: {entries[n]['result']['error']}" for n in failed))
    return out


def _quick(tmp_path, name: str) -> dict:
    """One benchmark's quick result, through the runner."""
    out = _run_runner(tmp_path, name)
    return json.loads(out.with_suffix(".json").read_text())[name]["result"]


@pytest.mark.slow
@pytest.mark.model
def test_benchmarks_quick(tmp_path):
    out = _run_runner(tmp_path, "counts,selection")
    text = out.read_text()
    entries = json.loads(out.with_suffix(".json").read_text())
    counts, selection = (entries[n]["result"] for n in ("counts", "selection"))
    assert "```json" not in text  # the page has tables; the numbers stay in RESULTS.json
    assert counts["time_ratio"] > 0 and counts["rows"] == 20_000
    assert 0 < counts["opendp_handoff_s"] < counts["opendp_s"]
    assert selection["winners_at_inf_beat_random"]
    assert "| rows | polars (s) | OpenDP (s) |" in text and "## selection" in text


@pytest.mark.slow
@pytest.mark.model
def test_decode_benchmark_quick(tmp_path):
    """Decode at reduced size, through the same runner as the full suite."""
    out = _run_runner(tmp_path, "decode")
    entry = json.loads(out.with_suffix(".json").read_text())["decode"]
    assert entry["command"].endswith("--quick") and "## decode" in out.read_text()
    r = entry["result"]
    for name in ("marginals", "model", "llm", "llm-whole-records"):
        assert r[name]["validity"] == 1.0 and r[name]["candidates"] > 0, name
    assert r["marginals"]["candidates"] == 2 * r["n"]  # over-generation 2
    repeats = r["speedup_repeats"]  # hybrid vs whole records: the hybrid writes only text
    assert len(repeats["ratios"]) == 1 and 1.0 < repeats["median"] < 10.0


@pytest.mark.slow
@pytest.mark.model
def test_generation_benchmark_quick(tmp_path):
    """Generation throughput at reduced size: constrained decoding near unconstrained speed
    and every constrained record valid."""
    out = _run_runner(tmp_path, "generation")
    entry = json.loads(out.with_suffix(".json").read_text())["generation"]
    assert entry["command"].endswith("--quick") and "## generation" in out.read_text()
    r = entry["result"]
    assert r["constrained_validity_pct"] == 100.0
    assert 0 <= r["rejection_rate"] < 0.5


@pytest.mark.slow
@pytest.mark.postgres
def test_database_benchmark_quick(tmp_path):
    """The PostgreSQL read against the CSV read, via the runner."""
    out = _run_runner(tmp_path, "database")
    db = json.loads(out.with_suffix(".json").read_text())["database"]["result"]
    assert db["rows"] == 2_000 and db["ratio"] > 0
    assert "## database" in out.read_text()


def _sane(row: dict) -> None:
    """A triage row: every record valid, TVDs of synthetic data (above 0: not a copy), MIA
    AUCs near chance (a release at epsilon 2). Rows of 60 records (the marginals decoder)
    also learn: the real sample's AUC is well above chance; the LLM rows hold one record."""
    assert row["validity_strict"] == 1.0
    assert 0 < row["tvd_1way"] <= 1 and 0 < row["tvd_2way"] <= 1
    for m in row["mia"].values():
        assert 0.2 < m["roc_auc"] < 0.8
    for u in row["utility"].values():
        assert u["gap"] == pytest.approx(u["real_sample"] - u["synthetic"], abs=1e-9)
        if row["rows"] >= 60:
            assert 0.6 < u["real_sample"] <= 1 and 0 < u["synthetic"] <= 1
    if row["rows"] >= 60:  # DP noise is never seeded: 0.34-0.51 seen at 80 members, eps 2
        assert row["tvd_1way"] < 0.8


@pytest.mark.slow
@pytest.mark.model
def test_triage_quick(tmp_path):
    """Release -> decode -> audits, every ablation, at smoke size (one LLM row each)."""
    r = _quick(tmp_path, "triage")
    assert [m["epsilon"] for m in r["main"]] == [2.0]
    ablations = {(a["config"], a["decoder"]) for a in r["ablations"]}
    assert ablations == {(c, "marginals") for c in ("no_selection", "one_round", "global_only",
                                                    "no_partners", "no_select")} | {
        (c, "llm") for c in ("default", "no_select", "no_partners", "single_stage", "hybrid")}
    assert set(r["ablation_checks"]) == {"no_selection", "one_round", "global_only",
                                         "no_partners", "no_select", "single_stage"}
    assert r["ablation_checks"]["global_only"]["kernel_channels"] == ["global"]
    for row in [*r["main"], *r["ablations"]]:
        _sane(row)
    by = {(a["config"], a["decoder"]): a for a in r["ablations"]}
    assert by["no_select", "marginals"]["select_top"] == "off"
    assert r["main"][0]["select_top"] == "applied" and r["main"][0]["fit"] is True
    assert "| ablation: single_stage |" in r["table"]


@pytest.mark.model
def test_selection_modes_quick(tmp_path):
    """The three selection mechanisms side by side, at reduced size, through the runner."""
    out = _run_runner(tmp_path, "selection_modes")
    result = json.loads(out.with_suffix(".json").read_text())["selection_modes"]["result"]
    modes = ("selpe", "pe-histogram", "representatives")
    assert all(result["cost"][m]["round_s"] > 0 for m in modes)
    assert result["cost"]["selpe"]["x_selpe"] == 1.0
    assert all(result["cost"][m]["x_selpe"] > 0 for m in modes)
    for row in result["summary"]:
        assert row["real"]["auc_tfidf"] > 0.6  # real rows of the same size learn the label
        assert all(0.2 < row[m]["auc_tfidf"] <= 1.0 for m in modes)
        assert all(0.0 < row[m]["tvd_1way"] < 0.8 for m in modes)
    page = out.read_text()
    assert "| epsilon | selpe | pe-histogram | representatives" in page
    assert "| mode | round (s) | x selpe |" in page


@pytest.mark.slow
@pytest.mark.model
def test_counts_modes_quick(tmp_path):
    """The counts modes side by side on Adult and the demo, at smoke size,
    through the runner: every mode the smoke run is set to run is there without an error
    (a mode that fails or vanishes fails this test; tests/test_counts_modes.py releases
    every registered model mode); a table, a summary line and plots."""
    from benchmarks.counts_modes import QUICK

    out = _run_runner(tmp_path, "counts_modes")
    r = json.loads(out.with_suffix(".json").read_text())["counts_modes"]["result"]
    runs = r["adult"]["runs"]
    assert [x.get("error") for x in runs] == [None] * len(runs)
    assert sorted(x["mode"] for x in runs) == sorted(QUICK.modes)
    for x in runs:
        for m in ("tfidf_logreg", "hgb_embeddings", "onehot_logreg", "hgb_native"):
            assert 0.7 < x["models"][m]["synthetic"] <= 1  # Adult's income is learnable
        assert 0 < x["tvd_1way"] < 0.2
        assert x["release"]["seconds"] > 0 and x["release"]["peak_rss_mib"] > 0
        assert set(x["tvd_per_field"]) and 0 <= x["tvd_1way"] <= 1
    demo = r["demo"]["modes"]
    assert sorted(demo) == sorted(QUICK.demo_modes)
    assert all(v["releases"] == QUICK.demo_releases and "errors" not in v
               for v in demo.values()), demo
    text = out.read_text()
    assert "| mode | eps | decoder | std LR | std GB |" in text
    assert "plots/counts_modes-gap-standard.svg" in text
    assert (tmp_path / "plots" / "counts_modes-tvd.svg").exists()


@pytest.mark.slow
@pytest.mark.model
def test_scale_benchmark_quick(tmp_path):
    """Release stages, decode and private features at two sizes, each in its own process,
    through the runner: every stage timed, memory measured, the table and the log-log plot."""
    out = _run_runner(tmp_path, "scale")
    from benchmarks.scale import QUICK_SIZES

    r = json.loads(out.with_suffix(".json").read_text())["scale"]["result"]
    assert [x["n"] for x in r["rows"]] == list(QUICK_SIZES)
    for x in r["rows"]:
        rel = x["release"]
        for stage in ("read_check_s", "people_s", "phrases_s", "counts_s"):
            assert rel[stage] is not None, stage
        assert 0 <= rel["read_check_s"] < rel["seconds"] and rel["peak_mib"] > 0
        assert x["decode"]["rows"] == x["n"] and x["features"]["rows"] == x["n"]
    text = out.read_text()
    assert "| N | plain read s |" in text and (tmp_path / "plots" / "scale-seconds.svg").exists()


def assert_every_peer_ran(result: dict) -> None:
    """A benchmark's peers in its table: no failed cell, and a row for each of them."""
    errors = "; ".join(f"{f['synthesizer']}: {f['error']}" for f in result["failed"])
    assert not result["failed"], f"peer runs failed: {errors}"
    ran = {x["synthesizer"] for x in result["results"]}
    assert {"smartnoise aim", "smartnoise mst"} <= ran, ran


@pytest.mark.peer
@pytest.mark.slow
def test_small_tables_quick(tmp_path):
    """Issue 59's peers at smoke size, through the runner: the default release and
    smartnoise-synth's AIM and MST on the same 400 rows (each must run: a peer that fails
    fails this test), every gap a difference of AUCs (a peer's may pass 0.5: MST inverts
    relations at this size, a gap of 0.53 seen), ours within 0.5; the page has the table
    and the gap plot."""
    out = _run_runner(tmp_path, "small_tables")
    r = json.loads(out.with_suffix(".json").read_text())["small_tables"]["result"]
    assert_every_peer_ran(r)
    by = {x["synthesizer"]: x for x in r["results"]}
    assert by["ours"]["n"] == 400 and by["ours"]["runs"] == 1
    for x in by.values():
        assert x["runs"] == 1, x["synthesizer"]
        for k in ("lr", "gb", "std_lr", "std_gb"):  # a real AUC less a synthetic one
            real = x["gaps"][f"real_{k}"]["mean"]
            assert real - 1 <= x["gaps"][k]["mean"] <= real, (x["synthesizer"], k)
    for k in ("lr", "gb", "std_lr", "std_gb"):  # ours: no peer's inverted relations
        assert -0.5 < by["ours"]["gaps"][k]["mean"] < 0.5, k
    text = out.read_text()
    assert "| dataset | n | synthesizer |" in text and "small_tables-gap.svg" in text
    assert (out.parent / "plots" / "small_tables-gap.svg").read_text().startswith("<svg")


def test_a_failing_peer_is_a_failed_cell_and_fails_the_smoke_check(tmp_path, monkeypatch):
    """A peer that dies (here a venv whose python exits 3 with a message) or whose venv was
    never built is a FAILED cell with its error in the table, the summary and the result's
    ``failed`` (not cached: a rerun tries it again), and `assert_every_peer_ran` fails on
    it."""
    from benchmarks import small_tables
    from benchmarks.common import RunCache

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("#!/bin/sh\necho 'snsynth: AIM found no budget' >&2\n"
                                         "exit 3\n")
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".built").write_text("a stand-in for the peer's venv\n")
    monkeypatch.setenv("SELPE_PEER_VENV", str(venv))
    runs = RunCache(None, small_tables.KEYS)
    gaps = {k: 0.1 for k in ("lr", "gb", "std_lr", "std_gb", "real_lr", "real_gb")}
    runs.add({"dataset": "demo", "n": 400, "synthesizer": "ours", "run": 0, "seconds": 1.0,
              "gaps": gaps})  # ours already ran: only the peers run here
    r = small_tables.run(quick=True, runs=runs)
    assert [(f["synthesizer"], f["run"]) for f in r["failed"]] == [
        ("smartnoise aim", 0), ("smartnoise mst", 0)]
    assert all("exited with status 3: snsynth: AIM found no budget" in f["error"]
               for f in r["failed"])
    assert "| demo | 400 | smartnoise aim | FAILED (run 1) | smartnoise aim exited" in r["table"]
    assert "FAILED: smartnoise mst at demo 400." in r["summary"]
    assert set(runs.done) == {("demo", 400, "ours", 0)}  # a failure is never a finished run
    with pytest.raises(AssertionError, match="peer runs failed: smartnoise aim: smartnoise"):
        assert_every_peer_ran(r)
    monkeypatch.setenv("SELPE_PEER_VENV", str(tmp_path / "never-built"))
    r = small_tables.run(quick=True, runs=runs, peers=("mst",))
    (f,) = r["failed"]
    assert "venv is not built" in f["error"] and "run `make peers`" in f["error"]
    with pytest.raises(AssertionError, match="peer runs failed"):
        assert_every_peer_ran(r)


#: the Adult halves' matched share (person_ledger): seeded halves, no noise, so one number
ADULT_HALVES_MATCHED = 0.423


@pytest.mark.slow
@pytest.mark.postgres
def test_person_ledger_quick(tmp_path):
    """Issue 60's measurements at smoke size, through the runner: a fresh extract's people
    are not matched to the charged sample and it is released; the Adult halves' share is the
    one measured (seeded halves, no noise); the charge is timed; the PostgreSQL release
    ran."""
    out = _run_runner(tmp_path, "person_ledger")
    r = json.loads(out.with_suffix(".json").read_text())["person_ledger"]["result"]
    (fresh,) = r["false_matches"]["demo"]
    assert fresh["matched_share"] == 0.0 and fresh["released"]
    assert r["false_matches"]["sample_spent"] == 10.0
    adult = r["false_matches"]["adult"]
    assert adult["matched_share"] == pytest.approx(ADULT_HALVES_MATCHED, abs=5e-4)
    assert 0.9 < adult["distinct_row_share"] < 1
    assert r["speed"]["seconds"] > 0 and r["speed"]["people"] > 0
    assert r["postgresql"]["repeats"] == 1 and set(r["postgresql"]["median_s"]) == {
        "folder", "postgresql"}
    assert "| measure | value |" in out.read_text()


def test_a_resumed_benchmark_runs_only_what_did_not_finish(tmp_path):
    """`RunCache`: finished runs are kept on disk and skipped by a rerun; with cached_only
    nothing new runs; a line cut off by a crash mid-write is not a finished run."""
    from benchmarks.common import RunCache

    cache = RunCache(tmp_path, ("n", "run"))
    assert cache.wanted(400, 0)
    cache.add({"n": 400, "run": 0, "gap": 0.1})
    with (tmp_path / "runs.jsonl").open("a") as f:
        f.write('{"n": 400, "run": 1, "ga')  # killed while writing
    again = RunCache(tmp_path, ("n", "run"))
    assert not again.wanted(400, 0) and again.wanted(400, 1)
    assert list(again.done.values()) == [{"n": 400, "run": 0, "gap": 0.1}]
    again.add({"n": 400, "run": 1, "gap": 0.2})
    assert len(RunCache(tmp_path, ("n", "run")).done) == 2
    cached = RunCache(tmp_path, ("n", "run"), cached_only=True)
    assert not cached.wanted(400, 2) and not cached.wanted(1_000, 0)


@pytest.mark.slow
@pytest.mark.model
def test_release_time_quick(tmp_path):
    """Issue 59's release time at smoke size, through the runner: each small table released
    on the default path and with selection, once each, timed (100 review rows, no warm-up
    release); the summary names the worst."""
    from benchmarks.release_time import QUICK_REVIEW_ROWS

    out = _run_runner(tmp_path, "release_time")
    r = json.loads(out.with_suffix(".json").read_text())["release_time"]["result"]
    assert {(x["table"], x["release"]) for x in r["rows"]} == {
        (t, s) for t in ("demo, 400 rows", f"reviews, {QUICK_REVIEW_ROWS} rows")
        for s in ("default", "with selection")}
    assert all(x["runs"] == 1 and x["median_s"] > 0 for x in r["rows"])
    assert "target 60 s" in r["summary"] and "| table | release | median s |" in out.read_text()


@pytest.mark.slow
def test_api_benchmark_quick(tmp_path):
    """Issue 68's overhead row at smoke size, through the runner: the command, the API with
    a file and with a DataFrame, and the model decode both ways, each timed, ratios to the
    command."""
    r = _quick(tmp_path, "api")
    assert set(r["release_s"]) == {"command", "api, file", "api, DataFrame"}
    assert set(r["decode_s"]) == {"command", "api, sample"}
    assert all(s > 0 for s in [*r["release_s"].values(), *r["decode_s"].values()])
    assert r["n"] == 1_000 and 0 < r["worst_ratio"] < 3
    assert "| job | way | median s | x command |" in r["table"]


@pytest.mark.slow
def test_persons_benchmark_quick(tmp_path):
    """Issue 70's benchmark at smoke size, through the runner: ours, independent visits,
    random pairing and other real people measured side by side (MOSTLY AI only in the full
    run); independent visits have no people to measure."""
    r = _quick(tmp_path, "persons")
    methods = {line["method"] for line in r["lines"]}
    assert methods == {"ours", "independent", "random pairing", "real sample"}
    by = {s["method"]: s for s in r["summary"]}
    assert by["independent"]["transitions_tvd"]["mean"] == 1.0
    assert by["ours"]["visits_tvd"]["mean"] < by["independent"]["visits_tvd"]["mean"]
    assert by["ours"]["release_s"]["mean"] > 0 and by["ours"]["decode_s"]["mean"] > 0
