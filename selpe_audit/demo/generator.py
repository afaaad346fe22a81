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

Generation is fully determined by ``seed`` via ``numpy.random.default_rng``: the
same ``(n, seed)`` always gives identical rows. Seeding is right here because this
is demo *data*, not differential-privacy noise.

Command line::

    python -m selpe_audit.demo.generator --n 1000 --seed 0 --out rows.csv

Long on purpose (over 900 lines): most of it is the word lists and probability tables
that make the fictional records varied; the code itself is short.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["COLUMNS", "generate_rows", "main", "write_rows"]

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


def _n(lo: int, hi: int, step: int = 1) -> Callable[[Rng], str]:
    """Return a slot that draws an integer in [lo, hi] (step-aligned) as text."""
    return lambda rng: str(lo + step * int(rng.integers(0, (hi - lo) // step + 1)))


# Hand-laid-out tables; keep the formatter from exploding them.
# fmt: off
_SLOTS: dict[str, Slot] = {
    # durations / timing
    "dur_short": [
        "for {mins} minutes", "for {hrs} hours", "x{hrs} hours", "since waking",
        "since this morning", "over the last hour", "for the past {mins} minutes",
        "for about {hrs} hours", "since this afternoon", "starting {mins} minutes ago",
    ],
    "dur_long": [
        "for {days} days", "x{days} days", "for {weeks} weeks", "since yesterday",
        "over the past week", "on and off for a month", "for {days} days, getting worse",
        "since last night", "x{weeks} weeks", "for several days",
    ],
    "ago": ["{mins} minutes ago", "{hrs} hours ago", "about an hour ago", "this morning"],
    "mins": _n(10, 55, 5),
    "hrs": _n(2, 12),
    "days": _n(2, 9),
    "weeks": _n(2, 5),
    "count": _n(2, 6),
    "side": ["left", "right"],
    # cardiac
    "chest_q": [
        "crushing", "central", "pressure-like", "tight", "heavy", "squeezing", "left-sided",
        "retrosternal", "burning central", "sharp",
    ],
    "radiation": [
        "radiating to left arm", "radiating to jaw", "radiating to both arms",
        "radiating through to back", "radiating to neck and jaw", "radiating to left shoulder",
    ],
    "cardiac_assoc": [
        "sweating", "nausea", "shortness of breath", "lightheadedness", "palpitations",
        "sweating and nausea", "vomiting", "a feeling of impending doom",
    ],
    # neuro
    "deficit": [
        "weakness", "numbness", "weakness and numbness", "arm and leg weakness", "arm weakness",
        "face and arm numbness",
    ],
    "deficit2": [
        "slurred speech", "word-finding difficulty", "sudden confusion",
        "vision loss in {side} eye", "loss of balance", "double vision", "facial droop",
    ],
    "seizure_mod": [
        "not back to baseline", "known epilepsy", "first ever seizure",
        "bit tongue and incontinent", "still drowsy", "after missing medication",
        "with head injury during fall", "while febrile",
    ],
    # infection / sepsis
    "sepsis_feat": [
        "confusion", "low blood pressure", "mottled skin", "reduced urine output", "shaking chills",
        "rapid breathing", "drowsiness", "not eating or drinking", "extreme weakness",
    ],
    "recent": [
        "urinary infection", "chemotherapy", "abdominal surgery", "dental abscess",
        "wound infection", "catheter change", "hip replacement", "chest infection",
    ],
    "home_temp": lambda rng: f"{int(rng.integers(385, 406)) / 10:.1f}",
    # respiratory
    "resp_mod": [
        "unable to speak full sentences", "worse lying flat", "with wheeze", "with blue lips",
        "with chest tightness", "not relieved by inhaler", "at rest", "with frothy sputum",
    ],
    "resp_cond": ["asthma", "COPD", "bronchiectasis", "heart failure", "cystic fibrosis"],
    "inhaler": [
        "inhaler not helping", "used inhaler {count} times", "no relief from nebulizer",
        "ran out of inhaler",
    ],
    "cough": [
        "productive cough", "dry cough", "cough with green sputum", "barking cough",
        "cough and chest pain on breathing", "cough with blood-streaked sputum",
    ],
    "resp_mild": [
        "mild shortness of breath", "wheeze", "chest tightness", "body aches", "sore throat",
        "runny nose",
    ],
    # trauma
    "mvc_role": [
        "driver", "restrained passenger", "unrestrained passenger", "motorcyclist", "cyclist",
        "rear seat passenger",
    ],
    "injury": [
        "{side} chest pain", "neck pain and {side} leg deformity",
        "head injury with brief loss of consciousness", "abdominal pain and bruising",
        "{side} hip pain, unable to weight bear", "pelvic pain", "open fracture {side} lower leg",
        "back pain and leg tingling", "{side} shoulder deformity", "facial injuries",
    ],
    "height": [
        "ladder", "roof", "scaffolding", "{count} meters", "top of stairs", "balcony", "horse",
        "loft hatch",
    ],
    "vehicle": ["car", "van", "bus", "bicycle", "motorbike"],
    "sport": [
        "football", "rugby", "basketball", "netball", "skiing", "hockey", "trampolining", "cycling",
        "climbing", "running", "tennis", "volleyball",
    ],
    "limb": ["{side} hand", "{side} foot", "{side} forearm", "{side} lower leg"],
    # allergy
    "swelling": [
        "lip swelling", "facial swelling", "tongue swelling", "widespread hives",
        "eye and lip swelling",
    ],
    "airway": ["throat tightness", "difficulty swallowing", "hoarse voice", "wheeze", "stridor"],
    "allergen": [
        "eating peanuts", "a bee sting", "eating shellfish", "a new antibiotic", "eating tree nuts",
        "a wasp sting", "eating sesame", "taking ibuprofen", "a contrast injection",
    ],
    # GI
    "blood_vom": ["bright red blood", "blood", "coffee-ground material", "large clots"],
    "weak": ["dizziness", "feeling faint", "weakness", "collapse at home", "palpitations"],
    "abdo_q": ["sharp", "cramping", "constant", "colicky", "severe", "dull", "stabbing"],
    "abdo_site": [
        "right lower", "left lower", "upper", "central", "right upper", "generalized", "lower",
    ],
    "abdo_assoc": [
        ", vomiting", " with fever", " and diarrhea", " with nausea", "", " worse after eating",
        " and not passing wind", " radiating to back", " and bloating",
    ],
    "dehyd": [
        "dizzy on standing", "unable to keep fluids down", "passing little urine", "very thirsty",
        "weak and tired",
    ],
    # overdose / mental health
    "od_state": ["unresponsive", "drowsy", "agitated", "confused", "vomiting and drowsy"],
    "substance": [
        "opioid", "paracetamol", "benzodiazepine", "alcohol and sleeping tablet", "antidepressant",
        "unknown substance", "stimulant",
    ],
    "mh": [
        "anxiety and panic attack {dur_short}", "low mood with thoughts of self-harm",
        "agitation and paranoid thoughts", "hearing voices {dur_long}",
        "acute distress after argument, wants to talk to someone",
        "not sleeping and racing thoughts {dur_long}", "alcohol withdrawal, shaking and sweating",
    ],
    # cardiac rhythm / syncope
    "palp_assoc": [
        "chest discomfort", "dizziness", "shortness of breath", "near fainting", "fatigue",
    ],
    "activity": [
        "standing in a queue", "getting out of bed", "walking upstairs", "exercising",
        "using the toilet", "at a meal",
    ],
    "post": ["now feels fine", "still lightheaded", "pale and sweaty", "bruised forehead"],
    # head / headache
    "headache_q": [
        "worst ever", "thunderclap", "throbbing", "one-sided", "pressure", "migraine-type",
        "band-like", "persistent",
    ],
    "headache_assoc": [
        "", " with vomiting", " with neck stiffness", " with light sensitivity",
        " and blurred vision", " after starting new medication",
    ],
    "mechanism": [
        "tripped on stairs", "slipped on ice", "hit head on cupboard door", "fell off bicycle",
        "collided with another player", "fell from standing",
    ],
    "head_mod": [
        "no loss of consciousness", "vomited once", "feels dazed", "small scalp wound",
        "headache since", "on blood thinners",
    ],
    # urinary / flank
    "uti_assoc": ["frequency", "lower abdominal pain", "blood in urine", "fever", "back pain"],
    # skin / soft tissue
    "limb_part": [
        "wrist", "ankle", "forearm", "elbow", "knee", "shoulder", "collarbone", "finger", "toe",
        "shin",
    ],
    "low_height": ["standing", "a chair", "a step", "a wall", "playground equipment", "a bed"],
    "mechanism2": [
        "fall onto outstretched hand", "sports tackle", "falling off a scooter",
        "slipping in the shower", "a trampoline accident", "a skateboarding fall",
    ],
    "cut_kind": ["laceration", "deep cut", "gaping wound", "cut", "flap wound"],
    "body_small": [
        "thumb", "index finger", "palm", "forearm", "shin", "eyebrow", "chin", "scalp", "knee",
        "foot",
    ],
    "object": [
        "kitchen knife", "broken glass", "tin can", "garden tool", "sheet metal",
        "a fall onto gravel", "a dog bite",
    ],
    "joint": ["ankle", "knee", "wrist", "thumb", "foot", "shoulder"],
    "activity2": [
        "playing {sport}", "stepping off a curb", "on uneven ground", "at the gym",
        "running for a bus", "while dancing", "coming down stairs",
    ],
    "rash_kind": ["itchy", "red", "blistering", "raised", "scaly", "spotty", "patchy"],
    "skin_site": [
        "arms", "legs", "trunk", "face", "hands", "back", "neck", "scalp", "feet", "{side} forearm",
        "{side} calf",
    ],
    "rash_mod": [
        "", ", no fever", " after new soap", " after hiking", ", spreading",
        " after new medication",
    ],
    "med": [
        "blood pressure tablets", "inhaler", "insulin", "thyroid medication", "cholesterol tablets",
        "antidepressant", "epilepsy medication", "blood thinner", "pain relief", "eye drops",
        "diabetes tablets", "contraceptive pill",
    ],
    "st_mod": ["", " and fever", ", painful swallowing", " and swollen glands", ", hoarse voice"],
    "eye_sym": ["discharge", "itching", "gritty feeling", "watering", "mild blurred vision"],
    "eye_cause": ["grinding metal", "gardening", "a windy day", "wearing contact lenses"],
    "jaw": ["upper jaw", "lower jaw", "back tooth", "front tooth"],
    "dental_mod": [
        "facial swelling", "broken tooth", "bleeding after extraction", "unable to sleep",
    ],
    "bite_mod": [
        "red and itchy", "swollen", "mild spreading redness", "painful", "blistered",
    ],
    "wound": [
        "a surgical wound", "a leg ulcer", "a burn on {side} hand", "a graze on {side} knee",
        "an old cut on {side} hand",
    ],
    "dm_sym": ["thirst and frequent urination", "vomiting", "drowsiness", "abdominal pain"],
    "hypo_sym": ["sweaty and confused", "shaky", "found drowsy", "slurring words"],
    "peds": [
        "fever and poor feeding {dur_long}", "barking cough and noisy breathing at night",
        "fever and rash that does not fade", "fever and ear pulling {dur_long}",
        "vomiting and fewer wet nappies", "swallowed a small battery",
        "crying inconsolably {dur_short}", "fever and febrile seizure at home",
        "rash and fever after nursery", "wheezy and breathing fast {dur_long}", "swallowed a coin",
        "limping on {side} leg {dur_long}",
    ],
    "preg_weeks": _n(6, 38),
    "msk_site": ["{side} shoulder", "{side} knee", "neck", "{side} hip", "{side} elbow"],
}
# fmt: on


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


# Hand-laid-out tables; keep the formatter from exploding them.
# fmt: off
_FAMILIES: tuple[_Family, ...] = (
    _Family(
        "chest_pain", {1: 3, 2: 8, 3: 3, 4: 0.5},
        (
            "{chest_q} chest pain {radiation} {dur_short}",
            "{chest_q} chest pain with {cardiac_assoc} {dur_short}",
            "chest pain and {cardiac_assoc}, onset {ago}",
            "{chest_q} chest pain {radiation}, with {cardiac_assoc}",
            "chest tightness on exertion, now at rest, {dur_short}",
        ),
        pain=(5, 9), shock_p=0.2, htn_p=0.3, hr=10, min_age=25,
    ),
    _Family(
        "stroke", {1: 3, 2: 6, 3: 1},
        (
            "sudden {side}-sided {deficit} {dur_short}",
            "{deficit2} and {side}-sided {deficit}, last seen well {ago}",
            "{deficit2} noticed by family {dur_short}",
            "sudden {deficit2} and {deficit}, onset {ago}",
        ),
        pain=(0, 3), htn_p=0.6, min_age=35,
    ),
    _Family(
        "sepsis", {1: 3, 2: 5, 3: 2},
        (
            "fever and {sepsis_feat} {dur_long}",
            "fever, rigors and {sepsis_feat}",
            "{sepsis_feat} with fever after recent {recent}",
            "generally unwell, {sepsis_feat}, temperature {home_temp} at home",
            "fever and {sepsis_feat} after {recent}, {dur_long}",
        ),
        pain=(2, 6), fever_p=0.85, shock_p=0.5, hr=15, rr=6, o2=3,
    ),
    _Family(
        "resp_distress", {1: 3, 2: 6, 3: 4},
        (
            "severe shortness of breath {resp_mod} {dur_short}",
            "{resp_cond} exacerbation, {resp_mod}",
            "wheezing and shortness of breath, {inhaler}",
            "difficulty breathing {resp_mod}, {dur_long}",
            "{resp_cond} flare, {inhaler}, {dur_long}",
        ),
        pain=(0, 4), fever_p=0.2, hr=10, rr=10, o2=8,
    ),
    _Family(
        "major_trauma", {1: 4, 2: 5, 3: 2},
        (
            "motor vehicle collision, {mvc_role}, {injury}",
            "fall from {height}, {injury}",
            "pedestrian struck by {vehicle}, {injury}",
            "{sport} collision, {injury}",
            "crush injury to {limb} at work",
            "thrown from {vehicle}, {injury}",
        ),
        pain=(6, 10), shock_p=0.35, hr=10, rr=4, min_age=2, trauma=True,
    ),
    _Family(
        "anaphylaxis", {1: 2, 2: 4, 3: 1},
        (
            "{swelling} and {airway} after {allergen}",
            "hives and {airway} {dur_short} after {allergen}",
            "{swelling} after {allergen}, {dur_short}",
        ),
        pain=(1, 4), shock_p=0.5, hr=15, rr=6, o2=4,
    ),
    _Family(
        "gi_bleed", {1: 1, 2: 4, 3: 2},
        (
            "vomiting {blood_vom} {dur_short}",
            "black tarry stools and {weak} {dur_long}",
            "passing fresh blood rectally with {weak}",
            "vomiting {blood_vom} and {weak}",
        ),
        pain=(2, 6), shock_p=0.5, hr=15, min_age=18,
    ),
    _Family(
        "overdose", {1: 2, 2: 4, 3: 2},
        (
            "{od_state} after suspected {substance} overdose",
            "found {od_state} with empty pill packets nearby",
            "{od_state} after taking {count} times usual dose of {substance}",
            "intentional {substance} ingestion {ago}, {od_state}",
        ),
        pain=(0, 2), hr=5, rr=-4, o2=4, min_age=13, police=0.2,
    ),
    _Family(
        "seizure", {1: 1, 2: 3, 3: 2},
        (
            "seizure lasting {mins} minutes, {seizure_mod}",
            "seizure at home, {seizure_mod}",
            "cluster of {count} seizures {dur_long}, {seizure_mod}",
        ),
        pain=(0, 3), hr=8,
    ),
    _Family(
        "pregnancy", {2: 3, 3: 3, 4: 1},
        (
            "vaginal bleeding at {preg_weeks} weeks pregnant with abdominal pain",
            "severe headache and swelling at {preg_weeks} weeks pregnant",
            "reduced fetal movements at {preg_weeks} weeks",
            "abdominal cramps and spotting, {preg_weeks} weeks pregnant",
        ),
        pain=(2, 7), htn_p=0.3, min_age=16, max_age=45, female_only=True,
    ),
    _Family(
        "arrhythmia_syncope", {1: 1, 2: 4, 3: 4, 4: 1},
        (
            "palpitations and {palp_assoc} {dur_short}",
            "racing heartbeat {dur_short}, {palp_assoc}",
            "fainted while {activity}, {post}",
            "collapse while {activity}, {post}",
            "irregular heartbeat and {palp_assoc} {dur_long}",
        ),
        pain=(0, 3), shock_p=0.25, hr=25, min_age=12,
    ),
    _Family(
        "vascular", {1: 1, 2: 2},
        (
            "sudden tearing pain in back {dur_short}",
            "sudden severe abdominal pain radiating to back, {weak}",
            "cold painful {side} leg {dur_short}",
        ),
        pain=(7, 10), shock_p=0.4, htn_p=0.3, hr=10, min_age=50,
    ),
    _Family(
        "abdominal_pain", {2: 2, 3: 10, 4: 2},
        (
            "{abdo_q} {abdo_site} abdominal pain {dur_long}{abdo_assoc}",
            "{abdo_q} {abdo_site} abdominal pain {dur_short}{abdo_assoc}",
            "{abdo_site} abdominal pain and vomiting {dur_long}",
        ),
        pain=(4, 8), fever_p=0.15, hr=8, min_age=3,
    ),
    _Family(
        "febrile_cough", {2: 1, 3: 6, 4: 4},
        (
            "fever and {cough} x{days} days",
            "{cough} and {resp_mild} {dur_long}",
            "fever, {cough} and {resp_mild}",
            "{cough} {dur_long}, not improving with antibiotics",
        ),
        pain=(1, 4), fever_p=0.6, rr=4, o2=3,
    ),
    _Family(
        "headache", {2: 1, 3: 5, 4: 3, 5: 0.5},
        (
            "{headache_q} headache {dur_short}{headache_assoc}",
            "{headache_q} headache {dur_long}{headache_assoc}",
        ),
        pain=(4, 9), htn_p=0.2, min_age=6,
    ),
    _Family(
        "urinary", {3: 5, 4: 3, 5: 1},
        (
            "{side} flank pain radiating to groin {dur_short}",
            "burning on urination and {uti_assoc} x{days} days",
            "unable to pass urine {dur_short}",
            "{side} flank pain with {uti_assoc} {dur_long}",
        ),
        pain=(3, 9), fever_p=0.2, min_age=4,
    ),
    _Family(
        "gastroenteritis", {3: 5, 4: 4, 5: 1},
        (
            "vomiting and diarrhea x{days} days, {dehyd}",
            "unable to keep fluids down {dur_long}",
            "diarrhea {dur_long}, {dehyd}",
            "vomiting since last night, {dehyd}",
        ),
        pain=(2, 5), fever_p=0.25, hr=10,
    ),
    _Family(
        "head_injury", {2: 1, 3: 4, 4: 3},
        (
            "{mechanism}, hit head, {head_mod}",
            "head injury after {mechanism2}, {head_mod}",
        ),
        pain=(2, 6), trauma=True,
    ),
    _Family(
        "fracture", {3: 5, 4: 5},
        (
            "fall from {low_height}, {side} {limb_part} pain and swelling",
            "{side} {limb_part} deformity after {mechanism2}",
            "{side} {limb_part} pain after {mechanism2}, unable to move it",
            "fall from {height}, {side} {limb_part} pain",
        ),
        pain=(5, 8), trauma=True,
    ),
    _Family(
        "back_pain", {2: 0.5, 3: 3, 4: 5, 5: 1},
        (
            "lower back pain after lifting {dur_long}",
            "back pain with leg numbness {dur_long}",
            "upper back pain {dur_short}",
            "lower back pain radiating down {side} leg {dur_long}",
        ),
        pain=(4, 8), min_age=16,
    ),
    _Family(
        "dizziness", {2: 1, 3: 4, 4: 2},
        (
            "dizziness and unsteadiness {dur_short}",
            "room spinning {dur_long}, worse on moving head",
            "lightheaded and {weak} {dur_long}",
        ),
        pain=(0, 3), min_age=10,
    ),
    _Family(
        "mental_health", {2: 2, 3: 4, 4: 2},
        ("{mh}", "{mh}, brought in by friend", "{mh}, brought in by family"), pain=(0, 2), hr=8,
        min_age=12, police=0.25,
    ),
    _Family(
        "diabetic", {2: 2, 3: 3, 4: 2},
        (
            "high blood sugar reading and {dm_sym}",
            "low blood sugar, {hypo_sym}",
            "known diabetic, {hypo_sym}",
        ),
        pain=(0, 3), hr=8, rr=4, min_age=5,
    ),
    _Family(
        "cellulitis", {3: 3, 4: 4, 5: 1},
        (
            "red, hot, swollen {limb} {dur_long}",
            "spreading redness around {wound}",
            "swollen painful {side} calf {dur_long}",
        ),
        pain=(3, 6), fever_p=0.3,
    ),
    _Family(
        "laceration", {3: 3, 4: 6, 5: 2},
        (
            "{cut_kind} to {side} {body_small} from {object}",
            "{cut_kind} to {body_small} from {object}, bleeding controlled",
        ),
        pain=(2, 6), trauma=True,
    ),
    _Family(
        "sprain", {4: 8, 5: 4},
        (
            "twisted {side} {joint} {activity2}",
            "{side} {joint} pain after {sport}, able to weight bear",
            "{side} {joint} swelling after {activity2}",
            "rolled {side} ankle {activity2}",
        ),
        pain=(3, 6), min_age=5,
    ),
    _Family(
        "rash", {4: 3, 5: 6},
        (
            "{rash_kind} rash on {skin_site} {dur_long}{rash_mod}",
            "{rash_kind} rash {dur_long}{rash_mod}",
        ),
        pain=(0, 2),
    ),
    _Family(
        "med_refill", {4: 1, 5: 6},
        (
            "medication refill for {med}",
            "ran out of {med} {dur_long}",
            "needs repeat prescription of {med}",
            "lost {med}, requesting supply",
        ),
        pain=(0, 1), min_age=18,
    ),
    _Family(
        "urti", {4: 5, 5: 5},
        (
            "sore throat x{days} days{st_mod}",
            "runny nose and cough {dur_long}",
            "blocked nose and sinus pain x{days} days",
            "sore throat {dur_long}{st_mod}",
        ),
        pain=(1, 4), fever_p=0.2,
    ),
    _Family(
        "ear_eye", {4: 4, 5: 3},
        (
            "{side} earache {dur_long}",
            "{side} eye redness and {eye_sym}",
            "foreign body sensation in {side} eye after {eye_cause}",
            "{side} ear discharge and {eye_sym}",
        ),
        pain=(1, 5),
    ),
    _Family(
        "dental", {4: 2, 5: 3},
        ("toothache {side} {jaw} {dur_long}", "dental pain and {dental_mod}"), pain=(3, 7),
        min_age=4,
    ),
    _Family(
        "minor_wound", {4: 2, 5: 4},
        (
            "insect bite on {skin_site}, {bite_mod}",
            "wound check for {wound}",
            "dressing change for {wound}",
            "splinter in {side} {body_small}",
        ),
        pain=(0, 3),
    ),
    _Family(
        "msk_minor", {4: 3, 5: 3},
        (
            "{msk_site} pain {dur_long}, no injury",
            "neck stiffness after sleeping awkwardly",
            "{msk_site} pain after {sport} {dur_long}",
        ),
        pain=(2, 5), min_age=10,
    ),
    _Family(
        "paediatric", {2: 2, 3: 4, 4: 4, 5: 1}, ("{peds}",), pain=(1, 4), fever_p=0.5, max_age=10,
    ),
)
# fmt: on


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
        fam = _draw_family(rng, acuity, age, sex)
        complaint = _expand(fam.templates[int(rng.integers(len(fam.templates)))], rng)
        vitals = _vitals(rng, acuity, age, fam)
        row = {
            "patient_id": pid,
            "age": age,
            "sex": sex,
            "arrival_mode": _arrival(rng, acuity, age, fam),
            **vitals,
            "chief_complaint": complaint,
            "disposition": _disposition(rng, acuity, age),
            "acuity": acuity,
        }
        rows.append({k: row[k] for k in COLUMNS})
    return rows


def write_rows(rows: Sequence[dict], path: str | Path) -> Path:
    """Write rows as CSV, Parquet or JSONL, chosen by the file extension."""
    import polars as pl

    path = Path(path)
    # Explicit dtypes so an empty or all-integer-looking column keeps the schema's type.
    strings = {"patient_id", "sex", "arrival_mode", "chief_complaint", "disposition"}
    schema = {
        c: pl.String if c in strings else pl.Float64 if c == "temperature_c" else pl.Int64
        for c in COLUMNS
    }
    df = pl.DataFrame([{k: r[k] for k in COLUMNS} for r in rows], schema=schema, orient="row")
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
    args = parser.parse_args(argv)
    path = write_rows(generate_rows(args.n, seed=args.seed), args.out)
    print(f"wrote {args.n} fictional rows (seed {args.seed}) to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
