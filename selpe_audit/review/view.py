"""What a reviewer needs to see about an artifact, before anyone trusts it.

`review` and `approve` show ``release.json`` *before* verifying it (a reviewer must be able
to look at an artifact signed by a key they do not hold yet), so this module never treats
the document as trusted: signature status is reported per key next to it, and every check
here only *flags* things - high epsilon, noisy counts dominated by noise or below the
floor, exemplar text that looks like personal data - for a human to judge. It
it also lays out what the terminal and the page share (a model-mode release's marginals).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature

from selpe_audit.artifact.canonical import canonical_bytes
from selpe_audit.artifact.document import RELEASE_FILE
from selpe_audit.artifact.guarantees import group_warning, protects
from selpe_audit.artifact.model_block import DP_VOCABULARY, CountsModel, ModelMarginal
from selpe_audit.artifact.records import Plan, parse
from selpe_audit.artifact.signing import SIGNATURES_DIR, key_id, load_public_key
from selpe_audit.artifact.view import ReleaseView, as_dict

EPSILON_HIGH = 4.0  # above this the guarantees are weak enough that a reviewer must decide
DEFAULT_FLOOR = 10  # n_min when the artifact does not state one

# Bidirectional-text controls can make a string display as something it is not.
_BIDI = {0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def display_text(value: Any) -> str:
    """``str(value)`` with control and bidi characters shown as escapes, not obeyed.

    Terminal escape sequences or right-to-left overrides in artifact text must not
    rewrite what the reviewer sees.
    """
    out = []
    for ch in str(value):
        if ch in "\n\t" or (unicodedata.category(ch) != "Cc" and ord(ch) not in _BIDI):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def fmt_value(x: Any) -> str:
    """A number as a reviewer reads it (6 significant digits); anything else as text."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


# ----- signatures ----------------------------------------------------------------------------

@dataclass(frozen=True)
class SignatureStatus:
    """One ``signatures/*.sig`` file and what the trusted keys say about it."""

    key_id: str  # from the file name
    is_release_key: bool
    status: str  # "verified", "INVALID" (a trusted key's signature fails) or "unchecked"
    verified_by: str | None = None  # id of the trusted key that verified it

    @property
    def detail(self) -> str:
        """Plain words for the status, for both the terminal and the page."""
        if self.status == "verified":
            if self.verified_by != self.key_id:
                return (f"verifies with trusted key {self.verified_by}, but the file is named "
                        "for another key, so decode will not count it")
            return "verifies with a trusted key"
        if self.status == "INVALID":
            return "does NOT verify: release.json changed after this key signed it"
        return "not checked: no trusted key with this id was given (--trust)"


def signature_statuses(artifact_dir: str | Path, trusted: list[str | Path],
                       release_key_id: str | None) -> list[SignatureStatus]:
    """Status of every signature file against every trusted public key.

    A release-key signature that is missing altogether is reported as a warning by
    `signature_warnings`, not here: this lists files that exist.
    """
    d = Path(artifact_dir)
    data = (d / RELEASE_FILE).read_bytes()
    keys = {key_id(k): k for k in (load_public_key(p) for p in trusted)}
    out = []
    for sig_path in sorted((d / SIGNATURES_DIR).glob("*.sig")):
        kid, sig = sig_path.stem, sig_path.read_bytes()
        candidates = ([kid] if kid in keys else []) + [k for k in keys if k != kid]
        status, by = ("INVALID" if kid in keys else "unchecked"), None
        for k in candidates:
            try:
                keys[k].verify(sig, data)
            except InvalidSignature:
                continue
            status, by = "verified", k
            break
        out.append(SignatureStatus(kid, kid == release_key_id, status, by))
    return out


# ----- warnings ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReviewWarning:
    """Something a reviewer must look at: which rule fired, where, and on what."""

    kind: str  # "signature", "schema", "privacy unit", "epsilon", "personal data", ...
    where: str
    reason: str


_NAME = r"[A-Z][a-z]+(?:[-'][A-Z]?[a-z]+)?"
PERSONAL_DATA_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("title and name (Mr./Mrs./Dr. Xxx)",
     re.compile(rf"\b(?:Mr|Mrs|Ms|Miss|Mx|Dr|Prof|Sr|Sra)\b\.?\s+{_NAME}")),
    ("'name: Xxx Yyy'",
     re.compile(rf"(?i:\b(?:full\s+|first\s+|last\s+|patient\s+)?name\b)\s*[:=]\s*{_NAME}"
                rf"(?:\s+{_NAME})?")),
    ("'patient Xxx Yyy' (a capitalised full name)",
     re.compile(rf"(?i:\b(?:patient|pt|client|mother|father|wife|husband|son|daughter)\b)\s+"
                rf"{_NAME}\s+{_NAME}")),
    ("email address", re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    ("date (d/m/y or y-m-d)",
     re.compile(r"\b(?:\d{1,2}([/.-])\d{1,2}\1(?:\d{4}|\d{2})|\d{4}-\d{1,2}-\d{1,2})\b")),
    ("date (month name)",
     re.compile(r"(?i:\b(?:\d{1,2}(?:st|nd|rd|th)?\s+)?(?:jan|feb|mar|apr|may|jun|jul|aug|sep"
                r"|sept|oct|nov|dec)[a-z]*\.?\s+(?:\d{1,2}(?:st|nd|rd|th)?,?\s+)?\d{4}\b)")),
    ("medical record / MRN / id number",
     re.compile(r"(?i:\b(?:mrn|medical\s+record(?:\s+(?:number|no))?|record\s+(?:number|no)"
                r"|chart\s+(?:number|no)|patient\s+id|nhs\s+(?:number|no)|ssn)\b)\.?\s*[:#]?\s*"
                r"[A-Za-z]{0,3}\d[\d-]{3,}")),
    ("id-like token (letters then 5+ digits)", re.compile(r"\b[A-Z]{1,4}-?\d{5,}\b")),
    ("national id number (ddd-dd-dddd)", re.compile(r"\b\d{3}-\d{2}-\d{4}\b")),
    ("phone number", re.compile(r"(?<![\w.])\+?\(?\d[\d\s().-]{5,}\d(?![\w.])")),
)
_MIN_PHONE_DIGITS = 7


def personal_data_hits(text: str) -> list[tuple[str, str]]:
    """(pattern name, matched text): the first match of each pattern that fires on ``text``.

    Patterns run most specific first; a match inside an earlier one (the digits of a date
    read as a phone number) is not reported twice.
    """
    hits: list[tuple[str, str]] = []
    for name, pattern in PERSONAL_DATA_PATTERNS:
        for m in pattern.finditer(text):
            found = m.group().strip()
            if name == "phone number" and sum(c.isdigit() for c in found) < _MIN_PHONE_DIGITS:
                continue
            if not any(found in earlier for _, earlier in hits):
                hits.append((name, found))
            break
    return hits


def review_warnings(doc: Mapping[str, Any] | ReleaseView) -> list[ReviewWarning]:
    """Every warning for the document, in the order the page shows its sections."""
    view = as_view(doc)
    return [*_schema_warnings(view), *_unit_warnings(view), *_epsilon_warnings(view),
            *_exemplar_warnings(view), *_phrase_warnings(view), *_count_warnings(view)]


def as_view(doc: Mapping[str, Any] | ReleaseView) -> ReleaseView:
    """The typed view of a document, read tolerantly (the review shows it before trust)."""
    return doc if isinstance(doc, ReleaseView) else ReleaseView.parse(doc)


def signature_warnings(doc: Mapping[str, Any] | ReleaseView, statuses: list[SignatureStatus],
                       release_key_id: str | None = None) -> list[ReviewWarning]:
    """A release with no signature by its release key (the one the reviewer named, else
    the one release.json names), one that fails, and a document naming another key."""
    named = as_view(doc).release_key_id
    rk = release_key_id or named
    out = []
    if release_key_id is not None and named != release_key_id:
        out.append(ReviewWarning("signature", "release_key_id",
                                 f"release.json names {named}, not the release key "
                                 f"{release_key_id} you gave: decode will refuse it"))
    if not [s for s in statuses if s.is_release_key]:
        out.append(ReviewWarning("signature", f"signatures/{rk}.sig",
                                 "no signature by the release key"))
    return out + [ReviewWarning("signature", f"signatures/{s.key_id}.sig", s.detail)
                  for s in statuses if s.status == "INVALID"]


def _schema_warnings(view: ReleaseView) -> Iterator[ReviewWarning]:
    """The stated schema hash must be the hash of the schema the document carries."""
    try:
        actual = hashlib.sha256(canonical_bytes(view.doc.get("schema"))).hexdigest()
    except ValueError:
        actual = None
    if actual != view.schema_sha256:
        yield ReviewWarning("schema", "schema_sha256",
                            "does not match the schema in release.json: decoders that check "
                            "the hash will refuse it, and the schema shown may not be the one "
                            "the release used")


def plan_summary(view: ReleaseView) -> str | None:
    """The plan in one line: the DP row count it was sized by and its noise (None: the
    artifact states no plan)."""
    plan = parse(Plan, view.budget.get("plan"))
    if plan is None:
        return None
    return (f"sized to about {plan.rows} rows (a DP count at epsilon "
            f"{fmt_value(plan.rows_epsilon)}, noise scale {fmt_value(plan.rows_scale)}); a "
            f"class x field cell was planned with noise {fmt_value(plan.cell_stddev)} and "
            f"measured when its expected count reaches {fmt_value(plan.signal_sigmas)} of "
            "that")


def plan_rows(view: ReleaseView) -> list[tuple[str, str, str]]:
    """Each choice of the release's plan: (part, choice, reason)."""
    plan = parse(Plan, view.budget.get("plan"))
    return [] if plan is None else [(c.part, c.choice, c.reason) for c in plan.choices]


def unit_rows(view: ReleaseView) -> list[tuple[str, Any]]:
    """The privacy unit as (label, value) rows, per-mechanism bounding flattened; what the
    guarantee protects is derived from the unit when an older artifact does not state it."""
    rows: list[tuple[str, Any]] = [("privacy unit: protects", protects(view.privacy_unit))]
    for k, v in view.privacy_unit.items():
        if k == "protects":
            continue
        if isinstance(v, Mapping):
            rows += [(f"privacy unit: {k} ({sub})", x) for sub, x in v.items()]
        else:
            rows.append((f"privacy unit: {k}", v))
    return rows


def _unit_warnings(view: ReleaseView) -> Iterator[ReviewWarning]:
    """Row units protect one row: a person with m rows gets only m times epsilon."""
    if view.privacy_unit.get("unit", "row") != "person":
        eps = _num(view.ledger.total_epsilon) or _num(view.budget.get("epsilon")) or 0.0
        delta = _num(view.ledger.total_delta) or 0.0
        yield ReviewWarning("privacy unit", "privacy_unit", group_warning(eps, delta))


def _epsilon_warnings(view: ReleaseView) -> Iterator[ReviewWarning]:
    for where, value in (("ledger total", view.ledger.total_epsilon),
                         ("budget", view.budget.get("epsilon"))):
        eps = _num(value)
        if eps is not None and eps > EPSILON_HIGH:
            yield ReviewWarning("epsilon", where,
                                f"epsilon {eps:g} is above {EPSILON_HIGH:g}: the membership "
                                "and reconstruction bounds are close to vacuous")


def positive_number(x: Any) -> bool:
    v = _num(x)
    return v is not None and v > 0


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def count_floor(view: ReleaseView) -> int:
    """The floor n_min under which a noisy count is flagged (budget.counts.n_min)."""
    return view.count_floor(DEFAULT_FLOOR)


def flag_limits(view: ReleaseView, mechanism_id: str | None,
                scale: float | None = None) -> tuple[int, float | None]:
    """The floor and the noise scale a chart flags its counts against: ``scale`` (a
    marginal's stddev) when given, else the ledger's noise scale of ``mechanism_id``."""
    if scale is None and mechanism_id:
        scale = view.ledger.scales().get(mechanism_id)
    return count_floor(view), scale


def count_flag(value: Any, floor: int, scale: float | None) -> str | None:
    """Why one noisy count needs a second look, or None."""
    v = _num(value)
    if v is None:
        return None
    if v < 0:
        return "negative"
    if v < floor:
        return f"under the floor n_min = {floor}"
    if scale is not None and v <= scale:
        return f"within one noise scale ({scale:.3g}) of zero"
    return None


def _count_warnings(view: ReleaseView) -> Iterator[ReviewWarning]:
    floor, scales = count_floor(view), view.ledger.scales()
    for series in view.counts.series():
        scale = series.stddev if positive_number(series.stddev) else (
            scales.get(series.mechanism_id) if series.mechanism_id else None)
        flagged = [(k, v, f) for k, v in series.cells if (f := count_flag(v, floor, scale))]
        if flagged:
            yield ReviewWarning("small counts", series.where,
                                f"{len(flagged)} of {len(series.cells)} noisy counts need a "
                                "second look (noise dominates them): "
                                + "; ".join(f"{k} = {v} ({f})" for k, v, f in flagged))


def _exemplar_warnings(view: ReleaseView) -> Iterator[ReviewWarning]:
    if view.selection is None:
        return
    id_field = view.schema_json.get("x-id")
    for ex in view.selection.exemplars():
        where = f"round {ex.round}, class {ex.class_value}, {ex.role} {ex.index + 1}"
        if isinstance(id_field, str) and id_field in ex.record:
            yield ReviewWarning("personal data", f"{where}, field {id_field}",
                                f"carries the person-id field '{id_field}', which is never "
                                "released")
        for path, text in _strings(ex.record):
            for pattern, match in personal_data_hits(text):
                yield ReviewWarning("personal data", f"{where}, field {path}",
                                    f"looks like a {pattern}: '{match}'")


#: a released phrase holding a number this long may be an id, a date or a phone number
_LONG_NUMBER = re.compile(r"\d{4,}")


def _phrase_warnings(view: ReleaseView) -> Iterator[ReviewWarning]:
    """Released phrases and keywords (lower-cased, so the name patterns rarely fire) that
    look like personal data: the reviewer rejects them with a denylist and re-runs."""
    for name, tp in view.counts.topics.items():
        if tp.source != DP_VOCABULARY:
            continue
        for j, a in enumerate(tp.released):
            text = str(a.text)
            where = f"counts.topics.{name}, {tp.kind or 'phrase'} {j}"
            for pattern, match in personal_data_hits(text):
                yield ReviewWarning("personal data", where, f"looks like a {pattern}: '{match}'")
            if (m := _LONG_NUMBER.search(text)) is not None:
                yield ReviewWarning("personal data", where,
                                    f"holds a number that could be an id: '{m.group()}'")


def record_layout(view: ReleaseView, rec: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """A record's keys split into free text (shown large) and the rest, in schema order."""
    props = as_dict(view.schema_json.get("properties"))
    order = view.field_order
    keys = [k for k in order if k in rec] + sorted(k for k in rec if k not in order)

    def is_text(k: str) -> bool:
        p = as_dict(props.get(k))
        if p:
            return p.get("type") == "string" and "enum" not in p
        return isinstance(rec[k], str) and len(rec[k]) > 30

    texts = [k for k in keys if is_text(k)]
    return texts, [k for k in keys if k not in texts]


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string inside a record, field names included, with its path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            yield sub, str(k)
            yield from _strings(v, sub)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


# ----- the counts model (model modes) --------------------------------------------------------

NULL_CELL = "(null cell: no row)"  # OpenDP's extra cell per key set: released, reached by no row
FLAT_CELLS_SHOWN = 200  # the terminal lists at most this many cells of a marginal without class


def shown_extra(view: ReleaseView) -> dict[str, Any]:
    """``counts.extra`` less the blocks the review shows typed (mode, its description, model,
    topics), so each
    released number is shown once; a marginals-mode artifact keeps its extra as it was."""
    typed = {"mode", "mode_description", "model"} if view.counts.model is not None else set()
    if view.counts.topics:
        typed.add("topics")
    return {k: v for k, v in view.counts.extra.items() if k not in typed}


def class_column(model: CountsModel) -> str | None:
    """The name of the model's class column (None in a malformed model)."""
    return next((c.name for c in model.columns if c.kind == "class" and isinstance(c.name, str)),
                None)


def marginal_cells(model: CountsModel,
                   m: ModelMarginal) -> list[tuple[tuple[str, ...], Any]] | None:
    """Every noisy count of a marginal with its cell's keys, null cells labelled; the order
    is the document's (row-major: the clique's last column varies fastest). None when the
    clique names an unknown column or the counts do not fill its cells (then shown raw)."""
    labels = []
    for name in m.clique:
        col = model.column(name) if isinstance(name, str) else None
        if col is None:
            return None
        labels.append([str(k) for k in col.keys] + [NULL_CELL])
    keys = list(itertools.product(*labels))
    return list(zip(keys, m.values, strict=True)) if len(keys) == len(m.values) else None


def class_grid(model: CountsModel,
               m: ModelMarginal) -> tuple[list[str], list[tuple[str, list[Any]]]] | None:
    """A 1-way marginal, or a 2-way one with the class column, as (row keys, one column of
    counts per class): the shape of the class-conditional histograms. None otherwise."""
    cells, cls = marginal_cells(model, m), class_column(model)
    if cells is None or len(m.clique) > 2 or (len(m.clique) == 2 and cls not in m.clique):
        return None
    if m.clique == (cls,):
        return ["noisy count"], [(f"{cls} {k[0]}", [v]) for k, v in cells]
    if len(m.clique) == 1:
        return [k[0] for k, _ in cells], [("noisy count", [v for _, v in cells])]
    c = m.clique.index(cls)
    columns: dict[str, list[Any]] = {}
    for k, v in cells:  # row-major either way: each class's counts stay in key order
        columns.setdefault(f"{cls} {k[c]}", []).append(v)
    return list(dict.fromkeys(k[1 - c] for k, _ in cells)), list(columns.items())


def model_summary(view: ReleaseView, model: CountsModel) -> list[tuple[str, Any]]:
    """The counts model's header as (label, value) pairs, for one line or one small table."""
    return [("counts mode", view.counts.mode),
            *([("made by", view.counts.description["review"])]
              if isinstance(view.counts.description.get("review"), str) else []),
            ("algorithm", model.algorithm),
            ("measure", f"{fmt_value(model.measure)} (rho-zCDP)"), ("rho", model.rho),
            ("total (noisy total rows)", model.total), ("estimator", model.estimator)]


def cell_rows(model: CountsModel,
              m: ModelMarginal) -> tuple[list[str], list[tuple[tuple[str, ...], Any]]]:
    """A marginal as flat rows: (headers, cells), its clique's keys per cell; a malformed
    one's counts keyed by their position, so every count is still shown."""
    cells = marginal_cells(model, m)
    if cells is None:
        return ["cell"], [((str(i),), v) for i, v in enumerate(m.values)]
    return [str(c) for c in m.clique], cells


def marginal_title(m: ModelMarginal) -> str:
    """``marginal (y, u) · noise stddev 4.76 · 12 cells``."""
    return (f"marginal ({', '.join(str(c) for c in m.clique)}) · noise stddev "
            f"{fmt_value(m.stddev)} · {len(m.values)} cells")


def noise_scale(stddev: Any) -> float | None:
    """A marginal's stddev as the scale its counts are flagged against (None if odd)."""
    return float(stddev) if positive_number(stddev) else None
