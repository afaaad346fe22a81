"""Decode (issue #6): allocation, the fit, the decoders, outputs, bad input, kill-and-resume.

Quick tests decode a counts-only artifact (no exemplars, so no embedder is needed); tests
on a pool-mode artifact (SelectTop loads the embedder) and the LLM decoder are marked `model`.
"""

from __future__ import annotations

import doctest
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from conftest import demo_release
from hypothesis import given, settings
from hypothesis import strategies as st

from decode import allocation
from decode.allocation import allocate
from decode.api import GPU_ENV, gpu_layers
from decode.checkpoint import Checkpoint, checkpoint_path
from decode.decoders.llm import LLMDecoder
from decode.decoders.marginals import PLACEHOLDER, MarginalsDecoder
from decode.fit import (
    FitConfig,
    Margin,
    class_margins,
    fit_class,
    improve_by_swaps,
    inclusion_probabilities,
    l1_distance,
    systematic_sample,
)
from decode.pipeline import DecodeSettings, plan, run_decode
from decode.released import released_view
from decode.writers import valid_share
from selpe_audit.artifact.canonical import canonical_bytes
from selpe_audit.artifact.document import RELEASE_FILE, read_release
from selpe_audit.artifact.signing import sign_file
from selpe_audit.bins import grid, value_at
from selpe_audit.cli.main import main
from selpe_audit.demo.generator import generate_rows
from selpe_audit.errors import UserError
from selpe_audit.llm.generation import GenerationStats

ROOT = Path(__file__).resolve().parents[1]
EXE = str(Path(sys.executable).with_name("selpe-audit"))


# ----- fixtures ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pool_art(tmp_path_factory, keys):
    """A pool-mode release: noisy counts plus SelPE winners and partners (loads the embedder)."""
    tmp = tmp_path_factory.mktemp("pool")
    data, pool = tmp / "private.csv", tmp / "pool.jsonl"
    pl.DataFrame(generate_rows(150, seed=1)).write_csv(data)  # small: the embedder is slow
    rows = generate_rows(150, seed=12345)
    pool.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "patient_id"}) + "\n"
                        for r in rows))
    return demo_release(tmp, keys[0][0], data=data, candidates=pool, counts_share=0.5,
                        selection_share=0.5, rounds=2, k=2, batches=3)


def _released(art: Path, pub: Path):
    return released_view(read_release(art, [pub]))


def _decode(art: Path, pub: Path, out: Path, **kw) -> dict:
    settings = DecodeSettings(**{"n": 120, "decoder": "marginals", **kw})
    return run_decode(art, [pub], 0, out, settings).provenance_doc


# ----- allocation ------------------------------------------------------------------------------

counts_st = st.lists(st.integers(-500, 500), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(counts=counts_st, n=st.integers(0, 5000))
def test_allocation_sums_to_n_nonnegative_and_near_quota(counts, n):
    a = allocate(counts, n)
    assert a.sum() == n and (a >= 0).all()
    post = np.clip(counts, 0, None)
    share = post / post.sum() if post.sum() > 0 else np.full(len(counts), 1 / len(counts))
    assert np.all(np.abs(a - n * share) < 1)


@settings(max_examples=300, deadline=None)
@given(counts=counts_st, n=st.integers(0, 5000))
def test_allocation_is_monotone(counts, n):
    a = allocate(counts, n)
    for i in range(len(counts)):
        for j in range(len(counts)):
            if max(counts[i], 0) > max(counts[j], 0):
                assert a[i] >= a[j]


def test_allocation_doctests():
    assert doctest.testmod(allocation).failed == 0


def test_allocation_edge_cases():
    assert allocate([-3, -1, -7], 7).tolist() == [3, 2, 2]  # no signal left: uniform
    assert allocate([0, 5, 0], 4).tolist() == [0, 4, 0]
    assert allocate([1, 1], 3).tolist() == [2, 1]            # ties to the lower index
    with pytest.raises(ValueError):
        allocate([], 3)


# ----- bins and the fit ----------------------------------------------------------------------

def test_grid_values_fall_in_their_bin(demo_schema):
    for f in demo_schema.by_kind("numeric"):
        for j in range(len(f.bins) - 1):
            lo, hi = grid(f, j)
            assert lo < hi
            for k in (lo, hi - 1):
                v = value_at(f, k)
                assert f.bin_index(float(v)) == j and f.minimum <= v <= f.maximum


def test_inclusion_probabilities_and_systematic_sampling():
    rng = np.random.default_rng(0)
    w = rng.exponential(size=200) ** 3  # skewed: some would exceed 1 uncapped
    pi = inclusion_probabilities(w, 60)
    assert np.isclose(pi.sum(), 60) and pi.max() <= 1 + 1e-12 and (pi == 1).any()
    hits = np.zeros(200)
    for s in range(400):
        chosen = systematic_sample(pi, np.random.default_rng(s))
        assert len(chosen) == 60 and len(np.unique(chosen)) == 60
        hits[chosen] += 1
    assert np.abs(hits / 400 - pi).max() < 0.12  # inclusion frequencies follow pi


def test_fit_lowers_the_l1_distance_to_released_cells(counts_artifact, keys):
    rel = _released(counts_artifact, keys[0][1])
    dec = MarginalsDecoder(rel, seed=3)
    for c in rel.classes:
        a = 40
        # Candidates that do not follow the class's marginals: records of every class.
        cand = [dict(dec.record(rel.classes[i % len(rel.classes)], i), **{"acuity": c})
                for i in range(2 * a)]
        margins = class_margins(rel, c, cand, a)
        res = fit_class(cand, margins, a, rel.schema, np.random.default_rng(1), FitConfig())
        baseline = np.mean([l1_distance(margins, np.random.default_rng(s).choice(
            2 * a, a, replace=False)) for s in range(20)])
        assert len(res.chosen) == a and len(res.records) == a
        assert res.l1_final <= res.l1_sampled
        assert res.l1_final < baseline
        validator = rel.schema.record_validator()
        assert all(validator.is_valid(r) for r in res.records)
        for f in rel.schema.by_kind("numeric"):  # redraw keeps every value in its bin
            for before, after in zip((cand[i] for i in res.chosen), res.records, strict=True):
                assert f.bin_index(before[f.name]) == f.bin_index(after[f.name])


def test_swaps_never_increase_the_distance(counts_artifact, keys):
    rel = _released(counts_artifact, keys[0][1])
    dec = MarginalsDecoder(rel, seed=4)
    cand = [dict(dec.record(2, i), acuity=3) for i in range(90)]
    margins = class_margins(rel, 3, cand, 30)
    start = np.arange(30)
    chosen, swaps = improve_by_swaps(margins, start, 100, 8, np.random.default_rng(0))
    assert len(chosen) == 30 and swaps > 0
    assert l1_distance(margins, chosen) < l1_distance(margins, start)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), m=st.integers(4, 60))
def test_swaps_end_where_no_single_swap_helps(data, m):
    """With every chosen row tried, the swaps stop only where no swap of one chosen for one
    unchosen row lowers the weighted L1 distance (brute force over every pair): the costs
    kept up to date swap by swap are the costs a fresh count gives."""
    a = data.draw(st.integers(1, m - 1))
    margins = []
    for q in range(data.draw(st.integers(1, 4))):
        k = data.draw(st.integers(2, 5))
        cells = np.array(data.draw(st.lists(st.integers(0, k - 1), min_size=m, max_size=m)))
        target = allocate(data.draw(st.lists(st.integers(0, 9), min_size=k, max_size=k)), a)
        weight = data.draw(st.sampled_from([1.0, 0.5, 0.25, 0.75]))
        margins.append(Margin(str(q), cells, target, weight))
    start = np.arange(a)
    # every swap lowers the distance by at least 0.25 (the weights' grid): far below the cap
    chosen, swaps = improve_by_swaps(margins, start, 10**5, m, np.random.default_rng(1))
    assert swaps < 10**5 and len(chosen) == a and len(set(chosen.tolist())) == a
    best = l1_distance(margins, chosen)
    assert best <= l1_distance(margins, start) - 0.25 * swaps + 1e-9
    rest = np.setdiff1d(np.arange(m), chosen)
    for i in chosen:
        for j in rest:
            other = np.sort(np.append(chosen[chosen != i], j))
            assert l1_distance(margins, other) >= best - 1e-9


# ----- end to end ------------------------------------------------------------------------------

def test_marginals_decode_of_a_counts_only_artifact(counts_artifact, keys, tmp_path):
    pub = keys[0][1]
    out = tmp_path / "syn.parquet"
    doc = _decode(counts_artifact, pub, out, n=150)
    df = pl.read_parquet(out)
    rel = _released(counts_artifact, pub)
    assert df.height == 150 and df.columns == [f.name for f in rel.schema.record_fields]
    validator = rel.schema.record_validator()
    assert all(validator.is_valid(r) for r in df.to_dicts())
    assert (df["chief_complaint"] == PLACEHOLDER).all()  # no exemplars to copy text from
    expected = plan(rel, 150, 2.0).rows
    assert doc["rows_per_class"] == {str(c): n for c, n in expected.items()}
    assert doc["artifact"]["sha256"] == read_release(counts_artifact, [pub]).sha256
    assert doc["artifact"]["verified_key_ids"] == [rel_key_id(counts_artifact)]
    assert doc["validity"]["share_valid"] == 1.0
    assert doc["decoder"]["text_source"] == {"chief_complaint": "placeholder"}
    assert doc["selection"]["select_top"] == "off"  # the marginals decoder's default
    assert doc["fidelity"]["tvd_to_released"]["histograms_mean"] < \
        doc["fidelity"]["candidates_tvd_to_released"]["histograms_mean"]
    assert json.loads((tmp_path / "syn.parquet.provenance.json").read_text()) == doc
    asked = _decode(counts_artifact, pub, tmp_path / "top.csv", n=20, select_top=True)
    assert asked["selection"]["select_top"] == "skipped: the artifact has no exemplars"
    assert not checkpoint_path(out).exists()


def rel_key_id(art: Path) -> str:
    return json.loads((art / RELEASE_FILE).read_text())["release_key_id"]


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_output_formats_hold_the_same_rows(counts_artifact, keys, tmp_path, ext):
    pub = keys[0][1]
    _decode(counts_artifact, pub, tmp_path / "a.parquet", n=40, seed=7)
    _decode(counts_artifact, pub, tmp_path / f"b.{ext}", n=40, seed=7)
    a = pl.read_parquet(tmp_path / "a.parquet")
    b = pl.read_csv(tmp_path / "b.csv") if ext == "csv" else pl.read_ndjson(tmp_path / "b.jsonl")
    assert a.equals(b.select(a.columns).cast(dict(a.schema)))


def test_approvals_are_required_and_recorded(counts_artifact, keys, tmp_path):
    (_, pub, _), (rpriv, rpub, rkid) = keys
    with pytest.raises(UserError, match="approval"):
        run_decode(counts_artifact, [pub], 1, tmp_path / "x.jsonl", DecodeSettings(n=5,
                   decoder="marginals"))
    art = tmp_path / "approved"
    art.mkdir()
    (art / RELEASE_FILE).write_bytes((counts_artifact / RELEASE_FILE).read_bytes())
    (art / "signatures").mkdir()
    for sig in (counts_artifact / "signatures").iterdir():
        (art / "signatures" / sig.name).write_bytes(sig.read_bytes())
    sign_file(art, RELEASE_FILE, rpriv)
    with pytest.raises(UserError, match="--release-key"):
        run_decode(art, [pub, rpub], 1, tmp_path / "x.jsonl",
                   DecodeSettings(n=5, decoder="marginals"))
    doc = run_decode(art, [rpub], 1, tmp_path / "x.jsonl",
                     DecodeSettings(n=5, decoder="marginals"), release_key=pub).provenance_doc
    assert doc["artifact"]["approvals"] == [rkid]
    assert doc["artifact"]["unsigned_trusted_key_ids"] == []


@pytest.mark.model
def test_marginals_decode_of_a_pool_artifact_with_select_top(pool_art, keys, tmp_path):
    pub = keys[0][1]
    out = tmp_path / "syn.jsonl"
    doc = _decode(pool_art, pub, out, n=30, select_top=True)  # off by default here
    rel = _released(pool_art, pub)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 30
    validator = rel.schema.record_validator()
    assert all(validator.is_valid(r) for r in records)
    texts = {r["chief_complaint"] for c in rel.classes
             for r in (*rel.winners[c], *rel.partners[c])}
    assert {r["chief_complaint"] for r in records} <= texts  # text only from exemplars
    assert doc["selection"]["select_top"] == "applied"
    assert doc["embedder"]["matches_artifact"] is True
    assert doc["decoder"]["text_source"] == {"chief_complaint": "exemplars"}
    assert sum(doc["rows_per_class"].values()) == 30


# ----- bad input: one line, non-zero exit ------------------------------------------------------

def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(["decode", *argv])
    err = capsys.readouterr().err
    return code, err


def copy_artifact(src: Path, dst: Path) -> Path:
    """A copy of an artifact folder (release.json and signatures), to tamper with."""
    (dst / "signatures").mkdir(parents=True)
    (dst / RELEASE_FILE).write_bytes((src / RELEASE_FILE).read_bytes())
    for sig in (src / "signatures").iterdir():
        (dst / "signatures" / sig.name).write_bytes(sig.read_bytes())
    return dst


def bad_decode_inputs(artifact: Path, release_key: Path,
                      tmp: Path) -> tuple[Path, Path, Path, Path]:
    """The corpus's bad files: a copy of ``artifact`` changed after signing, a copy re-signed
    with a future format version, a file that is not GGUF and a corrupt GGUF."""
    tampered = copy_artifact(artifact, tmp / "tampered")
    data = (tampered / RELEASE_FILE).read_bytes()
    (tampered / RELEASE_FILE).write_bytes(data.replace(b'"dp_counts":[', b'"dp_counts":[1', 1))
    future = copy_artifact(artifact, tmp / "future")
    doc = json.loads((future / RELEASE_FILE).read_bytes())
    (future / RELEASE_FILE).write_bytes(canonical_bytes({**doc, "format_version": 99}))
    sign_file(future, RELEASE_FILE, release_key)
    not_gguf, corrupt = tmp / "junk.gguf", tmp / "corrupt.gguf"
    not_gguf.write_bytes(b"not a model at all")
    corrupt.write_bytes(b"GGUF" + os.urandom(2048))
    return tampered, future, not_gguf, corrupt


@pytest.mark.model
def test_bad_inputs_are_one_line_errors(counts_artifact, keys, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    (priv, pub, _), (_, rpub, _) = keys
    ok = ["--trust", str(pub), "--n", "5", "--decoder", "marginals"]
    tampered, future, not_gguf, corrupt = bad_decode_inputs(counts_artifact, priv, tmp_path)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    out = str(tmp_path / "o.parquet")
    cases = {
        "artifact folder not found": [str(tmp_path / "nope"), *ok, "--out", out],
        "no signature by any trusted key": [str(counts_artifact), "--trust", str(rpub), "--n", "5",
                                            "--out", out],
        "does not verify": [str(tampered), *ok, "--out", out],
        "unknown format version": [str(future), *ok, "--out", out],
        "--n must be a positive": [str(counts_artifact), *ok[:2], "--n", "0", "--out", out],
        "cannot write there": [str(counts_artifact), *ok, "--out", str(a_file / "o.parquet")],
        "model file not found": [str(counts_artifact), *ok[:4], "--model",
                                 str(tmp_path / "missing.gguf"), "--out", out],
        "not a GGUF model file": [str(counts_artifact), *ok[:4], "--model", str(not_gguf),
                                  "--out", out],
        "cannot load this model file": [str(counts_artifact), *ok[:4], "--model", str(corrupt),
                                        "--out", out],
        "unknown output extension": [str(counts_artifact), *ok, "--out", str(tmp_path / "o.xlsx")],
        "--overgenerate must be >= 1": [str(counts_artifact), *ok, "--overgenerate", "0.5",
                                        "--out", out],
    }
    for expected, argv in cases.items():
        code, err = _cli(capsys, *argv)
        assert code != 0, expected
        assert expected in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not Path(out).exists()


def test_gpu_layers_default_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(GPU_ENV, raising=False)
    assert gpu_layers(None) == 0
    monkeypatch.setenv(GPU_ENV, "-1")
    assert gpu_layers(None) == -1 and gpu_layers(3) == 3
    monkeypatch.setenv(GPU_ENV, "all")
    with pytest.raises(UserError):
        gpu_layers(None)


# ----- crash safety ----------------------------------------------------------------------------

def test_checkpoint_refuses_damage_and_other_runs(tmp_path):
    path = tmp_path / "o.parquet.partial.jsonl"
    ck = Checkpoint(path, {"run": 1}, [1, 2])
    for i in range(3):
        ck.append(1, {"i": i})
    ck.append(2, {"i": 0})
    ck.close()
    again = Checkpoint(path, {"run": 1}, [1, 2])
    assert (again.resumed, again.done(1), again.done(2)) == (4, 3, 1)
    again.close()
    with pytest.raises(UserError, match="another decode"):
        Checkpoint(path, {"run": 2}, [1, 2])
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines) + lines[2])  # a duplicated record
    with pytest.raises(UserError, match="damaged"):
        Checkpoint(path, {"run": 1}, [1, 2])
    path.write_bytes(b"".join(lines) + b'{"seq":4,"cla')  # torn last line: cut, not fatal
    torn = Checkpoint(path, {"run": 1}, [1, 2])
    assert torn.resumed == 4
    with pytest.raises(UserError, match="another decode is writing"):
        Checkpoint(path, {"run": 1}, [1, 2])
    torn.remove()
    assert not path.exists()


@pytest.mark.slow
def test_killed_decode_resumes_without_duplicates_or_loss(counts_artifact, keys, tmp_path):
    """SIGKILL a decode mid-generation, rerun the same command, compare with the stream."""
    pub = keys[0][1]
    out = tmp_path / "syn.jsonl"
    n = 6000
    argv = [EXE, "decode", str(counts_artifact), "--trust", str(pub), "--n", str(n), "--out",
            str(out), "--decoder", "marginals", "--overgenerate", "1", "--no-fit"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1")
    ckpt = checkpoint_path(out)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if ckpt.exists() and ckpt.read_bytes().count(b"\n") > 500:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the decode finished before it could be killed; raise n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lines = ckpt.read_bytes().split(b"\n")
    seqs = [json.loads(x)["seq"] for x in lines[1:-1]]
    assert seqs == list(range(len(seqs))) and 500 <= len(seqs) < n
    assert not out.exists()

    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert "resuming" in rerun.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == n and not ckpt.exists()
    rel = _released(counts_artifact, pub)
    dec = MarginalsDecoder(rel, seed=0)
    rows = plan(rel, n, 1.0).rows
    expected = [dec.record(c, i) for c in rel.classes for i in range(rows[c])]
    assert records == expected  # every record of the stream exactly once, in order
    doc = json.loads((tmp_path / "syn.jsonl.provenance.json").read_text())
    assert doc["generation"]["resumed"] == len(seqs)
    assert doc["generation"]["records_this_run"] == n - len(seqs)


# ----- the LLM decoder ---------------------------------------------------------------------------

class _FakeGenerator:
    """Stands in for RecordGenerator: record j of a call is a function of (seed, j)."""

    def __init__(self, schema, llm, config) -> None:
        self.seed, self.last_stats = config.seed, GenerationStats(records=1)

    def generate(self, *, class_value, positives, negatives, hints, n, on_record):
        for j in range(n):
            on_record({"seed": self.seed, "j": j, "class": class_value})


def test_llm_stream_resumes_exactly_from_any_point(counts_artifact, keys, monkeypatch):
    monkeypatch.setattr("decode.decoders.llm.RecordGenerator", _FakeGenerator)
    rel = _released(counts_artifact, keys[0][1])
    dec = LLMDecoder(rel, SimpleNamespace(info=None), seed=5)

    def stream(c, start, total):
        out = []
        dec.generate(c, start, total, out.append)
        return out

    full = stream(3, 0, 21)
    assert len(full) == 21 and len({json.dumps(r) for r in full}) == 21
    for start in range(22):
        assert stream(3, start, 21) == full[start:]
    assert stream(2, 0, 21) != full  # classes get their own seeds


@pytest.mark.model
def test_llm_decode_of_a_small_n(pool_art, keys, tmp_path):
    pub = keys[0][1]
    out = tmp_path / "llm.parquet"
    doc = _decode(pool_art, pub, out, n=2, decoder="llm", overgenerate=1, select_top=False)
    rel = _released(pool_art, pub)
    df = pl.read_parquet(out)
    validator = rel.schema.record_validator()
    assert df.height == 2 and all(validator.is_valid(r) for r in df.to_dicts())
    assert doc["model"]["sha256"] and len(doc["model"]["sha256"]) == 64
    assert doc["prompt_templates_sha256"]
    # a model-mode artifact (the default counts mode): the hybrid decoder, fields from the model
    assert doc["decoder"]["name"] == "llm"
    assert doc["decoder"]["fields_from"] == "the released counts model"
    assert doc["decoder"]["generation"]["max_attempts"] >= 1
    whole = _decode(pool_art, pub, tmp_path / "whole.parquet", n=2, decoder="llm",
                    overgenerate=1, select_top=False, hybrid=False)
    assert whole["decoder"]["generation"]["two_stage"] is True  # --whole-records


def test_settings_are_checked_on_construction():
    with pytest.raises(UserError, match="--decoder"):
        DecodeSettings(n=1, decoder="gan")
    with pytest.raises(UserError, match="--seed"):
        replace(DecodeSettings(n=1), seed=-1)
    with pytest.raises(UserError, match="--n"):
        DecodeSettings(n=0)
    with pytest.raises(TypeError):
        DecodeSettings(5)  # keyword-only: no positional mix-ups


def test_valid_share_is_measured(counts_artifact, keys):
    """The provenance's share_valid counts candidates that break the schema (it can fail)."""
    schema = _released(counts_artifact, keys[0][1]).schema
    good = generate_rows(3, seed=5)
    good = [{k: v for k, v in r.items() if k != "patient_id"} for r in good]
    assert valid_share(good, schema) == 1.0
    bad = dict(good[0], age=-4)
    assert valid_share([*good, bad], schema) == 0.75
    assert valid_share([], schema) == 1.0


# ----- a new decoder, as docs/architecture.md's recipe says --------------------------------------

def test_a_registered_decoder_is_a_choice_and_decodes(counts_artifact, keys, tmp_path, capsys,
                                                      monkeypatch):
    """A decoder is one module that registers a `DecoderSpec`: the CLI offers it with its own
    help, the pipeline builds it, and the provenance names it."""
    from decode.decoders import registry
    from decode.decoders.marginals import MarginalsDecoder

    class Toy(MarginalsDecoder):
        name = "toy"

    spec = registry.DecoderSpec(name="toy", help="a test's decoder (marginals renamed)",
                                build=lambda released, settings, seed, llm: Toy(released, seed))
    registry.DECODERS.load_builtins()
    monkeypatch.setattr(registry.DECODERS, "_entries", dict(registry.DECODERS._entries))
    registry.register(spec)
    with pytest.raises(SystemExit):
        main(["decode", "--help"])
    assert "toy: a test's decoder" in " ".join(capsys.readouterr().out.split())
    out = tmp_path / "toy.csv"
    code = main(["decode", str(counts_artifact), "--trust", str(keys[0][1]), "--decoder", "toy",
                 "--n", "30", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    prov = json.loads(out.with_name("toy.csv.provenance.json").read_text())
    assert prov["settings"]["decoder"] == "toy" and prov["decoder"]["name"] == "toy"
    assert len(out.read_text().splitlines()) == 31
