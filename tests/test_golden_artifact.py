"""The artifact the demo configuration writes, against a golden copy: a change to how the
release is put together must not change one byte of what it writes.

OpenDP's noise is never seeded (release/dp), so a release's noisy numbers - and what the
selection picked with them - differ from run to run. The plan's row count is the one noisy
number that shapes the rest (the workload is sized from it): the test keeps OpenDP's count
(its mechanism, scale and epsilon) and reads its value as `PLANNED_ROWS`. The golden file
keeps, next to the document, the paths of what differed between several releases of the same rows
(list indices as ``*``): those keys are left out on both sides (a suppressed rate cell has
no rate), everything else (every key,
the ledger's mechanisms, scales and epsilons, the plan, the schema, the wording) must match
the golden document byte for byte. ``UPDATE_GOLDEN=1 pytest tests/test_golden_artifact.py``
writes the file anew (and only then), after a change that is meant to change the artifact.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DEMO_SAMPLE

from release.config_file import load_config
from release.pipeline import run_release
from selpe_audit.demo.generator import generate_rows
from selpe_audit.schema import demo_schema_path

GOLDEN = Path(__file__).parent / "golden"
DEMO_CONFIG = Path(__file__).parents[1] / "selpe_audit" / "data" / "demo_release.toml"
#: releases of the same rows whose differences name the noisy paths
RUNS = 4
#: differ by construction, not by noise: the time, the key, the ledger's own id and key; and
#: the selection's choices, noisy by design even where a few runs happen to agree
ALWAYS_MASKED = ("created", "release_key_id", "source", "budget.lifetime_ledger",
                 "selection.rounds.*.classes.*.winners", "selection.rounds.*.classes.*.partners")
MASK = "<masked>"
#: the plan's row count the test reads (the demo's 400 rows hold about 350 people)
PLANNED_ROWS = 350
#: the demo's two releases: its default (counts only) and `demo --selection`
VARIANTS = {"default": {}, "selection": {"counts_share": 0.5, "selection_share": 0.5}}
#: the topic codebooks' anchor vectors: the embedder's floats, kept to 5 decimals, round
#: differently on another CPU (AVX2 and AVX-512 kernels: 0.05217 against 0.05216 seen) -
#: compared to one step of their last decimal, everything else byte for byte
CPU_ROUNDED = "embeddings"
LAST_DECIMAL = 1e-5


@pytest.fixture
def planned_rows(monkeypatch):
    """OpenDP's row count, run as in a release, with its value read as `PLANNED_ROWS`."""
    stage = importlib.import_module("release.stages.sizing")  # where the release calls it
    measure = stage.measure_size

    def pinned(*args: Any, **kwargs: Any) -> Any:
        return replace(measure(*args, **kwargs), value=PLANNED_ROWS)

    monkeypatch.setattr(stage, "measure_size", pinned)


def _release(tmp: Path, keys: Any, variant: str, run: int) -> dict[str, Any]:
    out = tmp / f"{variant}-{run}"
    pool = tmp / "candidate_pool.jsonl"
    if not pool.exists():  # the demo's public pool: fictional rows of another seed, no ids
        pool.write_text("".join(
            json.dumps({k: v for k, v in r.items() if k != "patient_id"}) + "\n"
            for r in generate_rows(300, seed=2)))
    cfg = load_config(DEMO_CONFIG, {
        "data": DEMO_SAMPLE, "schema": demo_schema_path(), "out": out,
        "release_key": keys[0][0], "lifetime_ledger": tmp / f"ledger-{variant}-{run}",
        "epsilon": 2.0, "candidates": pool, **VARIANTS[variant]})
    run_release(cfg)
    return json.loads((out / "release.json").read_text(encoding="utf-8"))


def _paths(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a JSON value by its path (list indices as ``*``, so one noisy element
    masks its siblings too); a list of leaves under one path is kept as that list."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_paths(v, f"{prefix}.{k}" if prefix else k))
        return out
    if isinstance(value, list):
        out = {}
        for v in value:
            for k, leaf in _paths(v, f"{prefix}.*").items():
                out.setdefault(k, []).append(leaf)
        return out or {prefix: []}
    return {prefix: value}


def masked_doc(value: Any, masked: set[str], prefix: str = "") -> Any:
    if isinstance(value, dict):
        return {k: masked_doc(v, masked, path) for k, v in value.items()
                if (path := f"{prefix}.{k}" if prefix else k) not in masked}
    if isinstance(value, list):
        item = f"{prefix}.*"
        return [MASK if item in masked else masked_doc(v, masked, item) for v in value]
    return value


def canonical(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, ensure_ascii=False, indent=1) + "\n"


@pytest.mark.model  # the topic codebooks and the selection embed texts (the real embedder)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_demo_artifact_is_the_golden_one(tmp_path, keys, models, planned_rows, variant):
    golden = GOLDEN / f"demo_{variant}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        docs = [_release(tmp_path, keys, variant, i) for i in range(RUNS)]
        leaves = [_paths(d) for d in docs]
        noisy = {p for p in set().union(*leaves)
                 if len({json.dumps(x.get(p), sort_keys=True) for x in leaves}) > 1}
        masked = sorted(noisy | set(ALWAYS_MASKED))
        GOLDEN.mkdir(exist_ok=True)
        golden.write_text(canonical({"masked": masked,
                                      "document": masked_doc(docs[0], set(masked))}),
                          encoding="utf-8")
    want = json.loads(golden.read_text(encoding="utf-8"))
    masked = set(want["masked"]) | set(ALWAYS_MASKED)
    got = masked_doc(_release(tmp_path, keys, variant, RUNS), masked)
    want_doc = masked_doc(want["document"], masked)
    got_vectors, want_vectors = anchor_vectors(got), anchor_vectors(want_doc)
    assert got_vectors.keys() == want_vectors.keys()
    for name, vectors in want_vectors.items():
        diff = np.abs(np.asarray(got_vectors[name]) - np.asarray(vectors))
        assert diff.max(initial=0.0) <= LAST_DECIMAL * 1.01, name
    assert canonical(got) == canonical(want_doc)


def anchor_vectors(doc: dict[str, Any]) -> dict[str, Any]:
    """Each topic codebook's anchor vectors, taken out of ``doc`` (compared apart)."""
    topics = (doc.get("counts") or {}).get("topics") or {}
    return {name: t.pop(CPU_ROUNDED) for name, t in topics.items()
            if isinstance(t, dict) and CPU_ROUNDED in t}
