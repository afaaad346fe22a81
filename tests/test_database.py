"""The release's PostgreSQL source, against a real server (tests/postgres.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from release.database import DatabaseSource, is_database_url, read_frame
from release.private_data import read_private_rows
from selpe_audit.artifact.records import json_form
from selpe_audit.errors import UserError
from tests.conftest import DEMO_SAMPLE, good_row
from tests.postgres import READER_PW, load_rows, server


@pytest.fixture(scope="module")
def pg(demo_schema):
    rows = read_private_rows(DEMO_SAMPLE, demo_schema).priv_rows
    with server() as srv:
        load_rows(srv, "triage", rows)
        yield srv


@pytest.fixture
def reader_pw(monkeypatch):
    monkeypatch.setenv("PGPASSWORD", READER_PW)


def test_urls_are_recognised_and_passwords_refused():
    assert is_database_url("postgresql://u@h/db") and is_database_url("postgres://h/db")
    assert not is_database_url("rows.csv") and not is_database_url("/data/rows.parquet")
    with pytest.raises(UserError, match="PGPASSWORD"):
        DatabaseSource("postgresql://u:secret@h/db", table="t")
    with pytest.raises(UserError, match="exactly one"):
        DatabaseSource("postgresql://u@h/db")
    with pytest.raises(UserError, match="--table"):
        DatabaseSource("postgresql://u@h/db", table="t; drop table t")


@pytest.mark.parametrize("url", [
    "postgresql://reader@db/ehr?password=hunter2",
    "postgresql://reader@db/ehr?sslmode=require&password=hunter2",
    "postgres://reader@db/ehr?PASSWORD=hunter2",
    "postgresql://reader@db/ehr?pass%77ord=hunter2",  # percent-encoded key
    "postgresql://reader@db/ehr?password=",
])
def test_a_password_in_the_query_string_is_refused_like_one_in_the_userinfo(url):
    with pytest.raises(UserError) as userinfo:
        DatabaseSource("postgresql://reader:hunter2@db/ehr", table="t")
    with pytest.raises(UserError) as query:
        DatabaseSource(url, table="t")
    assert str(query.value) == str(userinfo.value)
    assert "\n" not in str(query.value) and "hunter2" not in str(query.value)
    # a password file is still the way to give it
    DatabaseSource("postgresql://reader@db/ehr?passfile=/enclave/pgpass&sslmode=require",
                   table="t")


def test_public_description_names_no_location():
    src = DatabaseSource("postgresql://reader@db.hospital.example:5432/ehr",
                         query="SELECT * FROM triage WHERE ward = 'ED'")
    desc = json_form(src.public_description(bytes(range(32))))
    assert set(desc) == {"kind", "query_hmac_sha256"}
    assert desc["kind"] == "postgresql" and len(desc["query_hmac_sha256"]) == 64
    text = str(desc)
    for leak in ("hospital", "reader", "ehr", "5432", "triage", "ward"):
        assert leak not in text


def test_the_query_is_keyed_not_hashed():
    """An unkeyed SHA-256 of a short query is undone by hashing guesses (ward = 'oncology')."""
    import hashlib

    src = DatabaseSource("postgresql://reader@db/ehr",
                         query="SELECT * FROM triage WHERE ward = 'oncology';")
    key = bytes(range(32))
    mac = src.public_description(key).query_hmac_sha256
    for guess in (src.sql, src.query):
        assert mac != hashlib.sha256(str(guess).encode()).hexdigest()
    assert mac == src.public_description(key).query_hmac_sha256  # the enclave recomputes it
    assert mac != src.public_description(bytes(32)).query_hmac_sha256  # under its own key
    with pytest.raises(ValueError):
        src.public_description(b"")


@pytest.mark.postgres
def test_rows_from_the_database_equal_the_csv(pg, demo_schema, reader_pw):
    from_csv = read_private_rows(DEMO_SAMPLE, demo_schema).priv_rows
    from_db = read_private_rows(DatabaseSource(pg.url(), table="public.triage"),
                                demo_schema).priv_rows
    assert from_db == from_csv


@pytest.mark.postgres
def test_the_query_runs_read_only_in_repeatable_read(pg, reader_pw):
    frame = read_frame(DatabaseSource(pg.url(), query=(
        "SELECT current_setting('transaction_isolation') AS iso, "
        "current_setting('transaction_read_only') AS ro")))
    assert frame.row(0) == ("repeatable read", "on")


@pytest.mark.parametrize(("url_user", "password", "query", "message"), [
    ("reader", "wrong", "SELECT * FROM triage", "authentication failed"),
    ("reader", READER_PW, "SELECT * FROM no_such_table", "table that does not exist"),
    ("reader", READER_PW, "SELECT nope FROM triage", "column that does not exist"),
    ("reader", READER_PW, "SELEKT 1", "syntax error"),
    ("reader", READER_PW, "SELECT 'CANARY-7f3'::int AS age", "could not convert"),
    ("reader", READER_PW, "SELECT age FROM triage", "missing column 'patient_id'"),
    ("reader", READER_PW, "SELECT * FROM triage WHERE false", "no rows"),
    ("reader", READER_PW, "SELECT *, now() AS x FROM triage", None),
])
@pytest.mark.postgres
def test_errors_are_one_line_and_quote_no_value(pg, demo_schema, monkeypatch, url_user,
                                                password, query, message):
    monkeypatch.setenv("PGPASSWORD", password)
    src = DatabaseSource(pg.url(url_user), query=query)
    if message is None:  # extra columns of other types are ignored, as in files
        assert read_private_rows(src, demo_schema).priv_rows
        return
    with pytest.raises(UserError) as e:
        read_private_rows(src, demo_schema)
    text = str(e.value)
    assert message in text and "\n" not in text and "CANARY" not in text, text


@pytest.mark.postgres
def test_a_column_type_the_schema_cannot_take(pg, demo_schema, reader_pw):
    query = "SELECT * FROM triage"
    cols = ", ".join(f"{k}" if k != "chief_complaint" else "now() AS chief_complaint"
                     for k in good_row())
    with pytest.raises(UserError, match="column 'chief_complaint' has type"):
        read_private_rows(DatabaseSource(pg.url(), query=query.replace("*", cols)),
                          demo_schema)


def test_cannot_connect(demo_schema, reader_pw):
    from tests.postgres import free_port

    src = DatabaseSource(f"postgresql://reader@127.0.0.1:{free_port()}/postgres",
                         table="triage")
    with pytest.raises(UserError, match="cannot connect"):
        read_private_rows(src, demo_schema)


# ----- the release command, end to end, from the database -----------------------------------

CANARY_ID = "PGCNRY77"
CANARY_TEXT = "canary ocelot-narwhal-4417 complaint"
EXE = str(__import__("pathlib").Path(__import__("sys").executable).with_name("selpe-audit"))
EXAMPLE = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples" / "release.toml"


@pytest.fixture(scope="module")
def release_key(tmp_path_factory):
    from selpe_audit.artifact.signing import generate_keypair

    priv, pub, _ = generate_keypair(tmp_path_factory.mktemp("keys") / "release.pem")
    return priv, pub


def _release(tmp_path, key, *data_args, password=READER_PW, ledger=None):
    import os
    import subprocess

    out = tmp_path / "out"
    env = dict(os.environ, PGPASSWORD=password)
    r = subprocess.run([EXE, "release", "--config", str(EXAMPLE), *data_args,
                        "--key", str(key), "--out", str(out),
                        "--lifetime-ledger", str(ledger or tmp_path / "ledger")],
                       env=env, capture_output=True, text=True, timeout=600)
    return r, out


def _shape(x):
    """The structure of a document: keys and list lengths, no values."""
    if isinstance(x, dict):
        return {k: _shape(v) for k, v in x.items() if k not in ("created", "source")}
    if isinstance(x, list):
        return [len(x), *(_shape(v) for v in x[:1])] if x and isinstance(x[0], (dict, list)) \
            else len(x)
    return type(x).__name__


@pytest.mark.slow
@pytest.mark.postgres
def test_release_from_the_database_has_the_shape_of_the_csv_release(pg, release_key,
                                                                    tmp_path, demo_schema):
    import hashlib
    import json

    rows = read_private_rows(DEMO_SAMPLE, demo_schema).priv_rows
    rows[7] = {**rows[7], "patient_id": CANARY_ID, "chief_complaint": CANARY_TEXT}
    load_rows(pg, "triage_canary", rows)
    priv, _ = release_key
    r_db, out_db = _release(tmp_path / "db", priv, "--data", pg.url(), "--table",
                            "public.triage_canary")
    assert r_db.returncode == 0, r_db.stderr
    r_csv, out_csv = _release(tmp_path / "csv", priv, "--data", str(DEMO_SAMPLE))
    assert r_csv.returncode == 0, r_csv.stderr
    doc_db = json.loads((out_db / "release.json").read_text())
    doc_csv = json.loads((out_csv / "release.json").read_text())
    assert _shape(doc_db) == _shape(doc_csv)
    assert doc_db["source"]["kind"] == "postgresql" and len(doc_db["source"]) == 2
    # keyed with the ledger folder's secret, which stays in the enclave
    from release.ledger_store import open_store

    src = DatabaseSource(pg.url(), table="public.triage_canary")
    key = open_store(tmp_path / "db" / "ledger").key()
    assert doc_db["source"] == json_form(src.public_description(key))
    assert doc_db["source"]["query_hmac_sha256"] != hashlib.sha256(src.sql.encode()).hexdigest()
    assert doc_csv["source"] == {"kind": "file", "format": "csv"}
    # nothing about the location, and no private value, in any output
    blobs = [r_db.stdout, r_db.stderr]
    blobs += [p.read_bytes().decode("utf-8", "replace")
              for p in out_db.rglob("*") if p.is_file()]
    blobs += [p.read_text() for p in (tmp_path / "db" / "ledger").glob("*") if p.is_file()]
    for blob in blobs:
        for secret in (CANARY_ID, "ocelot-narwhal", READER_PW):
            assert secret not in blob
    artifact = (out_db / "release.json").read_text()
    for location in (str(pg.port), "127.0.0.1", "reader", "triage_canary\"\"", "SELECT"):
        assert location not in artifact


@pytest.mark.slow
@pytest.mark.parametrize(("args", "password", "message"), [
    (["--table", "triage"], "wrong-pw", "authentication failed"),
    (["--query", "SELECT nope FROM triage", "--dataset", "t"], READER_PW, "does not exist"),
    (["--query", "SELECT age FROM triage", "--dataset", "t"], READER_PW, "missing column"),
    (["--query", "SELECT * FROM triage WHERE false", "--dataset", "t"], READER_PW, "no rows"),
])
@pytest.mark.postgres
def test_release_errors_are_one_line_and_charge_nothing(pg, release_key, tmp_path, args,
                                                        password, message):
    priv, _ = release_key
    r, out = _release(tmp_path, priv, "--data", pg.url(), *args, password=password)
    assert r.returncode != 0
    err = [line for line in r.stderr.splitlines() if "error" in line]
    assert len(err) == 1 and message in err[0], r.stderr
    assert "Traceback" not in r.stderr and not (out / "release.json").exists()
    for rel in _ledger_releases(tmp_path / "ledger"):
        assert rel["status"] == "aborted", rel


def _ledger_releases(folder: Path) -> list[dict]:
    """Every release the ledger folder records (none where it was never made)."""
    from release.ledger import LifetimeLedger, datasets
    from release.ledger_store import open_store

    if not folder.exists():
        return []
    return [rel for ds in datasets(open_store(folder))
            for rel in LifetimeLedger(folder, ds).summary()["releases"]]


def test_a_password_on_the_command_line_is_refused(release_key, tmp_path):
    priv, _ = release_key
    r, _ = _release(tmp_path, priv, "--data", "postgresql://reader:hunter2@127.0.0.1/db",
                    "--table", "t")
    assert r.returncode != 0 and "PGPASSWORD" in r.stderr and "hunter2" not in r.stderr
    assert _ledger_releases(tmp_path / "ledger") == []
