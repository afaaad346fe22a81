"""The ``model`` decoder (issue #19): refit the released counts model off-site, sample it.

A small frame with strong dependencies (colour follows the class, size follows colour, the
note's topic follows the class) is released through OpenDP itself (``Fixed`` contingency
table, rho-zCDP), written as the artifact's ``counts.model`` block, and decoded from that
block alone. Quick tests use this frame; the end-to-end test releases the demo data in model
mode and decodes it through the CLI in a process that must not import the release stage.
"""

from __future__ import annotations

import functools
import itertools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from decode.decoders import decoder_names
from decode.decoders.model import BLOCK, NO_MODEL, ModelDecoder
from decode.decoders.mrf import Chain, rebuild_model
from decode.released import released_view
from selpe_audit.artifact.model_block import parse_model
from selpe_audit.artifact.view import ReleaseView
from selpe_audit.errors import UserError
from selpe_audit.schema import parse_schema

ROOT = Path(__file__).resolve().parents[1]
N_ROWS = 3000
COLOURS = ["red", "green", "blue", "black"]
NOTES = [["a sore throat", "throat hurts"], ["chest pain", "pain in the chest", "x" * 50],
         ["a bad fall", "fell off a ladder"]]  # x * 50 breaks maxLength: never emitted
SCHEMA = parse_schema({
    "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "tiny", "type": "object",
    "x-label": "y", "additionalProperties": False,
    "required": ["y", "colour", "size", "note", "mood"],
    "properties": {
        "y": {"type": "integer", "enum": [1, 2, 3], "description": "class"},
        "colour": {"type": "string", "enum": COLOURS, "description": "colour"},
        "size": {"type": "integer", "minimum": 0, "maximum": 30, "x-bins": [0, 10, 20, 30],
                 "description": "size"},
        "note": {"type": "string", "minLength": 3, "maxLength": 40, "description": "note"},
        "mood": {"type": "string", "enum": ["calm", "upset"], "description": "not modelled"},
    }}, source="test schema")
# artifact column name -> (frame column, kind, number of keys)
COLUMNS = {"y": ("y", "class", 3), "colour": ("colour", "categories", 4),
           "size": ("size", "bins", 3), "topic:note": ("topic", "topic", 3)}


def _frame() -> pl.DataFrame:
    """Codes of public keys per row: colour follows y, size follows colour, topic follows y."""
    rng = np.random.default_rng(0)
    y = rng.choice(3, N_ROWS, p=[0.2, 0.3, 0.5])
    colour = np.where(rng.random(N_ROWS) < 0.85, y, rng.integers(0, 4, N_ROWS))
    size = np.where(rng.random(N_ROWS) < 0.8, colour % 3, rng.integers(0, 3, N_ROWS))
    topic = np.where(rng.random(N_ROWS) < 0.7, (y + 1) % 3, rng.integers(0, 3, N_ROWS))
    return pl.DataFrame({"y": y, "colour": colour, "size": size, "topic": topic})


@pytest.fixture(scope="module")
def release():
    """OpenDP's own release of the frame (made once per session: test_hybrid_decoder uses it
    too): the ContingencyTable and its ``counts.model`` block."""
    return opendp_release()


@functools.cache
def opendp_release():
    import opendp.prelude as dp

    dp.enable_features("contrib")
    ctx = dp.Context.compositor(data=_frame().lazy(), privacy_unit=dp.unit_of(contributions=1),
                                privacy_loss=dp.loss_of(rho=2.0), split_evenly_over=1)
    table = ctx.query().select(*(c for c, _, _ in COLUMNS.values())).contingency_table(
        keys={c: list(range(n)) for c, _, n in COLUMNS.values()},
        algorithm=dp.mbi.Fixed(queries=[
            dp.mbi.Count(("y",), weight=2.0), dp.mbi.Count(("y", "colour")),
            dp.mbi.Count(("y", "size")), dp.mbi.Count(("colour", "size")),
            dp.mbi.Count(("y", "topic"))])).release()
    names = {frame: name for name, (frame, _, _) in COLUMNS.items()}
    keys = {"y": ["1", "2", "3"], "colour": COLOURS, "size": SCHEMA.field("size").bin_labels(),
            "topic:note": ["0", "1", "2"]}
    block = {
        "algorithm": "fixed", "measure": "zero-concentrated", "rho": 2.0,
        "estimator": "mirror_descent",
        "columns": [{"name": name, "field": name.removeprefix("topic:"), "kind": kind,
                     "keys": keys[name]} for name, (_, kind, _) in COLUMNS.items()],
        "marginals": [{"clique": [names[a] for a in m.clique], "stddev": float(m.stddev),
                       "values": [int(v) for v in np.asarray(m.noisy_measurement).ravel()]}
                      for m in table.marginals.flatten()],
        "total": float(table.model.total)}
    return table, block


def model_doc(block: dict | None, table) -> dict:
    """A release.json as decode reads it (signatures aside): class balance, histograms and
    the model parts, projected from the model as the release does."""
    balance = np.asarray(table.project(("y",)))[:3]
    counts: dict = {
        "signed": True, "mode": "fixed" if block else "marginals",
        "class_balance": {"mechanism_id": "counts/model", "classes": [1, 2, 3],
                          "dp_counts": [round(float(v)) for v in balance],
                          "stddev": float(table.std(("y",)))},
        "histograms": {"colour": {
            "mechanism_id": "counts/model", "kind": "categories", "keys": COLOURS, "edges": None,
            "dp_counts_by_class": [[round(float(v)) for v in row[:4]]
                                   for row in np.asarray(table.project(("y", "colour")))[:3]],
            "stddev": float(table.std(("y", "colour")))}}}
    if block is not None:
        counts["model"] = block
        counts["topics"] = {"note": {
            "k": 3, "source": "public pool", "embedding_model": "test", "texts_considered": 7,
            "anchors": [{"text": m[0], "members": m} for m in NOTES],
            "embeddings": [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]}}
    return {"schema": SCHEMA.public_json(), "schema_sha256": SCHEMA.sha256(),
            "ledger": {"entries": [], "total_epsilon": 1.0, "total_delta": 1e-6,
                       "accountant": "x"},
            "counts": counts, "selection": None}


def released_from(doc: dict):
    """Decode's view of an unsigned test document (checked as decode checks one)."""
    return released_view(SimpleNamespace(view=ReleaseView.checked(doc)))


@pytest.fixture(scope="module")
def decoder(release):
    table, block = release
    return ModelDecoder(released_from(model_doc(block, table)), seed=11)


# ----- the model ---------------------------------------------------------------------------

def test_the_refit_shim_is_pinned_to_the_installed_private_pgm():
    """decode reaches mbi's junction tree and message passing through `decode.decoders.pgm`
    only; those names are read against one version, the one installed."""
    from decode.decoders import pgm

    assert pgm.version() == pgm.PINNED
    assert all(hasattr(pgm, name) for name in pgm.__all__)


@pytest.mark.slow
def test_rebuilt_model_equals_the_released_one(release):
    table, block = release
    model = rebuild_model(parse_model(json.loads(json.dumps(block))))
    frame = {name: frame for name, (frame, _, _) in COLUMNS.items()}
    for attrs in [("y",), ("y", "colour"), ("colour", "size"), ("y", "topic:note"),
                  ("y", "colour", "size"), ("size", "topic:note")]:
        ours = np.asarray(model.project(attrs).datavector(flatten=False))
        theirs = np.asarray(table.project(tuple(frame[a] for a in attrs)))
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)
    assert model.total == pytest.approx(block["total"])


def test_the_chain_is_the_model_conditioned_on_real_cells(release):
    """The product of the chain's conditionals equals the model's joint restricted to the
    allowed cells and renormalised (brute force over the whole small domain)."""
    _, block = release
    model = rebuild_model(parse_model(block))
    names = [c["name"] for c in block["columns"]]
    allowed = {"y": [0, 1, 2], "colour": [0, 1, 2, 3], "size": [0, 2], "topic:note": [0, 1, 2]}
    joint = np.asarray(model.project(tuple(names)).datavector(flatten=False))
    joint = joint[np.ix_(*(allowed[a] for a in names))]
    chain = Chain.fit(model, allowed, "y")
    for k in range(3):
        want = joint[k] / joint[k].sum()
        got = np.zeros_like(want)
        cc = chain.given(k)
        for cells in itertools.product(*(range(len(allowed[a])) for a in names[1:])):
            at = dict(zip(names[1:], cells, strict=True))
            p = 1.0
            for s in chain.steps:
                parents = tuple(k if q == "y" else at[q] for q in s.parents)
                p *= s.table[(*parents, at[s.column])]
            got[cells] = p
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
        assert cc.columns == tuple(s.column for s in chain.steps)


# ----- the decoder -----------------------------------------------------------------------

def test_records_follow_the_model_given_their_class(decoder, release):
    """Per class: colour x size-bin and topic frequencies match the model's conditionals;
    no null cell, no text outside its topic's usable members, every record valid."""
    _, block = release
    model = rebuild_model(parse_model(block))
    size, n = SCHEMA.field("size"), 6000
    validator = SCHEMA.record_validator()
    members = {t: k for k, m in enumerate(NOTES) for t in m}
    for k, c in enumerate(SCHEMA.classes):
        recs: list = []
        decoder.generate(c, 0, n, recs.append)
        assert all(validator.is_valid(r) and r["y"] == c for r in recs)
        assert all(r["note"] in members and len(r["note"]) <= 40 for r in recs)
        got = np.zeros((4, 3))
        for r in recs:
            got[COLOURS.index(r["colour"]), size.bin_index(r["size"])] += 1 / n
        want = np.asarray(model.project(("y", "colour", "size")).datavector(flatten=False))
        want = want[k, :4, :3] / want[k, :4, :3].sum()
        assert np.abs(got - want).max() < 0.025
        topics = np.bincount([members[r["note"]] for r in recs], minlength=3) / n
        want_t = np.asarray(model.project(("y", "topic:note")).datavector(flatten=False))[k, :3]
        assert np.abs(topics - want_t / want_t.sum()).max() < 0.025
        assert {r["mood"] for r in recs} == {"calm", "upset"}  # not modelled: uniform


def test_the_stream_is_seeded_per_record(decoder, release):
    table, block = release
    c = SCHEMA.classes[1]
    whole: list = []
    decoder.generate(c, 0, 40, whole.append)
    tail: list = []
    decoder.generate(c, 25, 40, tail.append)
    assert tail == whole[25:] and decoder.record(c, 7) == whole[7]
    long: list = []  # across blocks of records drawn together
    decoder.generate(c, 0, 3 * BLOCK, long.append)
    cut: list = []
    decoder.generate(c, BLOCK - 3, 2 * BLOCK + 5, cut.append)
    assert cut == long[BLOCK - 3:2 * BLOCK + 5] and long[:40] == whole
    again = ModelDecoder(released_from(model_doc(block, table)), seed=11)
    assert [again.record(c, i) for i in range(40)] == whole
    other = ModelDecoder(released_from(model_doc(block, table)), seed=12)
    assert [other.record(c, i) for i in range(40)] != whole


def test_thousands_of_records_come_out_valid_and_in_order(decoder):
    """Many records in one call (its speed is the decode benchmark's, not a test's): each
    valid, of the asked class, and the stream's own records in order."""
    n, c = 3000, SCHEMA.classes[0]
    out: list = []
    decoder.generate(c, 0, n, out.append)
    validator = SCHEMA.record_validator()
    assert len(out) == n and all(validator.is_valid(r) for r in out)
    assert {r[SCHEMA.label] for r in out} == {c}
    assert out[1234] == decoder.record(c, 1234)


def test_describe_and_the_fit_scale(decoder):
    d = decoder.describe()
    assert d["name"] == "model" and "model" in decoder_names()
    assert d["text_source"] == {"note": "topics"} and d["placeholder"] is None
    assert d["counts_model"]["columns"] == list(COLUMNS)
    assert decoder.released.scale("colour") == \
        decoder.released.view.counts.histograms["colour"].stddev


def test_an_artifact_without_a_model_is_a_one_line_error(release):
    table, _ = release
    with pytest.raises(UserError, match='mode = "fixed"') as e:
        ModelDecoder(released_from(model_doc(None, table)), seed=0)
    assert str(e.value) == NO_MODEL and "\n" not in NO_MODEL


# ----- the checked view --------------------------------------------------------------------

def _broken(block: dict, table, how: str) -> dict:
    doc = json.loads(json.dumps(model_doc(block, table)))
    model = doc["counts"]["model"]
    if how == "values":
        model["marginals"][0]["values"].append(0)
    elif how == "clique":
        model["marginals"][1]["clique"] = ["y", "weight"]
    elif how == "stddev":
        model["marginals"][0]["stddev"] = None
    elif how == "keys":
        model["columns"][1]["keys"] = COLOURS[::-1]
    elif how == "topics":
        del doc["counts"]["topics"]
    elif how == "hist_stddev":
        doc["counts"]["histograms"]["colour"]["stddev"] = -1.0
    elif how == "mode":
        del doc["counts"]["model"]
    return doc


@pytest.mark.parametrize("how", ["values", "clique", "stddev", "keys", "topics", "hist_stddev",
                                 "mode"])
def test_a_malformed_model_block_is_refused(release, how):
    table, block = release
    with pytest.raises(UserError, match="malformed"):
        ReleaseView.checked(_broken(block, table, how))


def test_the_model_parts_are_typed_and_optional(release):
    table, block = release
    view = ReleaseView.checked(model_doc(block, table))
    assert view.counts.mode == "fixed" and view.counts.model.column("size").cells == 4
    assert view.counts.topics["note"].anchors[1].members[0] == "chest pain"
    old = model_doc(None, table)
    del old["counts"]["mode"], old["counts"]["class_balance"]["stddev"]
    del old["counts"]["histograms"]["colour"]["stddev"]
    view = ReleaseView.checked(old)
    assert view.counts.model is None and view.counts.topics == {}
    assert view.counts.histograms["colour"].stddev is None
    assert ReleaseView.parse({"counts": {"model": [1], "topics": 3}}).counts.model is None


# ----- end to end --------------------------------------------------------------------------

@pytest.mark.model
def test_release_in_fixed_mode_then_decode_with_the_model(tmp_path):
    """A real release of the demo data in model mode (topics from a public pool), decoded in
    a process that must not import the release stage."""
    from release.config_file import load_config
    from release.pipeline import run_release
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.demo.generator import generate_rows
    from selpe_audit.schema import demo_schema_path

    priv, pub, _ = generate_keypair(tmp_path / "release.pem")
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "patient_id"}) + "\n"
                            for r in generate_rows(150, seed=12345)))
    cfg = load_config(ROOT / "examples" / "release.toml", {
        "schema": demo_schema_path(), "release_key": priv, "out": tmp_path / "art",
        "lifetime_ledger": tmp_path / "ledger", "counts_share": 1.0, "selection_share": 0.0,
        "counts_mode": "fixed", "topics": 4, "candidates": pool})
    run_release(cfg)
    out = tmp_path / "syn.jsonl"
    script = (
        "import sys\nfrom pathlib import Path\n"
        "from decode.pipeline import DecodeSettings, run_decode\n"
        f"run_decode(Path({str(cfg.out)!r}), [Path({str(pub)!r})], 0, Path({str(out)!r}), "
        "DecodeSettings(n=300, decoder='model', seed=3))\n"
        "assert not [m for m in sys.modules if m == 'release' or m.startswith('release.')]\n")
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)
    prov = json.loads(out.with_name("syn.jsonl.provenance.json").read_text())
    assert prov["decoder"]["name"] == "model"
    assert prov["decoder"]["text_source"] == {"chief_complaint": "topics"}
    assert prov["validity"]["share_valid"] == 1.0 and prov["output"]["rows"] == 300
    assert prov["selection"]["fit"]["applied"]
    topics = json.loads((cfg.out / "release.json").read_text())["counts"]["topics"]
    members = {t for a in topics["chief_complaint"]["anchors"] for t in a["members"]}
    rows = pl.read_ndjson(out)
    assert set(rows["chief_complaint"]) <= members
