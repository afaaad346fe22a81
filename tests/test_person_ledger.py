"""Issue 60: a lifetime budget per person, kept where the steward cannot rewrite it.

Every attempt the issue lists, each now refused with one line or held to the cap:
re-pseudonymised extracts, perturbed copies, one person spread over many extracts, a new
ledger folder or installation file, a rolled-back or hand-edited ledger, a spool left by a
killed release, an output folder that is a symlink; and the PostgreSQL ledger's
append-only role, tried as that role."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from release.config_file import load_config
from release.installation import INSTALLATION_ENV, Installation, load_installation
from release.ledger import LEDGER_ENV, LifetimeLedger, ledger_folder
from release.ledger_people import histories, person_keys, spends, with_release
from release.ledger_postgres import PostgresStore
from release.ledger_store import FolderStore
from release.pipeline import run_release
from release.private_data import polars_dtypes
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.demo.generator import generate_rows
from selpe_audit.errors import UserError
from selpe_audit.schema import demo_schema_path, load_schema, parse_schema
from tests.conftest import DEMO_SAMPLE, ROOT
from tests.postgres import ADMIN_PW, server

EXE = str(Path(sys.executable).with_name("selpe-audit"))
EXPERIMENTS = Installation.for_experiments("tests")
CAP = Installation(max_epsilon=10.0)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return generate_keypair(tmp_path_factory.mktemp("keys") / "release.pem")


@pytest.fixture(scope="module")
def schema():
    return load_schema(demo_schema_path())


def _frame(schema, rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema_overrides=polars_dtypes(schema), infer_schema_length=None)


def _sample() -> pl.DataFrame:
    return pl.read_csv(DEMO_SAMPLE, infer_schema=False)


def _release(tmp: Path, key: Path, data: Path, tag: str, epsilon: float,
             installation: Installation = CAP, **settings):
    cfg = load_config(None, {"data": data, "schema": demo_schema_path(), "release_key": key,
                             "out": tmp / f"out-{tag}", "lifetime_ledger": tmp / "ledger",
                             "dataset": tag, "epsilon": epsilon, **settings})
    return run_release(cfg, installation=installation)


# ----- item 1: budget by person, across extracts --------------------------------------------

@pytest.mark.slow
def test_perturbed_and_rekeyed_copies_are_the_same_people(tmp_path, keys):
    """After epsilon 6 of the cap 10 on the demo rows, the same rows re-keyed (a prefix on
    every id), with age + 1, with the complaint upper-cased or a trailing space or holding
    zero-width characters, or with temperature + 1e-9 would take every person past the cap:
    refused, one line, how many, never who; nothing spent."""
    rows = _sample()
    (tmp_path / "rows.csv").write_text(rows.write_csv())
    _release(tmp_path, keys[0], tmp_path / "rows.csv", "triage", 6.0)
    age = pl.col("age").cast(pl.Int64)
    variants = {
        "rekeyed": rows.with_columns(("Z" + pl.col("patient_id")).alias("patient_id")),
        "older": rows.with_columns(pl.min_horizontal(age + 1, 105).cast(pl.String)
                                   .alias("age")),
        "upper": rows.with_columns(pl.col("chief_complaint").str.to_uppercase() + " "),
        # issue 67: a zero-width space (and a word joiner) that shows nothing
        "invisible": rows.with_columns(pl.col("chief_complaint").str.replace(" ", "\u200b ")
                                       + "\u2060"),
        "warmer": rows.with_columns((pl.col("temperature_c").cast(pl.Float64) + 1e-9)
                                    .cast(pl.String)),
    }
    for tag, frame in variants.items():
        (tmp_path / f"{tag}.csv").write_text(frame.write_csv())
        with pytest.raises(UserError) as e:
            _release(tmp_path, keys[0], tmp_path / f"{tag}.csv", tag, 6.0)
        msg = str(e.value)
        assert "\n" not in msg and "would pass their lifetime epsilon 10" in msg, tag
        assert "no DP mechanism ran" in msg and "--leave-out-exhausted" in msg
        n = int(msg.split(" of the ")[0])
        # every person: age + 1 moves those at a bin's edge across it, one grid step
        assert n == rows["patient_id"].n_unique(), (tag, msg)
        assert not any(v in msg for v in rows["patient_id"].to_list()[:50])
        assert not (tmp_path / f"out-{tag}" / "release.json").exists()
    ledger = LifetimeLedger(tmp_path / "ledger", "rekeyed", installation=CAP)
    assert ledger.spent() == (0.0, 0.0)  # refused before any mechanism: given back


@pytest.mark.slow
def test_one_person_in_many_small_extracts_is_held_to_the_cap(tmp_path, keys, schema):
    """One patient's rows mixed into three extracts of 100 other people each: the third
    release at epsilon 4 would take that person to 12 > 10: refused (1 person); with
    --leave-out-exhausted (under an installation whose [identity] names the hospital's
    record number, here the id every extract keeps) it runs without them, and the artifact
    says the policy, never how many were left out (that would tell of exactly them)."""
    rows = _sample()
    ids = rows["patient_id"].unique(maintain_order=True).to_list()
    person = rows.filter(pl.col("patient_id") == ids[0])
    for k in range(3):
        others = rows.filter(pl.col("patient_id").is_in(ids[1 + 100 * k: 101 + 100 * k]))
        pl.concat([others, person]).write_csv(tmp_path / f"x{k}.csv")
    identity = replace(CAP, linkage=("patient_id",), linkage_required=True)
    _release(tmp_path, keys[0], tmp_path / "x0.csv", "cohort-0", 4.0, identity)
    _release(tmp_path, keys[0], tmp_path / "x1.csv", "cohort-1", 4.0, identity)
    with pytest.raises(UserError, match=r"^1 of the 101 people in these rows would pass"):
        _release(tmp_path, keys[0], tmp_path / "x2.csv", "cohort-2", 4.0, identity)
    with pytest.raises(UserError, match="from the people's linkage fields alone"):
        _release(tmp_path, keys[0], tmp_path / "x2.csv", "cohort-2b", 4.0,
                 leave_out_exhausted=True)  # no linkage fields: it would decide by content
    doc = _release(tmp_path, keys[0], tmp_path / "x2.csv", "cohort-2b", 4.0, identity,
                   leave_out_exhausted=True).doc
    assert doc["budget"]["leave_out_exhausted"] is True
    assert "excluded" not in json.dumps(doc["budget"])
    log = (tmp_path / "enclave.log").read_text()
    assert "left out 1 person(s)" in log


@pytest.mark.slow
def test_leave_out_never_tells_who_an_earlier_release_held(tmp_path, keys):
    """Issue 67's attack on --leave-out-exhausted: person Y spent the cap in release A;
    release B holds 60 new people and 40 fresh-id copies of Y's record. Leaving people out
    by their records would leave those 40 out exactly when A held Y, and B's artifact would
    tell it. With linkage identity only, the copies are not Y by identity, so B is refused
    (one line, no artifact) rather than published without them; a schema without the
    administrator's required linkage field is refused before any row is read."""
    rows = _sample()
    ids = rows["patient_id"].unique(maintain_order=True).to_list()
    y = rows.filter(pl.col("patient_id") == ids[0]).head(1)
    y.write_csv(tmp_path / "a.csv")
    identity = replace(CAP, linkage=("patient_id",), linkage_required=True)
    _release(tmp_path, keys[0], tmp_path / "a.csv", "a", 10.0, identity)
    copies = pl.concat([y.with_columns(pl.lit(f"COPY{k:03d}").alias("patient_id"))
                        for k in range(40)])
    fresh = rows.filter(pl.col("patient_id").is_in(ids[100:160]))
    pl.concat([fresh, copies]).write_csv(tmp_path / "b.csv")
    with pytest.raises(UserError, match=r"^40 of the 100 people .* not by their linkage") as e:
        _release(tmp_path, keys[0], tmp_path / "b.csv", "b", 2.0, identity,
                 leave_out_exhausted=True)
    assert "\n" not in str(e.value) and not (tmp_path / "out-b" / "release.json").exists()
    raw = json.loads(demo_schema_path().read_text())
    props = {k: v for k, v in raw["properties"].items() if k != "patient_id"}
    unlinked = tmp_path / "no-id.schema.json"
    unlinked.write_text(json.dumps({**{k: v for k, v in raw.items() if k != "x-id"},
                                    "properties": props, "required": list(props)}))
    rows.drop("patient_id").write_csv(tmp_path / "c.csv")
    cfg = load_config(None, {"data": tmp_path / "c.csv", "schema": unlinked, "unit": "row",
                             "release_key": keys[0], "out": tmp_path / "out-c",
                             "lifetime_ledger": tmp_path / "ledger", "dataset": "c"})
    with pytest.raises(UserError, match=r"lacks the linkage field.s. patient_id .* no data"):
        run_release(cfg, installation=identity)


def test_linkage_fields_match_a_person_whose_records_differ(tmp_path, schema):
    """With x-linkage (here sex and age, as birth year and sex would be), a person's new
    visit - another record - is matched by those values; without it, only by records."""
    raw = json.loads(demo_schema_path().read_text())
    linked = parse_schema({**raw, "x-linkage": ["age", "sex"]})
    first = _frame(schema, generate_rows(50, 3))
    later = first.with_columns(pl.lit("new complaint text").alias("chief_complaint"),
                               ("N" + pl.col("patient_id")).alias("patient_id"))
    store = FolderStore(tmp_path / "ledger")
    key, link = store.key(), store.link
    for s, expect in ((linked, True), (schema, False)):
        old = person_keys(key, first, s, "patient_id", link)
        old = old.subset(np.ones(old.count, bool), with_release(histories(old, []), 0))
        hit = spends(histories(person_keys(key, later, s, "patient_id", link), [old]),
                     [1.0]) > 0
        assert hit.all() if expect else not hit.any()
    with pytest.raises(UserError, match="x-linkage names 'patient_id'"):
        parse_schema({**raw, "x-linkage": ["patient_id"]})


@pytest.mark.slow
def test_new_people_are_released_after_the_cap_was_spent(tmp_path, keys, schema):
    """The demo rows spent the whole cap; extracts of new people from the generator (five
    seeds) are released, none of their people matched to a charged one."""
    (tmp_path / "rows.csv").write_text(_sample().write_csv())
    _release(tmp_path, keys[0], tmp_path / "rows.csv", "spent", 10.0)
    store = FolderStore(tmp_path / "ledger")
    charged = [_charged(store)]
    for seed in range(5):
        rows = generate_rows(300, seed=100 + seed)
        new = person_keys(store.key(), _frame(schema, rows), schema, "patient_id", store.link)
        assert spends(histories(new, charged), [10.0]).max() == 0.0
        pl.DataFrame(rows).write_csv(tmp_path / f"new{seed}.csv")
        _release(tmp_path, keys[0], tmp_path / f"new{seed}.csv", f"new-{seed}", 2.0)


def _charged(store: FolderStore):
    return store.people(next(e for e in store.events() if e["kind"] == "people"))


def test_a_number_moved_across_a_bin_edge_is_the_same_person(tmp_path, schema):
    """Issue 67: a number within one grid step of a public bin edge matches both bins. Each
    person's heart rate (or temperature, at its 0.1 grid) moved one step across the nearest
    edge: every moved person is matched; moved two steps past it, or two numbers moved at
    once, they are new people (what `release.ledger_people` promises, no more)."""
    rows = _frame(schema, generate_rows(120, 5))
    store = FolderStore(tmp_path / "ledger")
    key, link = store.key(), store.link
    old = person_keys(key, rows, schema, "patient_id", link)
    old = old.subset(np.ones(old.count, bool), with_release(histories(old, []), 0))

    def across(frame: pl.DataFrame, name: str, steps: int) -> pl.DataFrame:
        """``name`` moved to ``steps`` grid steps past its nearest inner edge."""
        f = schema.field(name)
        step = 10.0 ** -f.precision
        edges = pl.Series(f.bins[1:-1])
        value = pl.col(name).cast(pl.Float64)
        nearest = value.map_elements(lambda v: float(edges[(edges - v).abs().arg_min()]),
                                     return_dtype=pl.Float64)
        moved = pl.when(value >= nearest).then(nearest - steps * step).otherwise(
            nearest + (steps - 1) * step).round(f.precision)
        cast = pl.Int64 if f.is_integer else pl.Float64
        return frame.with_columns(moved.cast(cast).alias(name))

    def matched(frame: pl.DataFrame) -> np.ndarray:
        new = person_keys(key, frame, schema, "patient_id", link)
        return spends(histories(new, [old]), [1.0]) > 0

    assert matched(rows).all()
    for name in ("heart_rate", "temperature_c"):
        edge = across(rows, name, 1)  # the next grid point on the edge's other side
        changed = (edge[name].cast(pl.Float64) != rows[name].cast(pl.Float64)).to_numpy()
        assert changed.all(), name  # every record moved into the next bin
        assert matched(edge).all(), name
        assert not matched(across(rows, name, 2)).any(), name
    both = across(across(rows, "heart_rate", 1), "temperature_c", 1)
    assert matched(both).mean() < 0.1  # two numbers moved: a new record


def test_a_dropped_column_is_the_same_records(tmp_path, schema):
    """Records compared on the fields both extracts have, when they share most of them: the
    same rows without pain_score match; a table sharing two fields is not compared."""
    rows = _frame(schema, generate_rows(80, 4))
    store = FolderStore(tmp_path / "ledger")
    key, link = store.key(), store.link
    full = person_keys(key, rows, schema, "patient_id", link)
    full = full.subset(np.ones(full.count, bool), with_release(histories(full, []), 0))
    raw = json.loads(demo_schema_path().read_text())
    for keep in (("pain_score",), tuple(f for f in raw["properties"]
                                       if f not in ("patient_id", "sex", "acuity"))):
        props = {k: v for k, v in raw["properties"].items() if k not in keep}
        s = parse_schema({**raw, "properties": props, "required": list(props)})
        hit = spends(histories(person_keys(key, rows.drop(list(keep)), s, "patient_id",
                                           link), [full]), [1.0]) > 0
        assert hit.all() if keep == ("pain_score",) else not hit.any()


# ----- item 2: a ledger the steward cannot rewrite --------------------------------------------

def _measuring(ledger: LifetimeLedger, schema, epsilon: float) -> str:
    """A release of ``epsilon`` whose five people were charged and whose first mechanism
    started; its id."""
    rid = ledger.reserve(epsilon)
    ledger.charge_people(rid, _frame(schema, generate_rows(5, 9)), schema, "patient_id")
    ledger.start_measuring(rid)
    return rid


def test_a_folder_edited_by_hand_is_refused_and_an_abort_after_a_mechanism_is_no_refund(
        tmp_path, schema):
    store = FolderStore(tmp_path / "ledger")
    ledger = LifetimeLedger(tmp_path / "ledger", "ds", installation=CAP, store=store)
    rid = _measuring(ledger, schema, 4.0)
    ledger.finish(rid, "aborted")  # what a hand could append: no refund once measuring
    assert ledger.spent()[0] == 4.0
    path = tmp_path / "ledger" / FolderStore.EVENTS_FILE
    doc = json.loads(path.read_text())
    doc["events"][1]["epsilon"] = 0.5
    path.write_text(json.dumps(doc))
    for call in (ledger.spent, lambda: ledger.reserve(1.0)):
        with pytest.raises(UserError, match="MAC does not match: it was edited outside"):
            call()
    r = subprocess.run([EXE, "ledger", "show", "--ledger", str(tmp_path / "ledger")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "MAC does not match" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(("forged", "why"), [
    ({"kind": "reserve", "rid": "aaaaaaaaaaaa", "dataset": "ds", "epsilon": -6.0}, "epsilon"),
    ({"kind": "reserve", "rid": "aaaaaaaaaaaa", "dataset": "ds", "epsilon": float("nan")},
     "epsilon"),
    ({"kind": "reserve", "rid": "aaaaaaaaaaaa", "dataset": "ds", "epsilon": "6"}, "epsilon"),
    ({"kind": "reserve", "rid": "aaaaaaaaaaaa", "dataset": "ds", "epsilon": 0.0}, "epsilon"),
    ({"kind": "reserve", "rid": "FIRST", "dataset": "ds", "epsilon": 0.0}, "twice"),
    ({"kind": "people", "rid": "bbbbbbbbbbbb", "people": 3}, "not reserved"),
    ({"kind": "end", "rid": "FIRST", "status": "aborted"}, "follows the release's end"),
    ({"kind": "measuring", "rid": "FIRST"}, "follows the release's end"),
    ({"kind": "refund", "rid": "FIRST"}, "no kind"),
])
def test_a_log_that_breaks_a_rule_makes_the_ledger_refuse(tmp_path, schema, forged, why):
    """What the folder's owner could write with its key (a valid MAC): an event that breaks
    a rule of `release.ledger_rules` makes every reader refuse, in one line."""
    from release.ledger_store import folder_mac

    store = FolderStore(tmp_path / "ledger")
    ledger = LifetimeLedger(tmp_path / "ledger", "ds", installation=CAP, store=store)
    first = _measuring(ledger, schema, 4.0)
    ledger.finish(first, "released", epsilon=4.0)
    path = tmp_path / "ledger" / FolderStore.EVENTS_FILE
    doc = json.loads(path.read_text())
    event = {k: (first if v == "FIRST" else v) for k, v in forged.items()}
    doc["events"].append(event)
    doc["mac"] = folder_mac(store.key(), doc)
    path.write_text(json.dumps(doc))
    for call in (ledger.spent, lambda: ledger.reserve(1.0)):
        with pytest.raises(UserError, match=f"refuses to answer: event 6 .*{why}"):
            call()


def test_an_unsigned_raise_appended_to_the_log_changes_nothing(tmp_path):
    ledger = LifetimeLedger(tmp_path / "ledger", "ds", 4.0, installation=CAP)
    ledger.reserve(4.0)
    ledger.store.add_raise({"kind": "raise", "dataset": "ds", "by": "0" * 16,
                         "lifetime_epsilon": {"from": 4.0, "to": 10.0},
                         "lifetime_delta": {"from": 1e-5, "to": 1e-5}, "signature": "00"})
    with pytest.raises(UserError, match="would be exceeded"):
        LifetimeLedger(tmp_path / "ledger", "ds", installation=CAP).reserve(1.0)


@pytest.fixture(scope="module")
def pg_ledger():
    """A PostgreSQL ledger set up by the administrator's script, its steward role."""
    with _pg_server() as srv:
        yield srv


@contextmanager
def _pg_server():
    with server() as srv:
        srv.execute("CREATE ROLE steward LOGIN PASSWORD 'steward-pw'")
        r = subprocess.run(["psql", "-v", "steward=steward", "-q", "-f",
                            str(ROOT / "scripts" / "ledger-postgres.sql"), srv.url("admin")],
                           capture_output=True, text=True, env={**os.environ,
                                                                "PGPASSWORD": ADMIN_PW})
        assert r.returncode == 0, r.stderr
        yield srv


def _as_steward(monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "steward-pw")


def _pg(conn, sql: str, *params):
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else None


def _refused(conn, sql: str, *params) -> str:
    """The SQLSTATE with which the database refused ``sql`` (fails if it ran)."""
    with pytest.raises(Exception) as e:
        _pg(conn, sql, *params)
    return str(getattr(e.value, "sqlstate", "")) or str(e.value)


@pytest.mark.postgres
def test_the_steward_role_forges_nothing(monkeypatch, schema):
    """Issue 67's forgeries, tried as the steward's own role: writing any table (an explicit
    seq, a reserve event at epsilon 0, people bytes copied from a real release), reading the
    linkage key, moving the sequence, changing or dropping a row, and calling the ledger's
    functions with epsilon 0, negative, NaN, infinite or a string, for a release that was
    not reserved, twice, or with a history that hides a release or names one that does not
    exist: every one refused, the spend unchanged, the log still keeping every rule."""
    with _pg_server() as srv:  # a ledger of its own: this test leaves it unreadable
        _forge(srv, monkeypatch, schema)


def _forge(pg_ledger, monkeypatch, schema) -> None:
    import adbc_driver_postgresql.dbapi as dbapi

    _as_steward(monkeypatch)
    store = PostgresStore(pg_ledger.url("steward"))
    ledger = LifetimeLedger(store.url, "pg", installation=CAP, store=store)
    first = _measuring(ledger, schema, 3.0)
    ledger.finish(first, "released", epsilon=3.0)
    before = store.events()
    conn = dbapi.connect(pg_ledger.url("steward"), autocommit=True)
    reserve = json.dumps({"kind": "reserve", "rid": first, "dataset": "x", "epsilon": 0})
    for sql in (f"INSERT INTO ledger_events (seq, event) VALUES (0, '{reserve}'::jsonb)",
                f"INSERT INTO ledger_events (event) VALUES ('{reserve}'::jsonb)",
                "INSERT INTO ledger_people SELECT 'aaaaaaaaaaaa', people, history, words "
                "FROM ledger_people",
                "INSERT INTO ledger_releases VALUES (9, 'aaaaaaaaaaaa', 'x', 1, 0)",
                "SELECT link_key FROM ledger_meta", "SELECT key FROM ledger_meta",
                "SELECT setval('ledger_events_seq_seq', 1)",
                "UPDATE ledger_events SET event = '{}'::jsonb", "DELETE FROM ledger_events",
                "TRUNCATE ledger_events", "UPDATE ledger_releases SET epsilon = 0",
                "DELETE FROM ledger_people", "DROP TABLE ledger_events",
                "ALTER TABLE ledger_events DISABLE TRIGGER ALL"):
        assert _refused(conn, sql) == "42501", sql
    assert "link_key" not in {c for row in _pg(conn, "SELECT * FROM ledger_info()") for c in
                              map(str, row)}
    for epsilon in ("0", "-6", "'NaN'", "'Infinity'", "'-Infinity'"):
        assert _refused(conn, f"SELECT ledger_reserve('other', {epsilon}::float8, 0, '', 10, "
                              "1e-5)") == "22023", epsilon
    assert _refused(conn, "SELECT ledger_reserve('other', 'six', 0, '', 10, 1e-5)") == "22P02"
    assert _refused(conn, "SELECT ledger_reserve('new', 1, 0, '', 'NaN', 1e-5)") == "22023"
    # past the ceiling on one dataset (3 spent on 'pg', 10 at most)
    assert _refused(conn, "SELECT ledger_reserve('pg', 8, 0, '', 10, 1e-5)") == "22023"
    unknown = "aaaaaaaaaaaa"
    for sql in (f"SELECT ledger_measuring('{unknown}')",
                f"SELECT ledger_end('{unknown}', 'released', 1, 0, NULL)",
                f"SELECT ledger_charge('{unknown}', '\\x00'::bytea, 0, ''::bytea, 1)",
                f"SELECT ledger_end('{first}', 'aborted', NULL, NULL, NULL)",  # ended already
                f"SELECT ledger_measuring('{first}')"):
        assert _refused(conn, sql) == "22023", sql
    # a new release: its people's history must hold it, name only releases the ledger holds,
    # and keep every person within the ceiling (3 spent + 8 > 10), whatever the client says
    rid = _pg(conn, "SELECT ledger_reserve('pg2', 6, 0, 'forger', 10, 1e-5)")[0][0]
    one = np.zeros(1, dtype="<u8")
    for bits, why in ((0b00, "hides the release itself"), (0b111, "names release 2"),
                      (0b11, "within the ceiling: 3 + 6 < 10")):
        one[0] = bits
        sql = "SELECT ledger_charge($1::text, $2::bytea, 1, $3::bytea, 1)"
        if why.startswith("within"):
            _pg(conn, sql, rid, b"people", one.tobytes())  # accepted: 9 <= 10
        else:
            assert _refused(conn, sql, rid, b"people", one.tobytes()) == "22023", why
    big = _pg(conn, "SELECT ledger_reserve('pg3', 4, 0, '', 10, 1e-5)")[0][0]
    one[0] = 0b111  # release 2 (big) with 0 and 1: 3 + 6 + 4 > 10
    assert _refused(conn, "SELECT ledger_charge($1::text, $2::bytea, 1, $3::bytea, 1)", big, b"p",
                    one.tobytes()) == "22023"
    conn.close()
    # a raise is kept byte for byte as signed (its signature is checked on reading), and
    # never past the database's ceiling
    signed = {"kind": "raise", "dataset": "pg", "by": "0" * 16, "when": "2026-12-07T00:00:00Z",
              "lifetime_epsilon": {"from": 10.0, "to": 10.0},
              "lifetime_delta": {"from": 1e-05, "to": 1e-05}, "signature": "00", "reason": "é"}
    store.add_raise(signed)
    assert store.events()[-1] == signed
    with pytest.raises(UserError, match="finite caps within the ceiling"):
        store.add_raise({**signed, "lifetime_epsilon": {"from": 10.0, "to": 11.0}})
    # not even the owner can change a row while the triggers stand
    with pytest.raises(Exception, match="append-only"):
        pg_ledger.execute("DELETE FROM ledger_events")
    with pytest.raises(Exception, match="append-only"):
        pg_ledger.execute("UPDATE ledger_releases SET epsilon = 0")
    after = store.events()
    assert after[:len(before)] == before and LifetimeLedger(
        store.url, "pg", installation=CAP, store=store).spent() == (3.0, 0.0)
    assert [e["kind"] for e in after[len(before):]] == ["dataset", "reserve", "people",
                                                        "dataset", "reserve", "raise"]
    # the people bytes the role sent were no people record: the next charge cannot read
    # them, and refuses in one line (the ledger answers nothing it cannot count)
    with pytest.raises(UserError, match="people a release charged cannot be read"):
        _measuring(LifetimeLedger(store.url, "pg4", installation=CAP, store=store), schema, 1)


@pytest.mark.postgres
def test_the_ledger_connection_is_pinned(pg_ledger, monkeypatch):
    """No libpq variable moves the ledger's connection (PGHOSTADDR, PGSERVICE, PGPORT...:
    cleared while it connects); a URL without host, port or database is refused; and a
    database that answers with another ledger id than the installation's is refused."""
    _as_steward(monkeypatch)
    url = pg_ledger.url("steward")
    for bad in ("postgresql://steward@127.0.0.1/postgres", "postgresql://steward@/postgres",
                f"postgresql://steward@127.0.0.1:{pg_ledger.port}/",
                f"postgresql://steward@127.0.0.1:{pg_ledger.port}/postgres?port=1"):
        with pytest.raises(UserError, match=r"host, port and database|remove port"):
            PostgresStore(bad)
    for name, value in (("PGHOSTADDR", "192.0.2.1"), ("PGSERVICE", "elsewhere"),
                        ("PGPORT", "1"), ("PGDATABASE", "other"), ("PGOPTIONS", "-c x=1"),
                        ("PGSERVICEFILE", "/nonexistent")):
        monkeypatch.setenv(name, value)
    real = PostgresStore(url).ledger_id()
    assert os.environ["PGHOSTADDR"] == "192.0.2.1"  # put back after connecting
    with pytest.raises(UserError, match=f"holds ledger {real}, not the installation's"):
        PostgresStore(url, ledger_id="0" * 16).events()
    assert PostgresStore(url, ledger_id=real).ledger_id() == real
    # linkage digests are keyed inside the database (its key never leaves it)
    linked = PostgresStore(url).link(np.array([1, 2, 1], dtype=np.uint64))
    assert linked.dtype == np.uint64 and linked[0] == linked[2] != linked[1] and linked.all()


@pytest.mark.slow
@pytest.mark.postgres
def test_a_release_against_the_postgres_ledger(pg_ledger, tmp_path, keys, monkeypatch):
    """The installation names the PostgreSQL ledger: a release charges it (people
    included), a second of the same people is held to the cap, and no flag, config or
    variable points a release elsewhere."""
    _as_steward(monkeypatch)
    url = pg_ledger.url("steward")
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    conf = etc / "installation.toml"
    conf.write_text(f'[installation]\n[lifetime]\nmax_epsilon = 10.0\n[ledger]\nurl = "{url}"\n'
                    f'ledger_id = "{PostgresStore(url).ledger_id()}"\n')
    monkeypatch.setenv(INSTALLATION_ENV, str(conf))
    inst = load_installation()
    assert inst.ledger == url
    with pytest.raises(UserError, match="names the lifetime ledger; remove budget"):
        ledger_folder(tmp_path / "elsewhere", inst)
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "env-folder"))
    with pytest.raises(UserError, match=f"remove {LEDGER_ENV}"):
        ledger_folder(None, inst)
    monkeypatch.delenv(LEDGER_ENV)
    base = {"data": DEMO_SAMPLE, "schema": demo_schema_path(), "release_key": keys[0],
            "epsilon": 6.0}
    r = subprocess.run([EXE, "release", "--data", str(DEMO_SAMPLE), "--schema",
                        str(demo_schema_path()), "--key", str(keys[0]), "--out",
                        str(tmp_path / "o"), "--lifetime-ledger", str(tmp_path / "new")],
                       capture_output=True, text=True,
                       env={**os.environ, INSTALLATION_ENV: str(conf)})
    assert r.returncode != 0 and "names the lifetime ledger" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    cfg = load_config(None, {**base, "out": tmp_path / "out", "dataset": "pgdemo"})
    assert cfg.budget.lifetime_ledger == url
    doc = run_release(cfg, installation=inst).doc
    store = PostgresStore(url)
    assert doc["budget"]["lifetime_ledger"]["ledger_id"] == store.ledger_id()
    kinds = [e["kind"] for e in store.events()]
    assert {"reserve", "people", "measuring", "end"} <= set(kinds)
    again = load_config(None, {**base, "out": tmp_path / "out2", "dataset": "pgdemo-again"})
    with pytest.raises(UserError, match="would pass their lifetime epsilon 10"):
        run_release(again, installation=inst)


# ----- item 3: the administrator's file wins ----------------------------------------------------

def test_the_installation_file_must_say_what_it_is_and_the_system_file_wins(tmp_path,
                                                                         monkeypatch):
    folder = tmp_path / "etc"
    folder.mkdir(mode=0o755)
    stray = folder / "subuid"
    stray.write_text("")
    with pytest.raises(UserError, match=r"not a selpe-audit installation file \(it has no "
                                        r"\[installation\] table\)"):
        load_installation(stray)
    system = folder / "installation.toml"
    system.write_text('[installation]\nname = "test"\n\n[lifetime]\nmax_epsilon = 3.0\n')
    monkeypatch.setattr("release.installation.SYSTEM_INSTALLATION", system)
    monkeypatch.setenv(INSTALLATION_ENV, str(stray))
    with pytest.raises(UserError, match="is the only installation file in force"):
        load_installation()
    monkeypatch.setenv(INSTALLATION_ENV, str(system))
    assert load_installation().max_epsilon == 3.0
    monkeypatch.delenv(INSTALLATION_ENV)
    assert load_installation().max_epsilon == 3.0
    bad = folder / "ledger.toml"
    bad.write_text('[installation]\n[ledger]\nurl = "postgresql://u:pw@h:5432/db"\n'
                   'ledger_id = "0123456789abcdef"\n')
    with pytest.raises(UserError, match="carries a password"):
        load_installation(bad)
    bad.write_text('[installation]\n[ledger]\nurl = "postgresql://u@h/db"\n'
                   'ledger_id = "0123456789abcdef"\n')
    with pytest.raises(UserError, match="names its host, port and database"):
        load_installation(bad)
    bad.write_text('[installation]\n[ledger]\nurl = "postgresql://u@h:5432/db"\n')
    with pytest.raises(UserError, match="with ledger_id"):
        load_installation(bad)
    bad.write_text('[installation]\n[ledger]\nfolder = "relative"\n')
    with pytest.raises(UserError, match="absolute"):
        load_installation(bad)


def test_only_the_schemas_the_administrator_approved_release(tmp_path, keys, schema):
    """Issue 67 item 4: under an installation that lists approved schemas (a SHA-256, or a
    root-owned folder of them), a release with any other schema - a field renamed, as the
    attacker's - is refused before any row is read, naming its hash; the approved one runs."""
    etc = tmp_path / "etc"
    (etc / "schemas").mkdir(parents=True, mode=0o755)
    conf = etc / "installation.toml"
    raw = json.loads(demo_schema_path().read_text())
    props = {("pain" if k == "pain_score" else k): v for k, v in raw["properties"].items()}
    renamed = tmp_path / "renamed.schema.json"
    renamed.write_text(json.dumps({**raw, "properties": props, "required": list(props)}))
    other = load_schema(renamed).sha256()
    for approval in (f'approved = ["{schema.sha256()}"]', f'folder = "{etc / "schemas"}"'):
        (etc / "schemas" / "demo.schema.json").write_text(demo_schema_path().read_text())
        conf.write_text(f"[installation]\n[lifetime]\nmax_epsilon = 10.0\n[schemas]\n{approval}\n")
        inst = load_installation(conf)
        assert inst.approved_schemas == {schema.sha256()}
        data = tmp_path / "renamed.csv"
        _sample().rename({"pain_score": "pain"}).write_csv(data)
        cfg = load_config(None, {"data": data, "schema": renamed, "release_key": keys[0],
                                 "out": tmp_path / "out-x", "lifetime_ledger": tmp_path / "l",
                                 "dataset": "x", "epsilon": 1.0})
        with pytest.raises(UserError, match=f"schema {other} is not among the 1 schema"):
            run_release(cfg, installation=inst)
        assert not (tmp_path / "l").exists() or not FolderStore(tmp_path / "l").events()
    conf.write_text('[installation]\n[schemas]\napproved = ["not-a-hash"]\n')
    with pytest.raises(UserError, match="must list SHA-256s"):
        load_installation(conf)


@pytest.mark.slow
def test_a_row_unit_release_of_named_people_is_refused_under_an_installation(tmp_path, keys):
    """Issue 67 item 5: a row-unit release of the demo (its rows name their people) would
    protect a person with m rows at m x epsilon while the ledger charges them epsilon once:
    an administrator's installation refuses it before any row is read; without one (the
    single-user default) it runs and its guarantee says m x epsilon."""
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    (etc / "installation.toml").write_text("[installation]\n[lifetime]\nmax_epsilon = 10.0\n")
    inst = load_installation(etc / "installation.toml")
    with pytest.raises(UserError, match="m x epsilon, which the lifetime ledger cannot"):
        _release(tmp_path, keys[0], DEMO_SAMPLE, "rows", 1.0, inst, unit="row")
    assert not (tmp_path / "ledger").exists() or not FolderStore(tmp_path / "ledger").events()
    doc = _release(tmp_path, keys[0], DEMO_SAMPLE, "rows", 1.0, unit="row").doc
    assert "m times epsilon" in json.dumps(doc["guarantees"])


def test_a_ledger_named_by_the_installation_cannot_be_escaped(tmp_path, monkeypatch):
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    inst = Installation(ledger=tmp_path / "the-ledger", source="test installation")
    assert ledger_folder(None, inst) == tmp_path / "the-ledger"
    assert ledger_folder(tmp_path / "the-ledger", inst) == tmp_path / "the-ledger"
    with pytest.raises(UserError, match="names the lifetime ledger"):
        ledger_folder(tmp_path / "new-folder", inst)
    with pytest.raises(UserError, match="never by a release setting"):
        ledger_folder("postgresql://u@h/db", Installation())


# ----- item 4: nothing private left behind -----------------------------------------------------

@pytest.mark.slow
def test_a_killed_release_leaves_no_spool_and_a_later_one_sweeps(tmp_path, keys, monkeypatch):
    """A spool folder of a process that is gone is deleted when the next release starts; a
    release stopped with SIGTERM deletes its own on the way out."""
    from release.dp.spools import SPOOL_ENV, SPOOL_PREFIX, sweep_spools

    spools = tmp_path / "spool"
    spools.mkdir()
    monkeypatch.setenv(SPOOL_ENV, str(spools))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = spools / f"{SPOOL_PREFIX}{dead.pid}-abc"
    stale.mkdir()
    (stale / "rows.arrow").write_bytes(b"private")
    live = spools / f"{SPOOL_PREFIX}{os.getpid()}-def"
    live.mkdir()
    assert sweep_spools() >= 1
    assert not stale.exists() and live.exists()
    live.rmdir()
    rows = generate_rows(20_000, seed=5)
    pl.DataFrame(rows).write_csv(tmp_path / "big.csv")
    env = {**os.environ, SPOOL_ENV: str(spools), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([EXE, "release", "--data", str(tmp_path / "big.csv"), "--schema",
                             str(demo_schema_path()), "--key", str(keys[0]), "--out",
                             str(tmp_path / "out"), "--lifetime-ledger",
                             str(tmp_path / "ledger"), "--epsilon", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(spools.glob(f"{SPOOL_PREFIX}*")):
        time.sleep(0.05)
    assert list(spools.glob(f"{SPOOL_PREFIX}*")), "the release made no spool"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert not list(spools.glob(f"{SPOOL_PREFIX}*"))


@pytest.mark.slow
def test_a_spool_killed_outright_is_swept_whatever_the_next_release_says(tmp_path, keys,
                                                                        monkeypatch):
    """Issue 67: a release killed with SIGKILL (no handler runs) leaves its spool, 0600 in
    a 0700 folder; the next release sweeps it though its own $SELPE_AUDIT_SPOOL (and
    $TMPDIR) name other folders: every spool made is noted where no variable moves it."""
    from release.dp.spools import SPOOL_ENV, SPOOL_PREFIX, registry, sweep_spools

    first, other = tmp_path / "spool-a", tmp_path / "spool-b"
    first.mkdir()
    other.mkdir()
    pl.DataFrame(generate_rows(20_000, seed=6)).write_csv(tmp_path / "big.csv")
    proc = subprocess.Popen([EXE, "release", "--data", str(tmp_path / "big.csv"), "--schema",
                             str(demo_schema_path()), "--key", str(keys[0]), "--out",
                             str(tmp_path / "out"), "--lifetime-ledger",
                             str(tmp_path / "ledger"), "--epsilon", "2"],
                            env={**os.environ, SPOOL_ENV: str(first), "HF_HUB_OFFLINE": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(first.glob(f"{SPOOL_PREFIX}*/rows.arrow")):
        time.sleep(0.02)
    spool = next(first.glob(f"{SPOOL_PREFIX}*"))
    proc.kill()
    proc.wait(timeout=60)
    assert spool.stat().st_mode & 0o777 == 0o700
    assert (spool / "rows.arrow").stat().st_mode & 0o777 == 0o600
    assert (registry() / spool.name).stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv(SPOOL_ENV, str(other))
    monkeypatch.setenv("TMPDIR", str(other))
    assert sweep_spools() >= 1
    assert not spool.exists() and not (registry() / spool.name).exists()


@pytest.mark.slow
def test_an_output_folder_that_is_or_holds_a_symlink_is_refused(tmp_path, keys):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("not the release's")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "holds").mkdir()
    (tmp_path / "holds" / "release.json").symlink_to(target / "keep.txt")
    for out in (tmp_path / "link", tmp_path / "link" / "sub", tmp_path / "holds"):
        r = subprocess.run([EXE, "release", "--data", str(DEMO_SAMPLE), "--schema",
                            str(demo_schema_path()), "--key", str(keys[0]), "--out", str(out),
                            "--lifetime-ledger", str(tmp_path / "ledger")],
                           capture_output=True, text=True)
        assert r.returncode != 0 and "symlink" in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert (target / "keep.txt").read_text() == "not the release's"
    assert not (tmp_path / "ledger").exists()  # refused before anything was reserved


def test_a_folder_of_the_earlier_per_dataset_format_is_refused(tmp_path):
    """Its releases charged datasets, not people: it is kept as a record, not read as one."""
    (tmp_path / "ledger").mkdir()
    (tmp_path / "ledger" / "triage.ledger.json").write_text("{}")
    with pytest.raises(UserError, match="earlier per-dataset format"):
        LifetimeLedger(tmp_path / "ledger", "triage", installation=CAP).reserve(1.0)
