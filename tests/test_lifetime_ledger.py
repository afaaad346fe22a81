"""Issue 18, items 2, 3 and 5, and issue 32 item 2: a lifetime budget no flag can raise or
escape (an installation maximum, signed raises), guarantees worded by the privacy unit,
and the small exactness fixes (zero shares refused before any reservation, the person id
as OpenDP's identifier, the enclave-only log). The ledger's people, its stores and what a
steward might try against them: tests/test_person_ledger.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from release.config_file import load_config
from release.counts.keys import derive_frame
from release.dp.unit import UNIT_COL
from release.installation import INSTALLATION_ENV, Installation, load_installation
from release.ledger import (
    FIXED_ENV,
    LEDGER_ENV,
    LifetimeLedger,
    default_ledger_folder,
    ledger_folder,
)
from release.ledger_store import FolderStore
from release.pipeline import run_release
from selpe_audit.artifact.guarantees import derived_guarantees
from selpe_audit.artifact.signing import generate_keypair, key_id, load_private_key
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


# ----- item 2: the cap is the ledger's, raised only by a signed `ledger raise` --------------

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own the installation "
                               "file (CI runs as root)")


def _installation(tmp: Path, max_epsilon: float = 20.0) -> tuple[Path, Path]:
    """A root-owned installation file (max epsilon ``max_epsilon``) trusting one raise key;
    returns (the file, the raise key's private PEM)."""
    folder = tmp / "etc"
    folder.mkdir(mode=0o755)
    raise_key, raise_pub, _ = generate_keypair(folder / "raise.pem")
    conf = folder / "installation.toml"
    conf.write_text(f"[installation]\n[lifetime]\nmax_epsilon = {max_epsilon}\n"
                    "max_delta = 1e-4\n\n"
                    f'[raise]\ntrusted_keys = ["{raise_pub}"]\n')
    return conf, raise_key


@pytest.mark.slow
@ROOT_ONLY
def test_a_flag_cannot_raise_the_cap_only_a_signed_ledger_raise_can(tmp_path, keys,
                                                                    monkeypatch):
    """6 of 10 spent: --lifetime-epsilon 1000 is refused before any row is read; the caps
    stay; `ledger raise` needs --yes off a terminal and a raise key the installation trusts
    (the release key is refused), never passes the installation's maximum, and records the
    key id and its signature over the raise."""
    conf, raise_key = _installation(tmp_path)
    monkeypatch.setenv(INSTALLATION_ENV, str(conf))
    ledger = LifetimeLedger(tmp_path / "ledger", "ed_triage_demo", 10.0)
    ledger.reserve(6.0)  # a reservation counts from the start
    r = _cli(*_release_args(tmp_path, keys[0], "--epsilon", "6", "--lifetime-epsilon", "1000"))
    assert r.returncode != 0
    assert "cannot raise it" in r.stderr and "ledger raise" in r.stderr
    assert "no data was read" in r.stderr
    assert ledger.spent() == (6.0, 0.0) and ledger.caps()[0] == 10.0
    r = _cli(*_release_args(tmp_path, keys[0], "--epsilon", "6"))  # the ledger's own cap
    assert r.returncode != 0 and "would be exceeded" in r.stderr
    raise_args = ["ledger", "raise", "--dataset", "ed_triage_demo", "--reason", "board 42",
                  "--ledger", str(tmp_path / "ledger")]
    r = _cli(*raise_args, "--epsilon", "20", "--key", str(raise_key))
    assert r.returncode != 0 and "--yes" in r.stderr  # not a terminal: no silent raise
    for key, epsilon, needle in ((keys[0], "20", "not trusted for raises"),
                                 (raise_key, "30", "exceed this installation's maximum")):
        r = _cli(*raise_args, "--epsilon", epsilon, "--key", str(key), "--yes")
        assert r.returncode != 0 and needle in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    r = _cli(*raise_args, "--epsilon", "20", "--key", str(raise_key), "--yes")
    assert r.returncode == 0, r.stderr
    doc = ledger.summary()
    assert doc["lifetime_epsilon"] == 20.0
    (raised,) = doc["raises"]
    public = load_private_key(raise_key).public_key()
    assert raised["by"] == key_id(public) and raised["reason"] == "board 42"
    assert raised["lifetime_epsilon"] == {"from": 10.0, "to": 20.0} and raised["when"]
    signed = {k: v for k, v in raised.items() if k != "signature"}
    public.verify(bytes.fromhex(raised["signature"]),
                  json.dumps(signed, sort_keys=True, separators=(",", ":")).encode())
    r = _cli(*_release_args(tmp_path, keys[0], "--epsilon", "6"))
    assert r.returncode == 0, r.stderr
    r = _cli("ledger", "show", "--ledger", str(tmp_path / "ledger"))
    assert r.returncode == 0 and "ed_triage_demo" in r.stdout and "20" in r.stdout
    r = _cli("ledger", "show", "--dataset", "ed_triage_demo", "--ledger", str(tmp_path / "ledger"))
    assert r.returncode == 0 and "board 42" in r.stdout and "released" in r.stdout


@ROOT_ONLY
def test_raise_refuses_lowering_unknown_datasets_and_untrusted_keys(tmp_path, keys):
    conf, raise_key = _installation(tmp_path)
    inst = load_installation(conf)
    ledger = LifetimeLedger(tmp_path, "ds", 5.0, installation=inst)
    with pytest.raises(UserError, match="no lifetime ledger for dataset 'ds'"):
        ledger.raise_caps(raise_key, "why", epsilon=6.0)
    ledger.reserve(1.0)
    with pytest.raises(UserError, match="at least the current ones"):
        ledger.raise_caps(raise_key, "why", epsilon=4.0)
    with pytest.raises(UserError, match="--reason"):
        ledger.raise_caps(raise_key, " ", epsilon=6.0)
    with pytest.raises(UserError, match="not trusted for raises"):
        ledger.raise_caps(keys[0], "why", epsilon=6.0)
    with pytest.raises(UserError, match="not trusted for raises"):  # no installation file
        LifetimeLedger(tmp_path, "ds", installation=Installation()).raise_caps(
            raise_key, "why", epsilon=6.0)
    ledger.raise_caps(raise_key, "why", epsilon=6.0)
    assert LifetimeLedger(tmp_path, "ds", installation=inst).caps() == (6.0, 1e-4)
    # a release's setting may lower its own cap, never the stored one
    assert LifetimeLedger(tmp_path, "ds", 2.0, installation=inst).caps() == (6.0, 1e-4)
    with pytest.raises(UserError, match=r"> 2, lowered from 6 by this release's"):
        LifetimeLedger(tmp_path, "ds", 2.0, installation=inst).reserve(1.5)


@ROOT_ONLY
def test_installation_maximum_is_a_ceiling_no_release_or_ledger_passes(tmp_path, monkeypatch):
    """A new ledger takes the installation's maximum, a flag above it is refused, and a
    stored cap above a later (lowered) maximum is cut to it; without the file the built-in
    defaults are the maximum."""
    conf, _ = _installation(tmp_path, max_epsilon=4.0)
    inst = load_installation(conf)
    assert (inst.max_epsilon, inst.max_delta, inst.source) == (4.0, 1e-4, str(conf))
    with pytest.raises(UserError, match=r"lifetime_epsilon 5 exceeds this installation's "
                                        r"maximum .*installation.toml\), 4"):
        LifetimeLedger(tmp_path / "l", "a", 5.0, installation=inst).reserve(1.0)
    assert LifetimeLedger(tmp_path / "l", "a", installation=inst).caps() == (4.0, 1e-4)
    LifetimeLedger(tmp_path / "l", "b", installation=Installation()).reserve(1.0)  # caps 10
    assert LifetimeLedger(tmp_path / "l", "b", installation=inst).caps() == (4.0, 1e-5)
    monkeypatch.delenv(INSTALLATION_ENV, raising=False)
    monkeypatch.setattr("release.installation.SYSTEM_INSTALLATION", tmp_path / "none.toml")
    assert load_installation() == Installation() and Installation().max_epsilon == 10.0
    monkeypatch.setenv(INSTALLATION_ENV, str(tmp_path / "missing.toml"))
    with pytest.raises(UserError, match="installation file not found"):
        load_installation()


def test_installation_file_anyone_but_root_could_write_is_refused(tmp_path):
    folder = tmp_path / "etc"
    folder.mkdir()
    conf = folder / "installation.toml"
    conf.write_text("[installation]\n[lifetime]\nmax_epsilon = 1000.0\n")
    conf.chmod(0o666)
    with pytest.raises(UserError, match="must be owned by root and writable by no one else"):
        load_installation(conf)
    conf.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(conf, 1000, 1000)
        with pytest.raises(UserError, match="must be owned by root"):
            load_installation(conf)
        os.chown(conf, 0, 0)
        conf.write_text("[installation]\n[lifetime]\nmax_epsilon = -1\n")
        with pytest.raises(UserError, match=r"max_epsilon = -1 is out of range"):
            load_installation(conf)


def test_artifact_names_the_ledger_and_reservation_not_the_path(tmp_path, keys):
    cfg = _cfg(tmp_path, keys[0])
    doc = run_release(cfg).doc
    life = doc["budget"]["lifetime_ledger"]
    assert life["ledger_id"] == FolderStore(tmp_path / "ledger").ledger_id()
    assert life["dataset"] == cfg.dataset
    entry = LifetimeLedger(tmp_path / "ledger", cfg.dataset).summary()
    assert [r["status"] for r in entry["releases"] if r["id"] == life["reservation_id"]] == [
        "released"]
    assert (life["lifetime_epsilon"], life["committed_epsilon"]) == (10.0, 2.0)
    raw = (cfg.out / "release.json").read_text()
    assert str(tmp_path) not in raw and "events.json" not in raw


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
    assert row.protects == "any one row"
    assert any("m times epsilon" in s for s in row.statements)
    assert not any("person's records" in s for s in row.statements)
    person = derived_guarantees(1.0, 0.0, {"unit": "person", "max_contributions": 3})
    assert person.protects == "any one person, up to 3 rows each in the counts"
    assert not any("m times epsilon" in s for s in person.statements)


@pytest.mark.slow
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
    assert not (tmp_path / "ledger" / "events.json").exists()


def test_opendp_identifier_is_the_person_id(keys, tmp_path, demo_schema):
    cfg = _cfg(tmp_path, keys[0])
    priv = pl.read_csv(DEMO_SAMPLE).to_dicts()[:20]
    rows = [{f.name: r[f.name] for f in demo_schema.fields} for r in priv]
    rows[1]["patient_id"] = rows[0]["patient_id"]  # one person with two rows
    frame = derive_frame(rows, demo_schema, cfg.counts, "patient_id").collect()
    assert frame[UNIT_COL].dtype == pl.UInt32
    # a code per person, injective both ways: OpenDP's units are exactly the people
    pairs = set(zip(frame[UNIT_COL].to_list(), [r["patient_id"] for r in rows], strict=True))
    assert len(pairs) == len({c for c, _ in pairs}) == len({p for _, p in pairs})
    assert frame[UNIT_COL][0] == frame[UNIT_COL][1]
    assert len(pairs) == len(rows) - 1


def test_invalid_rows_and_timings_go_to_the_enclave_log_only(tmp_path, keys, capfd):
    rows = pl.read_csv(DEMO_SAMPLE, infer_schema=False).to_dicts()
    rows[3]["age"] = "-7"
    data = tmp_path / "bad.csv"
    pl.DataFrame(rows).write_csv(data)
    cfg = _cfg(tmp_path, keys[0], data=data, invalid_rows="drop")
    run_release(cfg)
    _, err = capfd.readouterr()
    assert "row 4" not in err and "dropped" not in err and not re.search(r"\d\.\d+ s\b", err)
    log = tmp_path / "enclave.log"
    assert cfg.enclave_log == log.absolute() and log.exists()
    assert (log.stat().st_mode & 0o777) == 0o600
    text = log.read_text()
    assert "row 4, field 'age'" in text and "dropped 1 invalid row" in text
    assert re.search(r"\d+\.\d+ s", text)
    for f in cfg.out.rglob("*"):
        if f.is_file():
            body = f.read_bytes()
            assert b"row 4," not in body and b"invalid row" not in body
    assert not list(cfg.out.rglob("*.log"))
    with pytest.raises(UserError, match="must not be inside the artifact folder"):
        with_settings(cfg, enclave_log=cfg.out / "enclave.log")
