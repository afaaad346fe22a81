"""Release part 1: OpenDP noisy counts, the ledger, person-level units, lifetime budget."""

from __future__ import annotations

import json
import math
import multiprocessing
import re
import subprocess
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import DEMO_SAMPLE, good_row, with_settings

from release.config import ReleaseConfig
from release.config_file import load_config, mode_setting_owner
from release.config_sections import CohortSpec, CountsConfig, RateSpec
from release.counts.keys import derive_frame
from release.counts.marginals import plan_queries
from release.dp.counts import make_context, make_count
from release.dp.unit import PrivacyUnit
from release.ledger import LifetimeLedger
from release.pipeline import run_release
from selpe_audit.artifact.document import read_release
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.errors import UserError
from selpe_audit.schema import demo_schema_path

ROOT = Path(__file__).resolve().parents[1]
CANARY_ID = "CNRYPID9"
CANARY_TEXT = "canary zebra-quokka-7731 complaint"
CANARY_TEMP = 39.87


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    d = tmp_path_factory.mktemp("keys")
    return generate_keypair(d / "release.pem")


def demo_config(tmp: Path, key: Path, **kw) -> ReleaseConfig:
    base = load_config(ROOT / "examples" / "release.toml", {
        "release_key": key, "out": tmp / "out", "lifetime_ledger": tmp / "ledger",
        "schema": demo_schema_path()})
    return with_settings(base, data=kw.pop("data", DEMO_SAMPLE), **kw)


def _canary_data(tmp: Path) -> Path:
    rows = pl.read_csv(DEMO_SAMPLE, infer_schema=False).to_dicts()
    rows[5].update(patient_id=CANARY_ID, chief_complaint=CANARY_TEXT,
                   temperature_c=str(CANARY_TEMP))
    p = tmp / "canary.csv"
    pl.DataFrame(rows).write_csv(p)
    return p


def test_demo_release_counts_are_complete_signed_and_accounted(tmp_path, keys, capfd):
    priv, pub, _ = keys
    cfg = demo_config(tmp_path, priv, data=_canary_data(tmp_path), counts_mode="marginals")
    result = run_release(cfg)
    rel = read_release(cfg.out, [pub])
    doc = rel.doc
    ledger = doc["ledger"]
    total = sum(e["epsilon"] for e in ledger["entries"])
    assert math.isclose(ledger["total_epsilon"], total, rel_tol=1e-9)
    assert ledger["total_epsilon"] <= cfg.budget.epsilon + 1e-9
    assert math.isclose(ledger["total_epsilon"], cfg.budget.counts_epsilon, rel_tol=1e-9)
    # every public key is released, empty ones included
    schema_classes = [1, 2, 3, 4, 5]
    assert doc["counts"]["class_balance"]["classes"] == schema_classes
    for name, h in doc["counts"]["histograms"].items():
        assert len(h["dp_counts_by_class"]) == 5, name
        assert all(len(row) == len(h["keys"]) for row in h["dp_counts_by_class"]), name
    assert len(doc["counts"]["histograms"]["arrival_mode"]["keys"]) == 5
    assert {c["name"] for c in doc["counts"]["cohorts"]["cohorts"]} == {
        "children", "older adults by ambulance or helicopter", "(other)"}
    assert len(doc["counts"]["rates"][0]["cells"]) == 5
    # person-level: OpenDP scale doubles with two rows per person (k / eps)
    hist = next(e for e in ledger["entries"] if e["id"] == "counts/histogram/age")
    assert math.isclose(hist["scale"], 2 / hist["epsilon"], rel_tol=1e-6)
    # the canary: nothing private in any output file or console output
    out, err = capfd.readouterr()
    blobs = [out, err] + [p.read_bytes().decode("utf-8", "replace")
                          for p in cfg.out.rglob("*") if p.is_file()]
    blobs += [p.read_bytes().decode("utf-8", "replace")  # the unit hashes too
              for p in Path(cfg.budget.lifetime_ledger).rglob("*") if p.is_file()]
    for blob in blobs:
        for canary in (CANARY_ID, "zebra-quokka", str(CANARY_TEMP)):
            assert canary not in blob
    assert result.path == cfg.out / "release.json"


def test_row_unit_scale_and_openDP_map(tmp_path, keys):
    priv, _, _ = keys
    cfg = demo_config(tmp_path, priv, unit="row", max_contributions=1, cohorts=(), rates=(),
                      counts_mode="marginals")
    doc = run_release(cfg).doc
    for e in doc["ledger"]["entries"]:
        assert math.isclose(e["scale"], 1 / e["epsilon"], rel_tol=1e-6)
    assert "cohorts" not in doc["counts"] and "rates" not in doc["counts"]


def test_empty_class_and_bins_are_released(tmp_path, keys):
    priv, _, _ = keys
    rows = [good_row(i) for i in range(30)]  # every row acuity 4, one age bin
    p = tmp_path / "one_class.csv"
    pl.DataFrame(rows).write_csv(p)
    cfg = demo_config(tmp_path, priv, data=p, unit="row", max_contributions=1, cohorts=(),
                      rates=())
    doc = run_release(cfg).doc
    assert len(doc["counts"]["class_balance"]["dp_counts"]) == 5
    assert len(doc["counts"]["histograms"]["age"]["keys"]) == 6


def test_noisy_counts_unbiased_with_ledger_variance(demo_schema):
    """Repeat one OpenDP measurement; the noise has mean 0 and the discrete-Laplace variance
    its reported scale implies."""
    rows = pl.read_csv(DEMO_SAMPLE).to_dicts()
    cfg = ReleaseConfig(dataset="t", data=DEMO_SAMPLE, schema=demo_schema_path(),
                        out=Path("unused"), release_key=Path("unused"))
    frame = derive_frame(rows, demo_schema, cfg.counts, None)
    query = next(q for q in plan_queries(demo_schema, cfg.counts, cfg.budget.counts_epsilon)
                 if q.id == "counts/histogram/age")
    exact = frame.group_by(list(query.by)).len().collect()
    truth = {tuple(r[:-1]): r[-1] for r in exact.iter_rows()}
    eps = 0.5
    ctx = make_context(frame, PrivacyUnit(), [eps])
    m = make_count(ctx, PrivacyUnit(), replace(query, epsilon=eps))
    assert math.isclose(m.map(1), eps, rel_tol=1e-9)
    errors = []
    for _ in range(60):
        out = m(frame).collect()
        for r in out.iter_rows(named=True):
            key = (r[query.by[0]], r[query.by[1]])
            errors.append(r["dp_count"] - truth.get(key, 0))
    errors = np.asarray(errors, dtype=float)
    scale = 1 / eps
    q = math.exp(-1 / scale)
    var = 2 * q / (1 - q) ** 2
    se = math.sqrt(var / len(errors))
    assert abs(errors.mean()) < 4.5 * se
    assert 0.85 * var < errors.var() < 1.15 * var


def _reserve(args):
    folder, barrier = args
    barrier.wait()
    try:
        LifetimeLedger(Path(folder), "ds", 3.0).reserve(2.0)
        return "ok"
    except UserError:
        return "refused"


def test_lifetime_budget_refusal_and_concurrency(tmp_path):
    ledger = LifetimeLedger(tmp_path, "ds", 3.0)
    rid = ledger.reserve(2.0)
    with pytest.raises(UserError, match=r"lifetime budget .* would be exceeded"):
        ledger.reserve(1.5)
    ledger.finish(rid, "aborted")
    assert ledger.spent() == (0, 0)
    other = tmp_path / "concurrent"
    spawn = multiprocessing.get_context("spawn")  # a fork of a threaded pytest worker can hang
    with spawn.Manager() as mgr:
        barrier = mgr.Barrier(4)
        with spawn.Pool(4) as pool:
            results = pool.map(_reserve, [(str(other), barrier)] * 4)
    assert sorted(results) == ["ok", "refused", "refused", "refused"]


def test_lifetime_delta_adds_up_across_releases(tmp_path):
    """Releases compose basically: their deltas add up under the lifetime delta, as their
    epsilons do under the lifetime epsilon; aborted releases give theirs back."""
    ledger = LifetimeLedger(tmp_path, "ds", 10.0, 2.5e-6)
    ledger.reserve(1.0, 1e-6)
    aborted = ledger.reserve(1.0, 1e-6)
    with pytest.raises(UserError, match=r"lifetime delta .* 2e-06 spent \+ 1e-06 requested"):
        ledger.reserve(1.0, 1e-6)
    ledger.reserve(1.0)  # a pure epsilon-DP release still fits
    ledger.finish(aborted, "aborted")
    ledger.reserve(1.0, 1e-6)
    assert ledger.spent() == (3.0, pytest.approx(2e-6))
    doc = ledger.summary()
    assert doc["lifetime_delta"] == 2.5e-6 and [r["delta"] for r in doc["releases"]] == [
        1e-6, 1e-6, 0.0, 1e-6]


def test_cli_refuses_beyond_lifetime_before_reading(tmp_path, keys):
    priv, _, _ = keys
    bad_data = tmp_path / "bad.csv"
    bad_data.write_bytes(b"\xff\xfe not even utf-8")
    exe = str(Path(__import__("sys").executable).with_name("selpe-audit"))
    cmd = [exe, "release", "--config", str(ROOT / "examples" / "release.toml"),
           "--key", str(priv), "--out", str(tmp_path / "o"), "--data", str(bad_data),
           "--schema", str(demo_schema_path()),
           "--lifetime-ledger", str(tmp_path / "l"), "--lifetime-epsilon", "3"]
    LifetimeLedger(tmp_path / "l", "ed_triage_demo", 3.0).reserve(2.0)
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode != 0
    assert "would be exceeded" in r.stderr and "no data was read" in r.stderr
    assert "UTF-8" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"epsilon": 0.0}, "epsilon must be a finite number > 0"),
        ({"epsilon": -1.0}, "epsilon must be a finite number > 0"),
        # issue 67: too small for OpenDP's noise calibration (was "internal error")
        ({"epsilon": 1e-300}, "epsilon 1e-300 is below 1e-05, the least OpenDP calibrates"),
        ({"counts_share": 0.7, "selection_share": 0.2}, "must sum to 1"),
        ({"unit": "household"}, "'row' or 'person'"),
        ({"id_field": "nope"}, "unknown field 'nope'"),
        ({"cohorts": (CohortSpec("a", {"age": (0, 30)}), CohortSpec("b", {"age": (30, 40)}))},
         "overlap"),
        ({"cohorts": (CohortSpec("a", {"weight": (0, 30)}),)}, "unknown field 'weight'"),
        ({"cohorts": (CohortSpec("a", {"sex": ("robot",)}),)}, "values from its enum"),
        ({"rates": (RateSpec("r", "disposition", ("admitted-icu",), ("colour",)),)},
         "unknown field 'colour'"),
        ({"gamma": 0.6, "alpha": 0.5}, r"gamma \+ alpha < 1"),
        ({"epsilon": 20.0, "lifetime_epsilon": 10.0}, "exceeds the lifetime budget"),
        ({"delta": 1e-6, "counts_mode": "marginals"},
         "delta > 0 applies to the zCDP counts modes"),
        ({"delta": 0.0}, "counts mode 'fixed' is Gaussian"),
        ({"selection_mode": "pe-histogram", "counts_share": 0.5, "selection_share": 0.5,
          "delta": 1e-4, "lifetime_delta": 1e-5},
         "budget.delta 0.0001 exceeds the lifetime delta 1e-05"),
        ({"lifetime_delta": -1e-6}, "lifetime_delta must be a number in"),
        # a share that leaves a mechanism without budget: refused before any reservation
        ({"counts_share": 0.0, "selection_share": 1.0}, "budget.counts must be > 0"),
        ({"gamma": 0.0}, r"counts.gamma must be > 0 when \[\[cohorts\]\]"),
        ({"alpha": 0.0}, r"counts.alpha must be > 0 when \[\[rates\]\]"),
    ],
)
def test_bad_configs(tmp_path, keys, demo_schema, change, needle):
    base = demo_config(tmp_path, keys[0])
    with pytest.raises(UserError, match=needle):  # on construction, or against the schema
        with_settings(base, **change).check(demo_schema)


def test_disjoint_cohorts_pass(tmp_path, keys, demo_schema):
    cfg = with_settings(demo_config(tmp_path, keys[0]),
                        cohorts=(CohortSpec("a", {"age": (0, 29)}),
                                 CohortSpec("b", {"age": (30, 40)}),
                                 CohortSpec("c", {"age": (0, 29), "sex": ("male",)})))
    with pytest.raises(UserError, match="'a' and 'c' overlap"):
        cfg.check(demo_schema)
    cfg = with_settings(cfg, cohorts=cfg.counts.cohorts[:2])
    cfg.check(demo_schema)


def test_bad_toml(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('data = "x.csv"\nschema = "s.json"\n[budget]\nepsilom = 2\n')
    with pytest.raises(UserError, match=r"unknown setting .budget\.epsilom."):
        load_config(p, {})
    p.write_text("data = \n")
    with pytest.raises(UserError, match="not valid TOML"):
        load_config(p, {})


def test_artifact_json_is_canonical(tmp_path, keys):
    priv, _, _ = keys
    cfg = demo_config(tmp_path, priv, cohorts=(), rates=())
    path = run_release(cfg).path
    raw = path.read_bytes()
    assert raw == (json.dumps(json.loads(raw), sort_keys=True, ensure_ascii=False,
                              separators=(",", ":")) + "\n").encode()


@pytest.mark.parametrize("name", ["release.toml", "release_selection.toml"])
def test_example_configs_pass_checks(tmp_path, keys, demo_schema, name):
    """Every example config a steward may copy loads and passes the release's checks; the
    commented settings of the selection example are real settings, too."""
    example = ROOT / "examples" / name
    cfg = load_config(example, {"release_key": keys[0], "lifetime_ledger": tmp_path / "l"})
    cfg.check(demo_schema)
    assert (ROOT / cfg.data).exists() and (ROOT / cfg.schema).exists()
    assert cfg.budget.counts_share + cfg.budget.selection_share == pytest.approx(1.0)
    commented = [line[2:] for line in example.read_text().splitlines()
                 if re.match(r"^# [a-z_]+ = ", line)]
    assert len(commented) >= (8 if name == "release_selection.toml" else 1)
    p = tmp_path / "uncommented.toml"
    for line in commented:  # each commented setting alone, under its own section
        key = line.split(" = ")[0]
        section = ("budget" if key in ("delta", "lifetime_delta", "lifetime_epsilon") else
                   "counts" if key in {f.name for f in fields(CountsConfig)} else "selection")
        owner = mode_setting_owner(line.split(" = ")[0])
        p.write_text(example.read_text() + f"\n[selection.{owner}]\n{line}\n" if owner else
                     example.read_text().replace(f"[{section}]\n", f"[{section}]\n{line}\n"))
        # delta is checked on construction against the mode: it applies where its comment
        # says, to a Gaussian mode
        gaussian = {"selection_mode": "pe-histogram"} if line.startswith("delta") else {}
        load_config(p, {"release_key": keys[0], **gaussian})


def _no_id_schema(demo_schema):
    from selpe_audit.schema import parse_schema

    raw = json.loads(json.dumps(demo_schema.raw))
    raw.pop("x-id")
    return parse_schema(raw)


def test_the_default_unit_is_the_person_when_the_schema_names_one(tmp_path, keys,
                                                                   demo_schema):
    """No unit in the TOML or on the command line: the schema's x-id makes it the person (a
    row unit would protect a person with m rows only at m times epsilon); "row" stays a
    choice, and a schema without x-id keeps the row."""
    from release.stages.document import privacy_unit
    from release.stages.prepare import person_field

    base = {"data": DEMO_SAMPLE, "schema": demo_schema_path(), "release_key": keys[0],
            "out": tmp_path / "out", "lifetime_ledger": tmp_path / "ledger",
            "counts_mode": "marginals", "counts_share": 1.0, "selection_share": 0.0}
    cfg = load_config(None, base).check(demo_schema)
    assert cfg.privacy_unit.resolved(demo_schema).unit == "person"
    assert person_field(cfg, demo_schema) == "patient_id"
    block = privacy_unit(cfg, demo_schema, False)
    assert block.unit == "person" and block.id_field == "patient_id"
    assert block.max_contributions == 1
    row = load_config(None, {**base, "unit": "row"}).check(demo_schema)
    assert privacy_unit(row, demo_schema, False).unit == "row"
    assert person_field(row, demo_schema) is None
    plain = _no_id_schema(demo_schema)
    assert privacy_unit(cfg, plain, False).unit == "row"
    named = load_config(None, {**base, "id_field": "patient_id", "max_contributions": 2})
    assert privacy_unit(named.check(plain), plain, False).unit == "person"
    with pytest.raises(UserError, match="max_contributions applies to unit = 'person'"):
        load_config(None, {**base, "max_contributions": 2}).check(plain)
    # the signed artifact says so: a default release of the demo schema is person-level
    doc = run_release(cfg).doc
    assert doc["privacy_unit"]["unit"] == "person"
    assert "any one person" in doc["privacy_unit"]["protects"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["marginals", "fixed"])
def test_opendp_reads_the_rows_from_a_private_spool_deleted_after_the_release(
        tmp_path, keys, monkeypatch, mode):
    """The counts' Contexts scan a temporary file (`make_spooled_context`): it lies in a
    folder only this user can open while the counts run, and nothing is left afterwards,
    also when the release fails after the counts."""
    import gc
    import stat

    import release.dp.spools as om
    import release.stages.sign as sign

    spool_root = tmp_path / "tmp"
    spool_root.mkdir()
    monkeypatch.setenv("SELPE_AUDIT_SPOOL", str(spool_root))
    seen: list[tuple[Path, int, int]] = []
    made = om.make_spooled_context

    def watched(priv_data, **compositor):
        ctx = made(priv_data, **compositor)
        (folder,) = spool_root.iterdir()
        seen.append((folder, stat.S_IMODE(folder.stat().st_mode),
                     pl.read_ipc(folder / "rows.arrow").height))
        return ctx

    monkeypatch.setattr(om, "make_spooled_context", watched)
    monkeypatch.setattr(sign, "write_release", _boom)
    priv, _, _ = keys
    cfg = demo_config(tmp_path, priv, counts_mode=mode)
    with pytest.raises(RuntimeError, match="boom"):
        run_release(cfg)
    gc.collect()
    assert seen and all(m == 0o700 and n > 0 for _, m, n in seen)
    assert list(spool_root.iterdir()) == []


def _boom(*_args, **_kwargs):
    raise RuntimeError("boom")
