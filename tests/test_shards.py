"""Decode in shards (issue #21): the split rule, the same records however the parts run, and
the Ray backend (a killed worker resumes its part; a tampered artifact is refused everywhere).

Quick tests decode a counts-only artifact with the marginals decoder; the LLM variant is
marked `model`. The Ray tests share one local Ray of 2 CPUs (a module fixture) and skip without the
cluster extra.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from test_decode import copy_artifact

from decode.checkpoint import Checkpoint, checkpoint_path
from decode.cluster import NO_RAY, ShardJob, decode_shard, run_on_ray
from decode.merge import merge_shards
from decode.pipeline import (
    DecodeSettings,
    checkpoint_binding,
    make_decoder,
    part_plan,
    plan,
    run_decode,
)
from decode.released import released_view
from decode.shards import WHOLE, Part, all_parts, part_rows, shard_folder, shard_path, split
from selpe_audit.artifact.document import RELEASE_FILE, read_release
from selpe_audit.errors import UserError

EXE = str(Path(sys.executable).with_name("selpe-audit"))
ENV = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1")


@pytest.fixture(scope="module")
def key(keys) -> tuple[Path, Path]:
    """The session's release key pair: (private, public)."""
    return keys[0][0], keys[0][1]


@pytest.fixture(scope="module")
def art(counts_artifact) -> Path:
    """The session's counts-only release of the demo sample (conftest)."""
    return counts_artifact


def _released(art: Path, pub: Path):
    return released_view(read_release(art, [pub]))


# ----- the split rule ------------------------------------------------------------------------

@pytest.mark.parametrize("rows", [0, 1, 2, 7, 100, 1001])
@pytest.mark.parametrize("count", [1, 2, 3, 8])
def test_split_sums_to_the_rows_near_equal_and_rotates(rows, count):
    for offset in range(count + 1):
        parts = split(rows, count, offset)
        assert sum(parts) == rows and len(parts) == count
        assert max(parts) - min(parts) <= 1
        assert parts == split(rows, count, offset)  # deterministic
        if rows % count:  # the left-overs start at the offset
            assert parts[offset % count] == rows // count + 1
    assert split(rows, 1) == [rows]  # one part is the whole


def test_every_class_is_split_over_the_parts(art, key):
    whole = plan(_released(art, key[1]), 1003, 2.0)
    for count in (1, 2, 3, 7):
        shares = [part_rows(whole.rows, p) for p in all_parts(count)]
        for c, a in whole.rows.items():
            assert sum(s[c] for s in shares) == a
        totals = [sum(s.values()) for s in shares]  # each part within a row per class
        assert max(totals) - min(totals) <= len(whole.rows) and sum(totals) == 1003
    # the k-th class's left-over rows begin at part k, so they do not all land on part 0
    assert part_rows({"a": 1, "b": 1, "c": 1}, Part(1, 3)) == {"a": 0, "b": 1, "c": 0}
    assert part_plan(whole, WHOLE, 2.0) == whole


def test_part_seeds():
    assert Part().seed(11) == 11 and WHOLE.whole  # the whole plan keeps today's seeds
    seeds = {Part(i, n).seed(11) for n in (2, 3) for i in range(n)}
    assert len(seeds) == 5 and 11 not in seeds
    assert Part(1, 3).seed(11) == Part(1, 3).seed(11) != Part(1, 3).seed(12)
    assert all(0 <= s < 2**63 for s in seeds)
    with pytest.raises(ValueError):
        Part(3, 3)


def test_shard_settings_are_checked():
    assert DecodeSettings(n=5).parts == [WHOLE]
    assert DecodeSettings(n=5, shards=3).parts == all_parts(3)
    assert DecodeSettings(n=5, shards=3, shard=2).parts == [Part(2, 3)]
    with pytest.raises(UserError, match="--shards must be >= 1"):
        DecodeSettings(n=5, shards=0)
    with pytest.raises(UserError, match=r"--shard must lie in 0..2 for --shards 3 \(got 3\)"):
        DecodeSettings(n=5, shards=3, shard=3)
    with pytest.raises(UserError, match="--shard must lie"):
        DecodeSettings(n=5, shard=1)


def test_each_part_draws_its_own_stream(art, key):
    rel = _released(art, key[1])
    settings = DecodeSettings(n=10, decoder="marginals", seed=3)
    c = rel.classes[0]
    streams = [make_decoder(rel, settings, p).record(c, 0) for p in (WHOLE, *all_parts(2))]
    assert streams[0] == make_decoder(rel, settings).record(c, 0)  # part 0 of 1 = today
    assert len({json.dumps(s, sort_keys=True) for s in streams}) == 3


# ----- the same records, however the parts run ------------------------------------------------

def _argv(art: Path, pub: Path, out: Path, *extra: str) -> list[str]:
    return [EXE, "decode", str(art), "--trust", str(pub), "--out", str(out), *extra]


def _separately_and_together(art: Path, pub: Path, tmp: Path, args: list[str],
                             shards: int) -> tuple[bytes, bytes]:
    """(the S shard outputs of S processes concatenated, one process's --shards S output)."""
    parts = []
    for i in range(shards):
        out = tmp / f"part{i}.jsonl"
        r = subprocess.run(_argv(art, pub, out, *args, "--shards", str(shards), "--shard",
                                 str(i)), env=ENV, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        doc = json.loads((tmp / f"part{i}.jsonl.provenance.json").read_text())
        assert doc["shard"] == {"index": i, "count": shards}  # which shard of how many
        assert doc["settings"]["shard"] == i and doc["settings"]["shards"] == shards
        parts.append(out.read_bytes())
    out = tmp / "all.jsonl"
    r = subprocess.run(_argv(art, pub, out, *args, "--shards", str(shards)), env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert not shard_folder(out).exists() and not checkpoint_path(out).exists()
    doc = json.loads((tmp / "all.jsonl.provenance.json").read_text())
    assert doc["shards"]["count"] == shards and doc["shards"]["backend"] == "local"
    assert doc["output"]["rows"] == sum(p["rows"] for p in doc["shards"]["parts"])
    return b"".join(parts), out.read_bytes()


@pytest.mark.slow
def test_three_processes_equal_one(art, key, tmp_path):
    pub = key[1]
    joined, together = _separately_and_together(
        art, pub, tmp_path, ["--n", "300", "--decoder", "marginals", "--seed", "5"], 3)
    assert joined == together and together.count(b"\n") == 300
    whole = tmp_path / "whole.jsonl"  # and the shards are not the unsharded decode
    subprocess.run(_argv(art, pub, whole, "--n", "300", "--decoder", "marginals",
                         "--seed", "5"), env=ENV, check=True, capture_output=True)
    assert whole.read_bytes() != together and whole.read_bytes().count(b"\n") == 300


@pytest.mark.model
def test_two_llm_processes_equal_one(art, key, tmp_path):
    """The hybrid LLM decoder (fields from the released model, text from the LLM); two parts
    of two rows keep it near two minutes on 2 CPU cores."""
    joined, together = _separately_and_together(
        art, key[1], tmp_path,
        ["--n", "4", "--decoder", "llm", "--overgenerate", "1", "--seed", "2"], 2)
    assert joined == together and together.count(b"\n") == 4


def test_a_part_checkpoint_belongs_to_its_part(art, key, tmp_path):
    pub = key[1]
    rel = read_release(art, [pub])
    released = released_view(rel)
    settings = DecodeSettings(n=40, decoder="marginals", shards=2, shard=0)
    other = Part(1, 2)
    p = part_plan(plan(released, 40, 2.0), other, 2.0)
    out = tmp_path / "p.jsonl"
    Checkpoint(checkpoint_path(out), checkpoint_binding(rel, settings, make_decoder(
        released, settings, other), p, other, 1), list(released.classes)).close()
    with pytest.raises(UserError, match="belongs to another decode"):
        run_decode(art, [pub], 0, out, settings)


def test_merge_refuses_a_changed_part(art, key, tmp_path):
    pub = key[1]
    out = tmp_path / "m.parquet"
    settings = DecodeSettings(n=60, decoder="marginals", shards=2)
    docs = [run_decode(art, [pub], 0, shard_path(out, p), replace(settings, shard=p.index),
                       ).provenance_doc for p in settings.parts]
    rel = read_release(art, [pub])
    released, sha = released_view(rel), rel.sha256
    # every part against the artifact this process verified, shard 0 included: parts that
    # all agree with each other but were decoded from another release.json are refused
    with pytest.raises(UserError, match=r"part-0-of-2.*shard 0 of 2 was decoded from another "
                                        r"release.json than the one verified here"):
        merge_shards(out, released, docs, 1.0, "ray", artifact_sha256="f" * 64)
    other = {**docs[1], "artifact": {**docs[1]["artifact"], "sha256": "f" * 64}}
    with pytest.raises(UserError, match=r"part-1-of-2.*shard 1 of 2 was decoded from another"):
        merge_shards(out, released, [docs[0], other], 1.0, "ray", artifact_sha256=sha)
    changed = shard_path(out, Part(1, 2))
    changed.write_bytes(changed.read_bytes().replace(b"}\n", b"} \n", 1))
    with pytest.raises(UserError, match="changed since it was decoded"):
        merge_shards(out, released, docs, 1.0, "local", artifact_sha256=sha)
    with pytest.raises(UserError, match="another decoder"):
        merge_shards(out, released, [docs[0], {**docs[1], "decoder": {"name": "x"}}], 1.0, "x",
                     artifact_sha256=sha)
    assert not out.exists()


# ----- Ray ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_session():
    """One local Ray of 2 CPUs for the module (start-up takes seconds)."""
    ray = pytest.importorskip("ray")
    with warnings.catch_warnings():  # Ray starts its processes by fork + exec, not fork alone
        warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False)
    yield ray
    ray.shutdown()


def test_without_ray_the_flag_is_one_line(art, key, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    with pytest.raises(UserError, match=NO_RAY.replace("[", r"\[").replace("]", r"\]")):
        run_on_ray(art, [key[1]], 0, tmp_path / "o.jsonl",
                   DecodeSettings(n=5, decoder="marginals"), None)
    with pytest.raises(UserError, match="--shard makes one part"):
        run_on_ray(art, [key[1]], 0, tmp_path / "o.jsonl",
                   DecodeSettings(n=5, decoder="marginals", shards=2, shard=0), None)


def _kill_worker_midway(ckpt: Path, min_bytes: int, stop: threading.Event,
                        killed: dict) -> None:
    """Kill the Ray worker that holds ``ckpt`` open once it has ``min_bytes`` of candidates."""
    import psutil

    while not stop.is_set():
        if ckpt.exists() and ckpt.stat().st_size >= min_bytes:
            for proc in psutil.process_iter(["cmdline"]):
                cmd = proc.info["cmdline"] or [""]
                try:
                    if cmd[0].startswith("ray::decode_shard") and any(
                            f.path == str(ckpt) for f in proc.open_files()):
                        killed.update(pid=proc.pid, bytes=ckpt.stat().st_size)
                        proc.kill()
                        return
                except (psutil.Error, OSError):
                    continue
        time.sleep(0.01)


@pytest.mark.slow
def test_a_killed_worker_resumes_its_part(ray_session, art, key, tmp_path):
    """SIGKILL the worker of shard 1 midway: Ray reruns the task, which resumes from the
    part's checkpoint; the job ends with the same N records as a decode without Ray."""
    pub = key[1]
    n = 16_000
    settings = DecodeSettings(n=n, decoder="marginals", overgenerate=1.0, fit=False, seed=9)
    out = tmp_path / "ray.jsonl"
    ckpt = checkpoint_path(shard_path(out, Part(1, 2)))
    stop, killed = threading.Event(), {}
    killer = threading.Thread(target=_kill_worker_midway, args=(ckpt, 100_000, stop, killed))
    killer.start()
    try:
        result = run_on_ray(art, [pub], 0, out, settings, None, shards=2)
    finally:
        stop.set()
        killer.join()
    assert killed, "no worker was killed: the part finished first; raise n"
    part = result.provenance_doc["shards"]["parts"][1]
    assert 0 < part["resumed"] < part["candidates"]  # the rerun resumed the checkpoint
    assert part["resumed"] + part["records_this_run"] == part["candidates"]
    assert not shard_folder(out).exists()

    here = tmp_path / "here.jsonl"
    run_decode(art, [pub], 0, here, replace(settings, shards=2))
    assert out.read_bytes() == here.read_bytes()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    validator = _released(art, pub).schema.record_validator()
    assert len(records) == n and all(validator.is_valid(r) for r in records)


def test_a_tampered_artifact_is_refused_on_every_worker(ray_session, art, key,
                                                       tmp_path):
    pub = key[1]
    bad = copy_artifact(art, tmp_path / "tampered")
    data = (bad / RELEASE_FILE).read_bytes()
    (bad / RELEASE_FILE).write_bytes(data.replace(b'"dp_counts":[', b'"dp_counts":[1', 1))
    out = tmp_path / "o.jsonl"
    settings = DecodeSettings(n=50, decoder="marginals", shards=2)
    with pytest.raises(UserError, match="does not verify"):  # the driver, before submitting
        run_on_ray(bad, [pub], 0, out, settings, None, shards=2)
    jobs = [ShardJob(bad, (pub,), 0, out, replace(settings, shard=i)) for i in range(2)]
    with pytest.raises(UserError, match="does not verify"):  # a worker's own check
        decode_shard(jobs[0])
    refs = [ray_session.remote(decode_shard).remote(job) for job in jobs]  # on the workers
    for ref in refs:
        with pytest.raises(ray_session.exceptions.RayTaskError) as err:
            ray_session.get(ref)
        assert isinstance(err.value.cause, UserError) and "does not verify" in str(
            err.value.cause)
    assert not shard_folder(out).exists() and not out.exists()  # nothing was generated


def test_ray_parts_must_come_from_the_artifact_the_driver_verified(ray_session, art, key,
                                                                  tmp_path, monkeypatch):
    """The driver verified one release.json; the workers (other processes, reading the path
    again) decoded another: every part agrees with shard 0, and the merge still refuses."""
    import decode.cluster as cluster

    real = cluster.read_release

    def verified_elsewhere(*args, **kw):  # as if the file was swapped after the driver's check
        rel = real(*args, **kw)
        return replace(rel, verification=replace(rel.verification, sha256="e" * 64))

    monkeypatch.setattr(cluster, "read_release", verified_elsewhere)
    out = tmp_path / "o.jsonl"
    with pytest.raises(UserError, match=r"shard 0 of 2 was decoded from another release\.json"):
        run_on_ray(art, [key[1]], 0, out, DecodeSettings(n=20, decoder="marginals"), None,
                   shards=2)
    assert not out.exists()
