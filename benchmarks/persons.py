"""Synthetic people, not only visits: the people tables against today's independent visits,
random pairing and MOSTLY AI's DP engine, on the demo generator's people
(`generate_people`).

    python -m benchmarks --only persons [--quick] [--set sizes=400,3000] [--set repeats=5]

Per table size (the visits released) and per repeat (DP noise is never seeded: each release
a fresh draw), at epsilon 2 with the default configuration, side by side:

- **ours**: a release with the people schema (`ed_triage_people.schema.json`: ``x-order``,
  person fields, transitions), the model decoder's visits put together into people
  (`decode.people`);
- **independent**: today's release of the same rows (the schema without person structure)
  decoded as independent visits, each its own person;
- **random pairing** (the floor): our decoded visits shuffled among the same people;
- **MOSTLY AI (DP)**: MOSTLY AI's engine (`benchmarks.mostlyai_peer`: one TabularARGN on the
  visits as sequences keyed by the person, DP-SGD at the same epsilon and delta, trained at
  most 2, 4 or 8 minutes by size on the CPU) for as many people as the table holds; its
  venv comes from `make peer-mostlyai` (``--set mostlyai=False`` leaves it out);
- **real sample**: other real people (a test set from another seed, at most 5,000 visits):
  what sampling alone costs.

Measured (`audits.people`) against the released people: visits-per-person TVD, the
transitions' mean TVD (acuity -> next acuity, disposition -> next acuity, the gap's bin),
C2ST AUC on per-person aggregates; against the test people: return-visit TSTR AUC (train on
synthetic people, test on real ones) and visit-level TSTR (acuity, `audits.utility`'s
hgb_native); release (fit) and decode (sample) seconds. The full run also times decoding
10^6 visits into people from the largest table's artifact.

``--quick``: 400 visits, one repeat, no MOSTLY AI, no 10^6 decode.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import aggregate, cell
from benchmarks.suite import Benchmark, markdown_table

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SIZES = (400, 3000, 20000)
REPEATS = 5
EPSILON = 2.0
TEST_VISITS = 5000
MILLION = 1_000_000
DELTA = 1e-6  # the default configuration's (its zCDP counts)
#: MOSTLY AI's training time cap in minutes, by table size (the nearest)
MOSTLYAI_MINUTES = {400: 2.0, 3000: 4.0, 20000: 8.0}
METHODS = ("ours", "independent", "random pairing")
MOSTLYAI = "MOSTLY AI (DP)"
PERSON_KEYS = ("x-order", "x-person-fields", "x-nondecreasing", "x-transitions")


def run(quick: bool = False, sizes: tuple[int, ...] | None = None,
        repeats: int | None = None, person_share: float | None = None,
        million: bool | None = None, mostlyai: bool | None = None) -> dict[str, Any]:
    """Each size ``repeats`` times; ``person_share``: persons.person_share (default the
    configuration's); ``million``: also time decoding 10^6 visits of the largest size's
    last artifact; ``mostlyai``: also MOSTLY AI's engine (its venv: `make peer-mostlyai`).
    Both default to on, but not with ``quick``."""
    sizes = sizes or ((400,) if quick else SIZES)
    repeats = repeats or (1 if quick else REPEATS)
    settings = {"epsilon": EPSILON, **({"person_share": person_share} if person_share else {})}
    lines: list[dict[str, Any]] = []
    out: dict[str, Any] = {"sizes": list(sizes), "repeats": repeats, "settings": settings}
    with tempfile.TemporaryDirectory(prefix="bench-persons-") as tmp:
        base = Path(tmp)
        for n in sizes:
            for r in range(repeats):
                lines += _one(base / f"{n}-{r}", n, r, settings,
                              not quick if mostlyai is None else mostlyai)
        if million if million is not None else not quick:
            out["decode_million"] = _decode_million(base / f"{sizes[-1]}-{repeats - 1}")
    return {**out, "lines": lines, "summary": aggregate(lines, ["visits", "method"])}


def _decode_million(folder: Path) -> dict[str, Any]:
    """Decode 10^6 visits of ``folder``'s people artifact with the model decoder (the
    people put together chunk by chunk): seconds, and the people made."""
    from decode.pipeline import DecodeSettings, run_decode
    from selpe_audit.artifact.signing import public_key_path

    t0 = time.perf_counter()
    res = run_decode(folder / "ours" / "release", [public_key_path(folder / "k.pem")], 0,
                     folder / "million.parquet", DecodeSettings(n=MILLION, decoder="model"))
    return {"visits": MILLION, "seconds": round(time.perf_counter() - t0, 1),
            "people": res.provenance_doc.get("people")}


def _one(folder: Path, n: int, repeat: int, settings: dict[str, Any],
         mostlyai: bool) -> list[dict[str, Any]]:
    """One repeat at ``n`` visits: both releases, both decodes, the three methods scored."""
    import polars as pl

    from audits.people import c2st_people, return_auc, transitions, visits_shares
    from audits.utility import evaluate_standard
    from benchmarks.common import release
    from decode.pipeline import DecodeSettings, run_decode
    from selpe_audit.artifact.signing import generate_keypair
    from selpe_audit.demo.generator import generate_people, write_rows
    from selpe_audit.schema import demo_schema_path, load_schema

    folder.mkdir(parents=True)
    key, pub, _ = generate_keypair(folder / "k.pem")
    train = generate_people(n, seed=10 * n + repeat)
    test = pl.DataFrame(generate_people(min(n, TEST_VISITS), seed=10 * n + repeat + 5))
    data = write_rows(train, folder / "train.csv")
    people_schema = demo_schema_path(people=True)
    visits_schema = folder / "visits.schema.json"
    raw = json.loads(people_schema.read_text())
    visits_schema.write_text(json.dumps({k: v for k, v in raw.items() if k not in PERSON_KEYS}))
    schema = load_schema(people_schema)
    cap = 3
    first, second = ("ours", "today")[:: 1 if repeat % 2 == 0 else -1]  # warm-up fairly
    schemas = {"ours": people_schema, "today": visits_schema}
    made = {name: release(folder / name, data, schemas[name], key, settings)
            for name in (first, second)}
    ours_rel, today_rel = made["ours"], made["today"]

    def decoded(rel_out: Path, name: str) -> tuple[pl.DataFrame, float]:
        path = folder / f"{name}.parquet"
        t0 = time.perf_counter()
        run_decode(rel_out, [pub], 0, path, DecodeSettings(n=n, decoder="model", seed=repeat))
        return pl.read_parquet(path), time.perf_counter() - t0

    ours, ours_decode = decoded(ours_rel.out, "ours")
    today, today_decode = decoded(today_rel.out, "today")
    independent = today.with_columns(
        pl.format("S{}", pl.int_range(pl.len())).alias(schema.id_field)).select(
        schema.field_names)
    pairing = _random_pairing(ours, schema.id_field or "", repeat)
    real = pl.DataFrame(train)
    out: list[dict[str, Any]] = []
    peers = {"ours": ours, "independent": independent, "random pairing": pairing,
             "real sample": test}
    timings = {"ours": (ours_rel.seconds, ours_decode),
               "independent": (today_rel.seconds, today_decode)}
    if mostlyai:
        peers[MOSTLYAI], timings[MOSTLYAI] = _mostlyai(folder, real, schema, n)
    for method, syn in peers.items():
        steps = transitions(syn, real, schema, cap)
        tstr = evaluate_standard(schema, (real if method == "real sample" else syn)
                                 .drop(schema.id_field).to_dicts(),
                                 test.drop(schema.id_field).to_dicts(), seed=repeat)
        timed = timings.get(method)
        out.append({
            "visits": n, "method": method, "repeat": repeat,
            "visits_tvd": 0.5 * float(abs(visits_shares(syn, schema, cap)
                                          - visits_shares(real, schema, cap)).sum()),
            "transitions_tvd": steps["mean"],
            "transitions": {k: v for k, v in steps.items() if k != "mean"},
            "return_auc": return_auc(real if method == "real sample" else syn, test, schema,
                                     seed=repeat),
            "c2st_auc": c2st_people(syn, real, schema, cap, seed=repeat),
            "visit_tstr_auc": tstr["hgb_native"]["macro_auc"],
            **({"release_s": timed[0], "decode_s": timed[1]} if timed else {}),
        })
    return out


def _mostlyai(folder: Path, real: Any, schema: Any, n: int) -> tuple[Any, tuple[float, float]]:
    """MOSTLY AI's engine on the same visits (free text dropped), at the same epsilon and
    the default configuration's delta, for as many people as the table holds, training at
    most `MOSTLYAI_MINUTES` for its size; (its people, (fit, sample) seconds). The engine
    samples sequences under the training table's own person ids (its context keys): they
    are replaced by fresh ones before anything is measured."""
    import polars as pl

    from benchmarks.mostlyai_peer import run_peer

    train = folder / "mostlyai-train.csv"
    real.drop([f.name for f in schema.by_kind("text")]).write_csv(train)
    out = folder / "mostlyai-out.csv"
    minutes = MOSTLYAI_MINUTES[min(MOSTLYAI_MINUTES, key=lambda k: abs(k - n))]
    took = run_peer(train, out, schema.id_field, EPSILON, DELTA, minutes,
                    real[schema.id_field].n_unique())
    people = pl.read_csv(out)  # its sampled people carry training ids: fresh ones instead
    fresh = pl.format("M{}", pl.col(schema.id_field).rank("dense"))
    return people.with_columns(fresh.alias(schema.id_field)), (took["fit_s"], took["sample_s"])


def _random_pairing(syn: Any, pid: str, seed: int) -> Any:
    """The floor: the same visits shuffled among the same people (their sizes kept), each
    person's visits ordered by the order field's values they now hold."""
    import numpy as np
    import polars as pl

    rng = np.random.default_rng([seed, 7])
    ids = syn[pid].to_numpy()
    shuffled = syn.drop(pid)[rng.permutation(syn.height)]
    return shuffled.with_columns(pl.Series(pid, ids)).select(syn.columns)


def table(result: dict[str, Any]) -> str:
    rows = []
    for s in result["summary"]:
        rows.append([s["visits"], s["method"], cell(s["visits_tvd"]),
                     cell(s["transitions_tvd"]), cell(s["return_auc"]), cell(s["c2st_auc"]),
                     cell(s["visit_tstr_auc"]), cell(s.get("release_s"), 1),
                     cell(s.get("decode_s"), 1)])
    return markdown_table(["visits", "method", "visits/person TVD", "transitions TVD",
                           "return-visit TSTR AUC", "C2ST AUC (people)",
                           "visit TSTR AUC (acuity)", "release s", "decode s"], rows)


def summary(result: dict[str, Any]) -> str:
    """The targets, read off the means."""
    by = {(s["visits"], s["method"]): s for s in result["summary"]}
    parts = []
    for n in result["sizes"]:
        ours, today, floor, real = (by.get((n, m)) for m in (*METHODS, "real sample"))
        if not (ours and floor and today and real):
            continue
        t, f = ours["transitions_tvd"]["mean"], floor["transitions_tvd"]["mean"]
        parts.append(
            f"{n} visits: visits-per-person TVD {ours['visits_tvd']['mean']:.3f}, transitions "
            f"TVD {t:.3f} against random pairing's {f:.3f} ({1 - t / f:.0%} below) and "
            f"{real['transitions_tvd']['mean']:.3f} for other real people, return-visit AUC "
            f"{ours['return_auc']['mean']:.3f} against a real sample's "
            f"{real['return_auc']['mean']:.3f}, C2ST {ours['c2st_auc']['mean']:.3f}; visit "
            f"TSTR {ours['visit_tstr_auc']['mean']:.3f} against independent visits' "
            f"{today['visit_tstr_auc']['mean']:.3f}; release "
            f"{ours['release_s']['mean'] / today['release_s']['mean']:.2f}x today's"
            + _peer_words(by.get((n, MOSTLYAI))))
    million = result.get("decode_million")
    if million:
        parts.append(f"decoding {million['visits']:,} visits into people: "
                     f"{million['seconds']:.0f} s")
    return "; ".join(parts) + "." if parts else ""


def _peer_words(peer: dict[str, Any] | None) -> str:
    """MOSTLY AI's means, for the summary."""
    if not peer:
        return ""
    return (f"; MOSTLY AI (DP): visits-per-person TVD {peer['visits_tvd']['mean']:.3f}, "
            f"transitions {peer['transitions_tvd']['mean']:.3f}, return-visit AUC "
            f"{peer['return_auc']['mean']:.3f}, C2ST {peer['c2st_auc']['mean']:.3f}, visit "
            f"TSTR {peer['visit_tstr_auc']['mean']:.3f}, fit {peer['release_s']['mean']:.0f} s")


BENCHMARK = Benchmark("persons", run, table, summary)
