"""The lifetime ledger by person: its false matches, its speed at a million rows, and what the
PostgreSQL store adds to a release.

    python -m benchmarks --only person_ledger [--quick]

- **False matches** (a person matched to a charged person who is someone else: they share a
  spend they did not incur): the 400 demo sample rows spend the whole cap (epsilon 10); then
  five extracts of new people from the demo generator (400 rows each, seeds 100-104) are
  released at epsilon 2 - each must be released - and the share of their people the ledger
  matched is reported. And between two random halves of UCI Adult's training rows (13,024
  people each, the row unit, no id: a table of coarse fields): the share of the second
  half's people matched to the first's - how conservative matching is where records repeat.
- **Speed**: charging 1,000,000 demo rows against a ledger holding 10 charged extracts of
  1,000,000 rows (`LifetimeLedger.charge_people`, in a child process: wall time and peak
  memory). Targets: <= 30 s, <= 2 GB.
- **PostgreSQL**: the demo release (400 rows, epsilon 2) against the folder ledger and
  against a PostgreSQL ledger (the tests' throwaway server, `scripts/ledger-postgres.sql`,
  the steward's role), interleaved, median of 3: the difference. Target: <= 2 s.

``--quick``: one fresh extract, 100,000 rows against 2 extracts, one PostgreSQL pair.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.suite import Benchmark
from release.dp import enable as enable_opendp

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
FRESH_SEEDS = (100, 101, 102, 103, 104)
MILLION = 1_000_000
CHARGED = 10
REPEATS = 3
STEWARD_PW = "steward-pw-for-benchmarks"


def _settings(folder: Path, key: Path, data: Path, tag: str, epsilon: float) -> dict:
    from selpe_audit.schema import demo_schema_path

    return {"data": data, "schema": demo_schema_path(), "release_key": key,
            "out": folder / f"out-{tag}", "dataset": tag, "epsilon": epsilon,
            "enclave_log": folder / f"{tag}.log"}


def false_matches(base: Path, seeds: tuple[int, ...]) -> dict[str, Any]:
    """The demo sample spends the cap; new people's extracts are released, and the share of
    their people the ledger matched is counted."""
    import polars as pl

    from release.config_file import load_config
    from release.installation import Installation
    from release.ledger import LifetimeLedger
    from release.ledger_people import histories, person_keys
    from release.ledger_store import FolderStore
    from release.pipeline import run_release
    from release.private_data import polars_dtypes
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.demo.generator import generate_rows
    from selpe_audit.errors import UserError
    from selpe_audit.schema import demo_schema_path, load_schema

    inst = Installation(max_epsilon=10.0, source="benchmark")
    key, _, _ = generate_keypair(base / "k.pem")
    ledger = base / "ledger"
    sample = ROOT / "selpe_audit" / "data" / "ed_triage_sample.csv"
    run_release(load_config(None, {**_settings(base, key, sample, "sample", 10.0),
                                   "lifetime_ledger": ledger}), installation=inst)
    store = FolderStore(ledger)
    schema = load_schema(demo_schema_path())
    demo = []
    for seed in seeds:
        rows = generate_rows(400, seed=seed)
        frame = pl.DataFrame(rows, schema_overrides=polars_dtypes(schema),
                             infer_schema_length=None)
        charged = [store.people(e) for e in store.events() if e["kind"] == "people"]
        new = person_keys(store.key(), frame, schema, "patient_id", store.link)
        matched = float((histories(new, charged) != 0).any(axis=1).mean())
        data = base / f"fresh-{seed}.csv"
        frame.write_csv(data)
        try:
            run_release(load_config(None, {**_settings(base, key, data, f"fresh-{seed}", 2.0),
                                           "lifetime_ledger": ledger}), installation=inst)
            released = True
        except UserError:  # a refused release is the measurement
            released = False
        demo.append({"seed": seed, "people": new.count, "matched_share": matched,
                     "released": released})
        print(f"fresh extract {seed}: {matched:.3f} of its people matched, released "
              f"{released}", flush=True)
    spent = LifetimeLedger(ledger, "sample", installation=inst).spent()[0]
    return {"demo": demo, "sample_spent": spent, "adult": _adult_halves(base)}


def _adult_halves(base: Path) -> dict[str, Any]:
    """The share of one random half of Adult's people (rows) matched to the other half's."""
    import numpy as np

    from benchmarks import adult
    from release.ledger_people import histories, person_keys, spends, with_release
    from release.ledger_store import FolderStore
    from selpe_audit.schema import load_schema

    train, _, schema_path = adult.load()
    schema = load_schema(schema_path)
    order = np.random.default_rng(7).permutation(train.height)
    half = train.height // 2
    first, second = train[order[:half].tolist()], train[order[half:].tolist()]
    store = FolderStore(base / "adult-ledger")
    charged = person_keys(store.key(), first, schema, None, store.link)
    charged = charged.subset(np.ones(charged.count, bool),
                             with_release(histories(charged, []), 0))
    new = person_keys(store.key(), second, schema, None, store.link)
    share = float((spends(histories(new, [charged]), [1.0]) > 0).mean())
    distinct = first.unique().height / first.height
    print(f"adult halves: {share:.3f} of the second half matched", flush=True)
    return {"people": new.count, "matched_share": share, "distinct_row_share": distinct}


def _speed_child(rows: int, charged: int, folder: str) -> None:
    """In a child: a ledger of ``charged`` extracts of ``rows`` demo rows, then one more
    charged against it; prints the charge's seconds and the process's peak RSS."""
    import numpy as np
    import polars as pl

    from release.installation import Installation
    from release.ledger import LifetimeLedger
    from release.ledger_people import person_keys, with_release
    from release.ledger_store import FolderStore
    from release.private_data import polars_dtypes
    from selpe_audit.demo.generator import generate_rows
    from selpe_audit.schema import demo_schema_path, load_schema

    schema = load_schema(demo_schema_path())
    base = pl.DataFrame(generate_rows(rows // 10, seed=3), schema_overrides=polars_dtypes(
        schema), infer_schema_length=None)
    # ten times the rows, each copy's people their own (ids suffixed), as `scale.huge_rows`
    frame = pl.concat([base.with_columns(pl.col("patient_id") + f"-{k}") for k in range(10)])
    store = FolderStore(folder)
    inst = Installation(max_epsilon=1e6, source="benchmark")
    ledger = LifetimeLedger(folder, "charged", installation=inst, store=store)
    people = person_keys(store.key(), frame, schema, "patient_id", store.link)
    for _ in range(charged):
        rid = ledger.reserve(1.0)
        number = len([e for e in store.events() if e["kind"] == "reserve"]) - 1
        history = with_release(np.zeros((people.count, 0), dtype=np.uint64), number)
        store.charge(rid, people.subset(np.ones(people.count, bool), history))
        store.measuring(rid)
        ledger.finish(rid, "released")
    fresh = LifetimeLedger(folder, "new", installation=inst, store=store)
    rid = fresh.reserve(1.0)
    t0 = time.perf_counter()
    got = fresh.charge_people(rid, frame, schema, "patient_id")
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "peak_mib": peak, "people": got.people,
                      "highest_before": got.highest_before}))


def speed(base: Path, rows: int, charged: int) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "benchmarks.person_ledger", "--speed-child",
                        str(rows), str(charged), str(base / "speed-ledger")],
                       capture_output=True, text=True, check=True, cwd=ROOT)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"charged {rows:,} rows against {charged} extracts: {out['seconds']:.1f} s, "
          f"{out['peak_mib']:.0f} MiB peak", flush=True)
    return {"rows": rows, "charged_extracts": charged, **out}


def postgres(base: Path, repeats: int) -> dict[str, Any]:
    """The demo release against the folder ledger and the PostgreSQL one, interleaved."""
    from release.config_file import load_config
    from release.installation import INSTALLATION_ENV, load_installation
    from release.ledger import FIXED_ENV, LEDGER_ENV
    from release.ledger_postgres import PostgresStore
    from release.pipeline import run_release
    from selpe_audit.artifact.signing import generate_keypair
    from tests.postgres import ADMIN_PW, postgres_bin, server

    if postgres_bin() is None:
        return {"skipped": "PostgreSQL server binaries not installed (Debian 'postgresql')"}
    key, _, _ = generate_keypair(base / "pgk.pem")
    sample = ROOT / "selpe_audit" / "data" / "ed_triage_sample.csv"
    times: dict[str, list[float]] = {"folder": [], "postgresql": []}
    with server() as srv:
        srv.execute(f"CREATE ROLE steward LOGIN PASSWORD '{STEWARD_PW}'")
        subprocess.run(["psql", "-v", "steward=steward", "-v", "max_epsilon=1e6", "-q", "-f",
                        str(ROOT / "scripts" / "ledger-postgres.sql"), srv.url("admin")],
                       check=True, capture_output=True,
                       env={**os.environ, "PGPASSWORD": ADMIN_PW})
        etc = base / "etc"  # the installation file that names the PostgreSQL ledger
        etc.mkdir(mode=0o755)
        conf = etc / "installation.toml"
        os.environ["PGPASSWORD"] = STEWARD_PW
        ledger_id = PostgresStore(srv.url("steward")).ledger_id()
        conf.write_text(f'[installation]\n[ledger]\nurl = "{srv.url("steward")}"\n'
                        f'ledger_id = "{ledger_id}"\n')
        try:
            for i in range(repeats):
                for where in ("folder", "postgresql"):
                    saved = {k: os.environ.pop(k, None) for k in (LEDGER_ENV, FIXED_ENV)}
                    if where == "postgresql":  # the installation names the ledger alone
                        os.environ[INSTALLATION_ENV] = str(conf)
                    else:
                        os.environ.update({k: v for k, v in saved.items() if v is not None})
                    try:
                        inst = load_installation()
                        cfg = load_config(None, {
                            **_settings(base, key, sample, f"{where}-{i}", 2.0),
                            **({} if where == "postgresql" else
                               {"lifetime_ledger": base / f"pg-folder-{i}"})})
                        t0 = time.perf_counter()
                        run_release(cfg, installation=replace(inst, max_epsilon=1e6))
                        times[where].append(time.perf_counter() - t0)
                    finally:
                        os.environ.pop(INSTALLATION_ENV, None)
                        os.environ.update({k: v for k, v in saved.items() if v is not None})
        finally:
            os.environ.pop("PGPASSWORD", None)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"release on the folder ledger {med['folder']:.1f} s, on PostgreSQL "
          f"{med['postgresql']:.1f} s", flush=True)
    return {"repeats": repeats, "median_s": med, "added_s": med["postgresql"] - med["folder"]}


def run(quick: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        matches = false_matches(base, FRESH_SEEDS[:1] if quick else FRESH_SEEDS)
        fast = speed(base, 100_000 if quick else MILLION, 2 if quick else CHARGED)
        pg = postgres(base, 1 if quick else REPEATS)
    out = {"false_matches": matches, "speed": fast, "postgresql": pg}
    return {**out, "table": _table(out), "summary": _summary(out)}


def _table(r: dict[str, Any]) -> str:
    m, s, pg = r["false_matches"], r["speed"], r["postgresql"]
    rows = ["| measure | value |", "|---|---|"]
    for d in m["demo"]:
        rows.append(f"| fresh demo extract (seed {d['seed']}, {d['people']} people): share "
                    f"matched, released | {d['matched_share']:.3f}, "
                    f"{'yes' if d['released'] else 'NO'} |")
    a = m["adult"]
    rows.append(f"| Adult, second random half ({a['people']:,} rows) matched to the first | "
                f"{a['matched_share']:.3f} (distinct rows in a half: "
                f"{a['distinct_row_share']:.3f}) |")
    rows.append(f"| charge {s['rows']:,} rows against {s['charged_extracts']} charged extracts "
                f"of as many | {s['seconds']:.1f} s, {s['peak_mib']:.0f} MiB peak |")
    if "median_s" in pg:
        rows.append(f"| demo release, folder / PostgreSQL ledger (median of {pg['repeats']}) | "
                    f"{pg['median_s']['folder']:.1f} s / {pg['median_s']['postgresql']:.1f} s "
                    f"(+{pg['added_s']:.2f} s) |")
    return "\n".join(rows)


def _summary(r: dict[str, Any]) -> str:
    m, s, pg = r["false_matches"], r["speed"], r["postgresql"]
    worst = max(d["matched_share"] for d in m["demo"])
    released = all(d["released"] for d in m["demo"])
    text = (f"fresh demo extracts: at most {worst:.3f} of their people falsely matched, "
            f"{'all' if released else 'NOT all'} released; Adult halves "
            f"{m['adult']['matched_share']:.3f} matched; {s['rows']:,} rows against "
            f"{s['charged_extracts']} extracts in {s['seconds']:.1f} s, "
            f"{s['peak_mib'] / 1024:.2f} GiB")
    if "added_s" in pg:
        text += f"; the PostgreSQL ledger adds {pg['added_s']:.2f} s to the demo release"
    return text + "."


BENCHMARK = Benchmark("person_ledger", run)


if __name__ == "__main__":  # the child `speed` starts: the charge of 10^6 rows, alone
    enable_opendp()  # OpenDP's contrib features, once, at the process's entry
    _speed_child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
