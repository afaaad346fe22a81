"""Decode in streamed chunks (issue #33 item 3): the chunk plan, chunked output against one
chunk, a crash resumed at a chunk boundary, pieces from another decode refused, and memory
flat in N.

All on a counts-only artifact of the demo sample with the marginals and model decoders (no
LLM), so they are quick.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import decode.pipeline
from decode.checkpoint import checkpoint_path
from decode.chunks import MANIFEST, chunk_folder, chunk_plan
from decode.cluster import CandidateWatch
from decode.pipeline import DecodeSettings, part_plan, plan, run_decode
from decode.released import released_view
from decode.shards import Part, shard_path
from selpe_audit.artifact.document import read_release
from selpe_audit.errors import UserError


@pytest.fixture(scope="module")
def key(keys) -> tuple[Path, Path]:
    """The session's release key pair: (private, public)."""
    return keys[0][0], keys[0][1]


@pytest.fixture(scope="module")
def art(counts_artifact) -> Path:
    """The session's counts-only release of the demo sample (conftest)."""
    return counts_artifact


def _crash_on_write(monkeypatch, nth: int) -> None:
    """Ctrl-C while the ``nth`` chunk (counting from 1) is being written."""
    real, calls = decode.pipeline.write_records, []

    def write(path, rows, schema):
        calls.append(path)
        if len(calls) == nth:
            raise KeyboardInterrupt
        return real(path, rows, schema)

    monkeypatch.setattr(decode.pipeline, "write_records", write)


def _run(art: Path, pub: Path, out: Path, **kw) -> dict:
    s = DecodeSettings(**{"n": 300, "decoder": "marginals", **kw})
    return run_decode(art, [pub], 0, out, s).provenance_doc


# ----- the plan --------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.integers(0, 400), min_size=1, max_size=6),
       chunk_rows=st.integers(1, 500), og=st.sampled_from([1.0, 1.5, 2.0, 3.7]))
def test_chunks_cover_every_row_once_and_continue_each_stream(rows, chunk_rows, og):
    per_class = dict(enumerate(rows))
    chunks = chunk_plan(per_class, og, chunk_rows)
    total = sum(rows)
    assert len(chunks) == max(1, -(-total // chunk_rows))
    assert all(sum(ch.rows.values()) <= chunk_rows for ch in chunks)
    for c, a in per_class.items():
        assert sum(ch.rows[c] for ch in chunks) == a
        made = 0
        for ch in chunks:  # each chunk starts the class's stream where the last one stopped
            assert ch.starts[c] == made and ch.candidates[c] >= ch.rows[c]
            made += ch.candidates[c]
    if total <= chunk_rows:  # one chunk: the plan of an unchunked decode
        assert chunks[0].candidates == {c: math.ceil(og * a) for c, a in per_class.items()}
        assert chunks[0].rows == per_class


# ----- chunked output ----------------------------------------------------------------------------

@pytest.mark.slow
def test_chunked_output_is_the_unchunked_stream_when_nothing_is_selected(art, key, tmp_path):
    """Overgenerate 1 and no fit: every candidate is kept, so the chunks' rows are the class
    streams' first rows, exactly the rows of one chunk - byte for byte."""
    pub = key[1]
    one, many = tmp_path / "one.csv", tmp_path / "many.csv"
    kw = {"overgenerate": 1.0, "fit": False}
    d1 = _run(art, pub, one, **kw)
    d2 = _run(art, pub, many, chunk_rows=41, **kw)
    assert one.read_bytes() == many.read_bytes()
    assert d2["output"]["chunks"] == 8 and "chunks" not in d1["output"]
    assert d1["rows_per_class"] == d2["rows_per_class"]
    assert d1["fidelity"] == d2["fidelity"]  # counts summed over chunks: the same numbers
    assert not chunk_folder(many).exists()
    assert not list(tmp_path.glob("*.partial.jsonl"))


@pytest.mark.slow
@pytest.mark.parametrize("decoder", ["marginals", "model"])
@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_chunked_decode_with_the_fit_matches_the_released_counts_per_chunk(
        art, key, tmp_path, decoder, suffix):
    pub = key[1]
    one, many = tmp_path / f"one{suffix}", tmp_path / f"many{suffix}"
    d1 = _run(art, pub, one, decoder=decoder)
    d2 = _run(art, pub, many, decoder=decoder, chunk_rows=70)
    read = {".csv": pl.read_csv, ".jsonl": pl.read_ndjson, ".parquet": pl.read_parquet}[suffix]
    a, b = read(one), read(many)
    assert a.columns == b.columns and a.height == b.height == 300
    assert a.schema == b.schema
    assert d1["rows_per_class"] == d2["rows_per_class"]
    assert d2["validity"]["records_checked"] == 300
    # the fit runs within each chunk against the released margins scaled to it: chunks of 70
    # rows come close to one chunk of 300 (and far below the unfitted candidates)
    t1 = d1["fidelity"]["tvd_to_released"]["histograms_mean"]
    t2 = d2["fidelity"]["tvd_to_released"]["histograms_mean"]
    cand = d2["fidelity"]["candidates_tvd_to_released"]["histograms_mean"]
    assert t2 < cand and t2 < t1 + 0.03
    assert d2["output"]["sha256"] != d1["output"]["sha256"]


def test_a_crash_between_chunks_resumes_at_the_next_chunk(art, key, tmp_path, monkeypatch):
    pub = key[1]
    whole, out = tmp_path / "whole.jsonl", tmp_path / "out.jsonl"
    expected = _run(art, pub, whole, chunk_rows=50)
    _crash_on_write(monkeypatch, 3)  # while chunk 2 is being written
    with pytest.raises(KeyboardInterrupt):
        _run(art, pub, out, chunk_rows=50)
    folder = chunk_folder(out)
    manifest = json.loads((folder / MANIFEST).read_text())
    assert [e["index"] for e in manifest["done"]] == [0, 1] and not out.exists()
    # chunk 2's candidates were all made before the crash: they wait in its checkpoint
    assert checkpoint_path(folder / "00002.jsonl").exists()
    monkeypatch.undo()
    doc = _run(art, pub, out, chunk_rows=50)
    assert out.read_bytes() == whole.read_bytes()
    assert doc["generation"]["resumed"] > 0
    assert doc["output"]["sha256"] == expected["output"]["sha256"]
    assert doc["fidelity"] == expected["fidelity"] and not folder.exists()


def test_chunks_of_another_decode_or_changed_are_refused(art, key, tmp_path, monkeypatch):
    pub = key[1]
    out = tmp_path / "out.csv"
    _crash_on_write(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        _run(art, pub, out, chunk_rows=100)
    monkeypatch.undo()
    with pytest.raises(UserError, match="belong to another decode"):
        _run(art, pub, out, chunk_rows=100, seed=7)
    with pytest.raises(UserError, match="belong to another decode"):
        _run(art, pub, out, chunk_rows=120)  # another cut: other chunks
    piece = chunk_folder(out) / "00000.csv"
    piece.write_text(piece.read_text().replace("\n", "\n\n", 1))
    with pytest.raises(UserError, match=r"00000\.csv: missing or changed"):
        _run(art, pub, out, chunk_rows=100)
    (chunk_folder(out) / MANIFEST).write_text("{not json")
    with pytest.raises(UserError, match="damaged"):
        _run(art, pub, out, chunk_rows=100)


def test_ray_progress_counts_the_chunks_of_a_part(art, key, tmp_path, monkeypatch):
    """The Ray driver's bar reads a chunked part's manifest and its chunk checkpoints."""
    pub = key[1]
    out = tmp_path / "out.jsonl"
    settings = DecodeSettings(n=300, decoder="marginals", shards=2, shard=0, chunk_rows=50)
    _crash_on_write(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        run_decode(art, [pub], 0, shard_path(out, Part(0, 2)), settings)
    released = released_view(read_release(art, [pub]))
    p = part_plan(plan(released, 300, 2.0), Part(0, 2), 2.0)
    chunks = chunk_plan(p.rows, 2.0, 50)
    made = sum(sum(ch.candidates.values()) for ch in chunks[:3])  # chunk 2: made, not written
    watch = CandidateWatch(out, [sum(sum(ch.candidates.values()) for ch in chunks), 10_000])
    assert watch.done({}) == made
    assert watch.done({}) == made  # read again: the same, not counted twice
    assert watch.done({1: None}) == made + 10_000


@pytest.mark.slow
def test_memory_is_flat_in_n(art, key, tmp_path):
    """Python's peak allocation for 4x the rows in chunks of 250 stays near that of one
    chunk's worth: nothing grows with N but the file on disk."""
    pub = key[1]
    _run(art, pub, tmp_path / "warm.parquet", n=250, chunk_rows=250)  # imports, caches

    def peak(n: int) -> int:
        tracemalloc.start()
        try:
            _run(art, pub, tmp_path / f"n{n}.parquet", n=n, chunk_rows=250)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak(1000), peak(4000)
    assert pl.read_parquet(tmp_path / "n4000.parquet").height == 4000
    assert large < 1.3 * small, (small, large)


def test_chunk_rows_must_be_positive():
    with pytest.raises(UserError, match="--chunk-rows must be >= 1"):
        replace(DecodeSettings(n=5), chunk_rows=0)
