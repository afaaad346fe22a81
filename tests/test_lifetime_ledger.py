"""Issue 18, items 2, 3 and 5: a lifetime budget no flag can raise or escape, guarantees
worded by the privacy unit, and the small exactness fixes (zero shares refused before any
reservation, the person id as OpenDP's identifier, the enclave-only log)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from release.config import load_config
from release.counts import UNIT_COL, derive_frame
from release.ledger import (
    FIXED_ENV,
    LEDGER_ENV,
    LedgerFolder,
    LifetimeLedger,
    default_ledger_folder,
    ledger_folder,
)
from release.pipeline import run_release
from selpe_audit.artifact.guarantees import derived_guarantees
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.errors import UserError
from selpe_audit.schema import demo_schema_path
from tests.conftest import DEMO_SAMPLE, ROOT, with_settings

EXE = str(Path(sys.executable).with_name("selpe-audit"))


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return generate_keypair(tmp_path_factory.mktemp("keys") / "release.pem")


def _cfg(tmp: Path, key: Path, **kw):
    """The example (counts only, person unit, k = 2) on the demo sample."""
    base = load_config(ROOT / "examples" / "release.toml", {
        "release_key": key, "out": tmp / "out", "schema": demo_schema_path(),
        "lifetime_ledger": tmp / "ledger", "data": DEMO_SAMPLE})
    return with_settings(base, **kw) if kw else base


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "COLUMNS": "200"})


def _release_args(tmp: Path, key: Path, *extra: str) -> list[str]:
    return ["release", "--config", str(ROOT / "examples" / "release.toml"), "--key", str(key),
            "--data", str(DEMO_SAMPLE), "--schema", str(demo_schema_path()),
            "--out", str(tmp / "out"), "--lifetime-ledger", str(tmp / "ledger"), *extra]


# ----- item 2: the cap is the ledger's, raised only by `ledger raise` -----------------------

def test_a_flag_cannot_raise_the_cap_only_ledger_raise_can(tmp_path, keys):
    """6 of 10 spent: --lifetime-epsilon 1000 is refused before any row is read; the caps
    stay; `ledger raise` (with --yes) raises them and records who, when and why."""
    ledger = LifetimeLedger(tmp_path / "ledger", "ed_triage_demo", 10.0)
    ledger.finish(ledger.reserve(6.0), "released")
    r = _cli(*_release_args(tmp_path, keys[0], "--epsilon", "6", "--lifetime-epsilon", "1000"))
    assert r.returncode != 0
    assert "cannot raise it" in r.stderr and "ledger raise" in r.stderr
    assert "no data was read" in r.stderr
    assert ledger.spent() == (6.0, 0.0) and ledger.caps()[0] == 10.0
    r = _cli(*_release_args(tmp_path, keys[0], "--epsilon", "6"))  # the ledger's own cap
    assert r.returncode != 0 and "would be exceeded" in r.stderr
    r = _cli("ledger", "raise", "--dataset", "ed_triage_demo", "--epsilon", "20",
             "--by", "A. Steward", "--reason", "board decision 42",
             "--ledger", str(tmp_path / "ledger"))
    assert r.returncode != 0 and "--yes" in r.stderr  # not a terminal: no silent raise
    r = _cli("ledger", "raise", "--dataset", "ed_triage_demo", "--epsilon", "20", "--yes",
             "--by", "A. Steward", "--reason", "board decision 42",
             "--ledger", str(tmp_path / "ledger"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(ledger.path.read_text())
    assert doc["lifetime_epsilon"] == 20.0
    (raised,) = doc["raises"]
    assert raised["by"] == "A. Steward" and raised["reason"] == "board decision 42"
    assert raised["lifetime_epsilon"] == {"from": 10.0, "to": 20.0} and raised["when"]
    r = _cli(*_release_args(tmp_path, keys[0], "--epsilon", "6"))
    assert r.returncode == 0, r.stderr
    r = _cli("ledger", "show", "--ledger", str(tmp_path / "ledger"))
    assert r.returncode == 0 and "ed_triage_demo" in r.stdout and "20" in r.stdout
    r = _cli("ledger", "show", "--dataset", "ed_triage_demo", "--ledger", str(tmp_path / "ledger"))
    assert r.returncode == 0 and "board decision 42" in r.stdout and "released" in r.stdout


def test_raise_refuses_lowering_and_unknown_datasets(tmp_path):
    ledger = LifetimeLedger(tmp_path, "ds", 5.0)
    with pytest.raises(UserError, match="no lifetime ledger for dataset 'ds'"):
        ledger.raise_caps("me", "why", epsilon=6.0)
    ledger.reserve(1.0)
    with pytest.raises(UserError, match="at least the current ones"):
        ledger.raise_caps("me", "why", epsilon=4.0)
    with pytest.raises(UserError, match="--by and --reason"):
        ledger.raise_caps("me", " ", epsilon=6.0)
    ledger.raise_caps("me", "why", epsilon=6.0)
    assert LifetimeLedger(tmp_path, "ds").caps() == (6.0, 1e-5)
    # a release's setting may lower its own cap, never the stored one
    assert LifetimeLedger(tmp_path, "ds", 2.0).caps() == (6.0, 1e-5)
    with pytest.raises(UserError, match=r"> 2, lowered by this release's lifetime_epsilon"):
        LifetimeLedger(tmp_path, "ds", 2.0).reserve(1.5)


def test_renamed_copy_of_the_same_rows_is_refused_and_refunded(tmp_path, keys):
    """The same rows (shuffled, columns reordered, under another name) are the same dataset:
    refused after reading, before any mechanism; the new name's ledger is not created."""
    run_release(_cfg(tmp_path, keys[0], dataset="triage"))
    rows = pl.read_csv(DEMO_SAMPLE, infer_schema=False)
    copy = tmp_path / "renamed.csv"
    rows.sample(fraction=1.0, shuffle=True, seed=3).select(reversed(rows.columns)).write_csv(copy)
    cfg = _cfg(tmp_path, keys[0], dataset="renamed", data=copy, out=tmp_path / "out2")
    with pytest.raises(UserError) as e:
        run_release(cfg)
    msg = str(e.value)
    assert "\n" not in msg and "dataset 'triage'" in msg and "triage.ledger.json" in msg
    assert not (tmp_path / "ledger" / "renamed.ledger.json").exists()
    assert not (tmp_path / "out2" / "release.json").exists()
    assert LifetimeLedger(tmp_path / "ledger", "triage").spent()[0] == pytest.approx(2.0)
    # the fingerprint index holds keyed hashes only, never a value of the rows
    index = (tmp_path / "ledger" / LedgerFolder.INDEX_FILE).read_text()
    assert "P000" not in index and re.search(r'"[0-9a-f]{64}": "triage"', index)
    # other rows under a new name are a new dataset
    other = tmp_path / "other.csv"
    rows.head(rows.height - 1).write_csv(other)
    run_release(_cfg(tmp_path, keys[0], dataset="other", data=other, out=tmp_path / "out3"))


def test_artifact_names_the_ledger_and_reservation_not_the_path(tmp_path, keys):
    cfg = _cfg(tmp_path, keys[0])
    doc = run_release(cfg).doc
    life = doc["budget"]["lifetime_ledger"]
    assert life["ledger_id"] == LedgerFolder(tmp_path / "ledger").ledger_id()
    assert life["dataset"] == cfg.dataset
    entry = json.loads((tmp_path / "ledger" / f"{cfg.dataset}.ledger.json").read_text())
    assert [r["status"] for r in entry["releases"] if r["id"] == life["reservation_id"]] == [
        "released"]
    assert (life["lifetime_epsilon"], life["committed_epsilon"]) == (10.0, 2.0)
    raw = (cfg.out / "release.json").read_text()
    assert str(tmp_path) not in raw and "ledger.json" not in raw


def test_default_ledger_folder_is_absolute_and_fixed_in_the_image(tmp_path, monkeypatch):
    monkeypatch.delenv(LEDGER_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    first = default_ledger_folder()
    monkeypatch.chdir(ROOT)
    assert first.is_absolute() and default_ledger_folder() == first
    monkeypatch.setenv(LEDGER_ENV, "relative/ledger")
    with pytest.raises(UserError, match="absolute"):
        default_ledger_folder()
    fixed = tmp_path / "fixed"
    monkeypatch.setenv(LEDGER_ENV, str(fixed))
    assert ledger_folder(None) == fixed
    assert ledger_folder(tmp_path / "elsewhere") == tmp_path / "elsewhere"  # outside the image
    monkeypatch.setenv(FIXED_ENV, "1")
    assert ledger_folder(None) == fixed and ledger_folder(str(fixed)) == fixed
    with pytest.raises(UserError, match="fixes the lifetime ledger folder"):
        ledger_folder(tmp_path / "elsewhere")
    with pytest.raises(UserError, match="fixes the lifetime ledger folder"):
        load_config(ROOT / "examples" / "release.toml", {
            "release_key": "k.pem", "lifetime_ledger": tmp_path / "elsewhere"})
    env = {**os.environ, LEDGER_ENV: str(fixed), FIXED_ENV: "1"}
    r = subprocess.run([EXE, "ledger", "show", "--ledger", str(tmp_path / "elsewhere")],
                       capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "fixes the lifetime ledger folder" in r.stderr


def test_containerfile_fixes_the_ledger_folder():
    """The release image sets the folder and forbids another (a volume, owned by its user)."""
    text = (ROOT / "Containerfile").read_text()
    stage = text.split(" AS release\n", 1)[1].split("\nFROM ", 1)[0]
    env = " ".join(line for line in stage.replace("\\\n", " ").splitlines()
                   if line.startswith("ENV "))
    assert re.search(r"\bSELPE_AUDIT_LEDGER=/ledger\b", env)
    assert re.search(r"\bSELPE_AUDIT_LEDGER_FIXED=1\b", env)
    assert '"/ledger"' in stage  # a VOLUME: the ledger persists between releases


# ----- item 3: guarantees worded by unit --------------------------------------------------

def test_guarantee_statements_name_the_unit():
    row = derived_guarantees(1.0, 0.0, {"unit": "row"})
    assert row["protects"] == "any one row"
    assert any("m times epsilon" in s for s in row["statements"])
    assert not any("person's records" in s for s in row["statements"])
    person = derived_guarantees(1.0, 0.0, {"unit": "person", "max_contributions": 3})
    assert person["protects"] == "any one person, up to 3 rows each in the counts"
    assert not any("m times epsilon" in s for s in person["statements"])


def test_review_html_words_the_guarantee_by_unit(tmp_path, keys):
    person = run_release(_cfg(tmp_path / "p", keys[0], dataset="p")).doc
    assert person["privacy_unit"]["protects"] == "any one person, up to 2 rows each in the counts"
    assert "truncate_per_group" in person["privacy_unit"]["bounding"]["counts"]
    html = (tmp_path / "p" / "out" / "review.html").read_text()
    assert "any one person, up to 2 rows" in html and "m times epsilon" not in html
    row = run_release(_cfg(tmp_path / "r", keys[0], dataset="r", unit="row", id_field=None,
                           max_contributions=1)).doc
    assert row["privacy_unit"]["protects"] == "any one row"
    assert row["guarantees"]["protects"] == "any one row"
    html = (tmp_path / "r" / "out" / "review.html").read_text()
    assert "any one row" in html and "m times epsilon" in html and "person, up to" not in html
    r = _cli("review", str(tmp_path / "r" / "out"))
    assert "any one row" in r.stdout and "privacy unit" in r.stdout


# ----- item 5: exactness fixes ------------------------------------------------------------

@pytest.mark.parametrize(("flags", "needle"), [
    (["--counts-share", "0"], "budget.counts must be > 0"),
])
def test_zero_share_is_refused_before_the_ledger_reserves(tmp_path, keys, flags, needle):
    r = _cli(*_release_args(tmp_path, keys[0], *flags))
    assert r.returncode != 0 and needle in r.stderr and "Traceback" not in r.stderr
    assert not list((tmp_path / "ledger").glob("*.ledger.json"))


def test_opendp_identifier_is_the_person_id(keys, tmp_path, demo_schema):
    cfg = _cfg(tmp_path, keys[0])
    priv = pl.read_csv(DEMO_SAMPLE).to_dicts()[:20]
    rows = [{f.name: r[f.name] for f in demo_schema.fields} for r in priv]
    frame = derive_frame(rows, demo_schema, cfg, "patient_id").collect()
    assert frame[UNIT_COL].dtype == pl.String
    assert frame[UNIT_COL].to_list() == [str(r["patient_id"]) for r in rows]


def test_invalid_rows_and_timings_go_to_the_enclave_log_only(tmp_path, keys, capfd):
    rows = pl.read_csv(DEMO_SAMPLE, infer_schema=False).to_dicts()
    rows[3]["age"] = "-7"
    data = tmp_path / "bad.csv"
    pl.DataFrame(rows).write_csv(data)
    cfg = _cfg(tmp_path, keys[0], data=data, invalid_rows="drop")
    run_release(cfg)
    _, err = capfd.readouterr()
    assert "row 4" not in err and "dropped" not in err and not re.search(r"\d\.\d s\b", err)
    log = tmp_path / "enclave.log"
    assert cfg.enclave_log == log.absolute() and log.exists()
    assert (log.stat().st_mode & 0o777) == 0o600
    text = log.read_text()
    assert "row 4, field 'age'" in text and "dropped 1 invalid row" in text
    assert re.search(r"\d+\.\d s", text)
    for f in cfg.out.rglob("*"):
        if f.is_file():
            body = f.read_bytes()
            assert b"row 4," not in body and b"invalid row" not in body
    assert not list(cfg.out.rglob("*.log"))
    with pytest.raises(UserError, match="must not be inside the artifact folder"):
        with_settings(cfg, enclave_log=cfg.out / "enclave.log")
