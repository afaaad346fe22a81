"""Seeded generator of FICTIONAL emergency-department triage records (demo data).

Nothing here describes a real person or a real visit. Every record is drawn from
hand-written probability tables and text templates, so the demo pipeline and its
privacy audit have realistic-looking data without touching patient data.

How a dataset is made:

* People first: each fictional person gets an id (``P`` + 6 digits, random), an age
  and a sex. About 10% of people come back, with 2-4 visits, so that person-level
  (not row-level) privacy accounting can be exercised.
* Per visit, the triage acuity (1 = most urgent ... 5 = least urgent) is drawn from
  roughly 4/18/40/28/10 %, tilted towards high acuity for the elderly and towards
  low acuity for children.
* A complaint "family" fitting the acuity, age and sex is chosen (chest pain, stroke
  symptoms, sepsis-like fever for high acuity; sprains, rashes, refills for low
  acuity). Its templates are expanded slot by slot (symptom x site x duration x
  modifier), which yields hundreds of distinct free-text phrasings. Templates never
  contain names, dates, phone numbers or record numbers.
* Vital signs, pain, arrival mode and disposition are drawn from distributions that
  depend on acuity, the complaint family and age (e.g. tachycardia, low O2 and
  shock or hypertension for acuity 1-2; the elderly are admitted more often).

With ``--people`` (`generate_people`), people have histories instead: each visit has the
day it started (``visit_day``, in a two-year window), and a return is shaped by the visit
before it - likelier after an admission or leaving unseen and for recurring complaints
(chest pain, breathing, diabetes, mental health...), sooner after leaving unseen (days) or
an admission (weeks) than otherwise (months), often at the same or a neighbouring acuity
and the same complaint family; sex stays, age ticks with the days. About a quarter of the
people come back. Its schema says so: ``data/ed_triage_people.schema.json``.

Generation is fully determined by ``seed`` via ``numpy.random.default_rng``: the
same ``(n, seed)`` always gives identical rows. Seeding is right here because this
is demo *data*, not differential-privacy noise.

Command line::

    python -m selpe_audit.demo.generator --n 1000 --seed 0 --out rows.csv
    python -m selpe_audit.demo.generator --people --n 3000 --out visits.csv

The word lists and complaint families that make the fictional records varied are data:
``selpe_audit/data/demo_generator.json``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["COLUMNS", "PEOPLE_COLUMNS", "generate_people", "generate_rows", "main", "write_rows"]

#: Column order, identical to the property order of ``data/ed_triage.schema.json``.
COLUMNS: tuple[str, ...] = (
    "patient_id",
    "age",
    "sex",
    "arrival_mode",
    "temperature_c",
    "heart_rate",
    "respiratory_rate",
    "o2_saturation",
    "systolic_bp",
    "diastolic_bp",
    "pain_score",
    "chief_complaint",
    "disposition",
    "acuity",
)

_ACUITY_P = np.array([0.04, 0.18, 0.40, 0.28, 0.10])
_SEX = ("female", "male", "other")
_SEX_P = np.array([0.505, 0.485, 0.01])
_ARRIVAL = ("walk-in", "ambulance", "police", "transfer", "helicopter")
_DISPOSITION = (
    "discharged",
    "admitted-ward",
    "admitted-icu",
    "transferred",
    "left-without-being-seen",
)
# Severity weight per acuity: scales how far vitals drift from normal.
_SEVERITY = {1: 1.0, 2: 0.7, 3: 0.35, 4: 0.1, 5: 0.0}

Rng = np.random.Generator
Slot = Sequence[str] | Callable[[Rng], str]

# ---------------------------------------------------------------------------
# Text slots. Values may themselves contain {slot} placeholders.
# ---------------------------------------------------------------------------


def _slot(spec: list[str] | dict[str, int]) -> Slot:
    """A slot from the tables: its list of values, or a slot that draws an integer in
    [from, to] (step-aligned), shown with ``decimals`` places (as that integer / 10^d)."""
    if isinstance(spec, list):
        return tuple(spec)
    lo, hi, step, d = spec["from"], spec["to"], spec.get("step", 1), spec.get("decimals", 0)
    if d:
        return lambda rng: f"{int(rng.integers(lo, hi + 1)) / 10 ** d:.{d}f}"
    return lambda rng: str(lo + step * int(rng.integers(0, (hi - lo) // step + 1)))


#: the word lists and complaint families (selpe_audit/data/demo_generator.json)
_TABLES = json.loads(resources.files("selpe_audit").joinpath(
    "data/demo_generator.json").read_text(encoding="utf-8"))
_SLOTS: dict[str, Slot] = {k: _slot(v) for k, v in _TABLES["slots"].items()}


def _expand(template: str, rng: Rng) -> str:
    """Fill {slot} placeholders recursively; one value per slot name per complaint.

    Caching per complaint keeps e.g. "{side}" consistent within one text.
    """
    cache: dict[str, str] = {}
    pattern = re.compile(r"\{(\w+)\}")

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in cache:
            slot = _SLOTS[key]
            raw = slot(rng) if callable(slot) else slot[int(rng.integers(len(slot)))]
            cache[key] = pattern.sub(fill, raw)
        return cache[key]

    text = pattern.sub(fill, template)
    text = re.sub(r"\s+", " ", text).strip(" ,")
    if len(text) > 120:
        text = text[:120].rsplit(" ", 1)[0].rstrip(" ,")
    return text


# ---------------------------------------------------------------------------
# Complaint families: which acuities they occur at and how they shift vitals.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    """A clinical presentation; ties complaint text to plausible vitals."""

    name: str
    weights: dict[int, float]  # acuity -> relative weight
    templates: tuple[str, ...]
    pain: tuple[int, int] = (0, 4)
    fever_p: float = 0.03
    shock_p: float = 0.0  # chance of hypotension (scaled by severity)
    htn_p: float = 0.0  # chance of marked hypertension (scaled by severity)
    hr: float = 0.0  # extra heart-rate shift at full severity
    rr: float = 0.0  # extra respiratory-rate shift at full severity
    o2: float = 0.0  # extra O2 drop at full severity
    min_age: int = 0
    max_age: int = 105
    female_only: bool = False
    trauma: bool = False  # more helicopter/ambulance
    police: float = 0.0  # extra chance of arriving with police


def _family(spec: dict[str, Any]) -> _Family:
    """A family from the tables (JSON keys are strings: acuities back to ints)."""
    extra = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()
             if k not in ("name", "weights", "templates")}
    return _Family(spec["name"], {int(a): w for a, w in spec["weights"].items()},
                   tuple(spec["templates"]), **extra)


_FAMILIES: tuple[_Family, ...] = tuple(_family(f) for f in _TABLES["families"])


# ---------------------------------------------------------------------------
# Row generation.
# ---------------------------------------------------------------------------


def _draw_age(rng: Rng) -> int:
    """Age mixture for ED attenders: children, adults, and a heavy elderly tail."""
    group = int(rng.choice(4, p=[0.17, 0.35, 0.25, 0.23]))
    if group == 0:
        age = rng.integers(0, 18)
    elif group == 1:
        age = rng.integers(18, 45)
    elif group == 2:
        age = rng.integers(45, 65)
    else:
        age = 65 + rng.exponential(11.0)
    return int(min(age, 103))


def _draw_acuity(rng: Rng, age: int) -> int:
    """Acuity tilted by age; tilts are mild so the marginal stays near the target."""
    if age >= 80:
        tilt = np.array([1.9, 1.6, 1.1, 0.7, 0.6])
    elif age >= 65:
        tilt = np.array([1.5, 1.35, 1.05, 0.8, 0.7])
    elif age < 18:
        tilt = np.array([0.6, 0.7, 0.95, 1.2, 1.3])
    else:
        tilt = np.array([0.85, 0.9, 0.98, 1.05, 1.08])
    p = _ACUITY_P * tilt
    return int(rng.choice(5, p=p / p.sum())) + 1


def _draw_family(rng: Rng, acuity: int, age: int, sex: str) -> _Family:
    """Pick a complaint family eligible for this acuity, age and sex."""
    fams = [
        f
        for f in _FAMILIES
        if f.weights.get(acuity, 0.0) > 0
        and f.min_age <= age <= f.max_age
        and (sex == "female" or not f.female_only)
    ]
    w = np.array([f.weights[acuity] for f in fams], dtype=float)
    return fams[int(rng.choice(len(fams), p=w / w.sum()))]


def _clip_int(x: float, lo: int, hi: int) -> int:
    return int(min(max(round(x), lo), hi))


def _vitals(rng: Rng, acuity: int, age: int, fam: _Family) -> dict[str, Any]:
    """Vitals drift from normal with acuity severity, the family's profile, and age."""
    sev = _SEVERITY[acuity]
    fever = rng.random() < min(fam.fever_p + 0.08 * sev, 0.95)
    if fever:
        temp = rng.normal(38.8, 0.55)
    elif acuity == 1 and rng.random() < 0.08:
        temp = rng.normal(35.2, 0.5)  # hypothermia in the sickest
    else:
        temp = rng.normal(36.8, 0.3)
    temperature = round(float(min(max(temp, 34.0), 42.0)), 1)

    child_hr = 40 if age < 2 else 25 if age < 6 else 12 if age < 12 else 0
    child_rr = 14 if age < 2 else 8 if age < 6 else 4 if age < 12 else 0
    hr = rng.normal(78 + 32 * sev + fam.hr * sev + child_hr + (10 if fever else 0), 11)
    rr = rng.normal(15 + 8 * sev + fam.rr * sev + child_rr + (2 if fever else 0), 2.2)
    o2 = rng.normal(98 - 6 * sev - fam.o2 * sev, 1.0 + 2.0 * sev)

    # Blood pressure: shock or hypertensive crisis in the sick, age-related rise otherwise.
    u = rng.random()
    shock_p = (fam.shock_p + 0.15) * sev if acuity <= 2 else fam.shock_p * sev * 0.3
    htn_p = (fam.htn_p + 0.1) * sev if acuity <= 3 else 0.03
    if u < shock_p:
        sbp = rng.normal(82, 9)
        hr += 12
    elif u < shock_p + htn_p:
        sbp = rng.normal(182, 16)
    else:
        sbp = rng.normal(118 + 0.45 * max(age - 30, 0) - (18 if age < 12 else 0), 13)
    sbp_i = _clip_int(sbp, 60, 240)
    dbp_i = _clip_int(sbp_i * 0.6 + rng.normal(2, 6), 30, 140)
    dbp_i = max(30, min(dbp_i, sbp_i - 15))

    lo, hi = fam.pain
    pain = rng.normal((lo + hi) / 2 + sev, (hi - lo) / 4 + 0.6)
    return {
        "temperature_c": temperature,
        "heart_rate": _clip_int(hr, 30, 200),
        "respiratory_rate": _clip_int(rr, 6, 50),
        "o2_saturation": _clip_int(o2, 70, 100),
        "systolic_bp": sbp_i,
        "diastolic_bp": dbp_i,
        "pain_score": _clip_int(pain, 0, 10),
    }


_ARRIVAL_P = {
    1: [0.05, 0.65, 0.03, 0.15, 0.12],
    2: [0.35, 0.45, 0.05, 0.12, 0.03],
    3: [0.65, 0.25, 0.04, 0.05, 0.01],
    4: [0.85, 0.10, 0.03, 0.02, 0.0],
    5: [0.93, 0.04, 0.03, 0.0, 0.0],
}
_DISPOSITION_P = {
    1: [0.02, 0.30, 0.60, 0.08, 0.0],
    2: [0.31, 0.50, 0.12, 0.06, 0.01],
    3: [0.65, 0.25, 0.02, 0.03, 0.05],
    4: [0.86, 0.05, 0.0, 0.01, 0.08],
    5: [0.87, 0.01, 0.0, 0.0, 0.12],
}


def _arrival(rng: Rng, acuity: int, age: int, fam: _Family) -> str:
    """Sicker, injured, older patients come by ambulance/helicopter more often."""
    p = np.array(_ARRIVAL_P[acuity], dtype=float)
    if fam.trauma and acuity <= 2:
        p[4] *= 2.5
    if age >= 75:
        p[1] *= 1.8
    p[2] += fam.police
    return _ARRIVAL[int(rng.choice(5, p=p / p.sum()))]


def _disposition(rng: Rng, acuity: int, age: int) -> str:
    """Admission rises with acuity and with age; children are admitted a bit less."""
    p = np.array(_DISPOSITION_P[acuity], dtype=float)
    if age >= 80:
        p[1] = p[1] * 2.0 + 0.04
        p[2] *= 1.3
    elif age >= 65:
        p[1] = p[1] * 1.6 + 0.02
        p[2] *= 1.2
    elif age < 18:
        p[1] *= 0.7
        p[4] *= 0.5
    return _DISPOSITION[int(rng.choice(5, p=p / p.sum()))]


def _people(rng: Rng, n: int) -> list[tuple[str, int, str, int]]:
    """Visit list (patient_id, base age, sex, visit index); ~10% of people revisit 2-4x."""
    counts: list[int] = []
    total = 0
    while total < n:
        k = 1 if rng.random() >= 0.10 else int(rng.choice([2, 3, 4], p=[0.6, 0.3, 0.1]))
        k = min(k, n - total)
        counts.append(k)
        total += k
    ids = rng.choice(1_000_000, size=len(counts), replace=False)
    visits: list[tuple[str, int, str, int]] = []
    for pid, k in zip(ids, counts, strict=True):
        age = _draw_age(rng)
        sex = _SEX[int(rng.choice(3, p=_SEX_P))]
        visits.extend((f"P{int(pid):06d}", age, sex, j) for j in range(k))
    order = rng.permutation(len(visits))
    return [visits[int(i)] for i in order]


def generate_rows(n: int, seed: int = 0) -> list[dict]:
    """Return ``n`` fictional triage records (schema key order); identical for equal seeds."""
    if n < 0:
        raise ValueError("n must be non-negative")
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    for pid, base_age, sex, visit in _people(rng, n):
        # Repeat visits fall within about a year, so age may tick up by one.
        age = min(base_age + (int(rng.integers(0, 2)) if visit else 0), 105)
        acuity = _draw_acuity(rng, age)
        row = _visit(rng, pid, age, sex, acuity, _draw_family(rng, acuity, age, sex))
        rows.append({k: row[k] for k in COLUMNS})
    return rows


def _visit(rng: Rng, pid: str, age: int, sex: str, acuity: int, fam: _Family) -> dict:
    """One visit's record (without its day) for a person of ``age`` and ``sex``."""
    complaint = _expand(fam.templates[int(rng.integers(len(fam.templates)))], rng)
    vitals = _vitals(rng, acuity, age, fam)
    return {
        "patient_id": pid,
        "age": age,
        "sex": sex,
        "arrival_mode": _arrival(rng, acuity, age, fam),
        **vitals,
        "chief_complaint": complaint,
        "disposition": _disposition(rng, acuity, age),
        "acuity": acuity,
    }


# ---------------------------------------------------------------------------
# People with visit histories (``--people``; data/ed_triage_people.schema.json).
# ---------------------------------------------------------------------------

#: the people table's columns: the visit table's plus the day each visit started
PEOPLE_COLUMNS: tuple[str, ...] = (COLUMNS[0], "visit_day", *COLUMNS[1:])
#: the study window, in days: a later visit falls outside it and is not recorded
WINDOW_DAYS = 730
#: at most this many visits of one person
MAX_VISITS = 5
#: complaint families that bring people back (chronic or relapsing conditions)
_RECURRING = {"chest_pain", "resp_distress", "diabetic", "mental_health", "overdose",
              "arrhythmia_syncope", "gi_bleed", "sepsis", "seizure"}


def _return_p(fam: _Family, disposition: str, age: int, visit: int) -> float:
    """Chance of another visit: higher after an admission or leaving unseen, for the
    recurring complaint families, for the elderly, and after each return."""
    p = 0.13 + 0.05 * (visit - 1)
    if disposition in ("admitted-ward", "admitted-icu"):
        p += 0.17
    elif disposition == "left-without-being-seen":
        p += 0.22
    if fam.name in _RECURRING:
        p += 0.15
    if age >= 75:
        p += 0.05
    return min(p, 0.7)


def _gap_days(rng: Rng, disposition: str) -> int:
    """Days until the next visit: a day or two after leaving unseen, weeks after an
    admission (readmission), months otherwise."""
    if disposition == "left-without-being-seen":
        mean = 2.0
    elif disposition in ("admitted-ward", "admitted-icu"):
        mean = 25.0
    else:
        mean = 110.0
    return int(rng.exponential(mean))


def _next_acuity(rng: Rng, prev: int, age: int) -> int:
    """A return's acuity: often the last one's or next to it, otherwise drawn afresh."""
    u = rng.random()
    if u < 0.45:
        return prev
    if u < 0.7:
        return int(min(max(prev + (1 if rng.random() < 0.5 else -1), 1), 5))
    return _draw_acuity(rng, age)


def _next_family(rng: Rng, prev: _Family, acuity: int, age: int, sex: str) -> _Family:
    """A return's complaint family: the last one's again when it fits the acuity (about
    half the time), otherwise drawn afresh."""
    if prev.weights.get(acuity, 0.0) > 0 and rng.random() < 0.55:
        return prev
    return _draw_family(rng, acuity, age, sex)


def _history(rng: Rng, pid: str) -> list[dict]:
    """One person's visits in order: sex constant, age ticking with the days, each return
    shaped by the visit before it."""
    age0, sex = _draw_age(rng), _SEX[int(rng.choice(3, p=_SEX_P))]
    first = int(rng.integers(0, WINDOW_DAYS))
    day, acuity = first, _draw_acuity(rng, age0)
    fam = _draw_family(rng, acuity, age0, sex)
    visits: list[dict] = []
    while True:
        age = min(age0 + (day - first) // 365, 105)
        row = _visit(rng, pid, age, sex, acuity, fam)
        visits.append({"visit_day": day, **row})
        if len(visits) == MAX_VISITS or rng.random() >= _return_p(fam, row["disposition"],
                                                                   age, len(visits)):
            return visits
        day += _gap_days(rng, row["disposition"])
        if day >= WINDOW_DAYS:
            return visits
        acuity = _next_acuity(rng, acuity, age)
        fam = _next_family(rng, fam, acuity, age, sex)


def generate_people(n: int, seed: int = 0) -> list[dict]:
    """About ``n`` (exactly ``n``: the last person's history is cut) fictional visits of
    people with histories (`PEOPLE_COLUMNS`), shuffled; identical for equal seeds."""
    if n < 0:
        raise ValueError("n must be non-negative")
    rng = np.random.default_rng([seed, 1])
    rows: list[dict] = []
    used: set[int] = set()
    while len(rows) < n:
        pid = int(rng.integers(0, 1_000_000))
        if pid in used:
            continue
        used.add(pid)
        rows.extend(_history(rng, f"P{pid:06d}")[: n - len(rows)])
    order = rng.permutation(len(rows))
    return [{k: rows[int(i)][k] for k in PEOPLE_COLUMNS} for i in order]


def write_rows(rows: Sequence[dict], path: str | Path) -> Path:
    """Write rows (of `generate_rows` or `generate_people`) as CSV, Parquet or JSONL,
    chosen by the file extension."""
    import polars as pl

    path = Path(path)
    # Explicit dtypes so an empty or all-integer-looking column keeps the schema's type.
    strings = {"patient_id", "sex", "arrival_mode", "chief_complaint", "disposition"}
    schema = {
        c: pl.String if c in strings else pl.Float64 if c == "temperature_c" else pl.Int64
        for c in (PEOPLE_COLUMNS if rows and "visit_day" in rows[0] else COLUMNS)
    }
    df = pl.DataFrame([{k: r[k] for k in schema} for r in rows], schema=schema, orient="row")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        df.write_csv(path)
    elif suffix in (".parquet", ".pq"):
        df.write_parquet(path)
    elif suffix in (".jsonl", ".ndjson"):
        df.write_ndjson(path)
    else:
        raise ValueError(f"unsupported extension {suffix!r}; use .csv, .parquet or .jsonl")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: write a seeded fictional triage dataset to --out."""
    parser = argparse.ArgumentParser(
        prog="python -m selpe_audit.demo.generator",
        description="Generate FICTIONAL, seeded ED-triage demo records.",
    )
    parser.add_argument("--n", type=int, default=1000, help="number of rows (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed (default 0)")
    parser.add_argument(
        "--out", required=True, help="output path: .csv, .parquet or .jsonl/.ndjson"
    )
    parser.add_argument(
        "--people", action="store_true",
        help="people with visit histories (a visit day, returns shaped by the visit before; "
             "schema data/ed_triage_people.schema.json)")
    args = parser.parse_args(argv)
    make = generate_people if args.people else generate_rows
    path = write_rows(make(args.n, seed=args.seed), args.out)
    print(f"wrote {args.n} fictional {'visits of people' if args.people else 'rows'} "
          f"(seed {args.seed}) to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
