"""The read-only view of a ``release.json``: parsed once, read by review, decode, audits.

Its blocks are the artifact's records (`selpe_audit.artifact.records`, `model_block`): the
same classes the release wrote them from and the JSON Schema is generated from. Two kinds of
reader share the view. The review shows a document *before* anyone trusts it (after the
schema check), so `ReleaseView.parse` never raises: a part that is not its record reads as
empty, and blocks a later format adds stay in ``Counts.extra``. Decode and the audits read
a verified document and need it well formed: `ReleaseView.checked` (what
`VerifiedRelease.view` returns) reads every part strictly and checks it against the
embedded schema - class balance, histogram keys, integer counts, cohort rules, exemplars -
and refuses with a one-line `UserError`. Nothing in the document is executed; every value
here is a DP output or post-processing of one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from selpe_audit.artifact.counts_modes import describe_counts
from selpe_audit.artifact.model_block import (
    CountsModel,
    Topics,
    check_model,
    check_topics,
    parse_model,
    parse_topics,
    positive,
)
from selpe_audit.artifact.persons_block import PersonsBlock
from selpe_audit.artifact.records import (
    NO_BALANCE,
    NO_GUARANTEES,
    NO_LEDGER,
    ClassBalance,
    Cohorts,
    Guarantees,
    Histogram,
    Ledger,
    Rate,
    SelectionRound,
    adapter,
    parse,
)
from selpe_audit.errors import UserError
from selpe_audit.schema import CohortRule, Schema, parse_schema

# "mode", "model" and "topics" are typed below and also stay in ``Counts.extra``, so that the
# review, which shows extra blocks as they are, keeps showing every released number.
KNOWN_COUNTS = frozenset({"class_balance", "histograms", "cohorts", "rates", "signed"})


def as_dict(x: Any) -> dict[str, Any]:
    """``x`` if it is a JSON object, else an empty one (tolerant reading)."""
    return x if isinstance(x, dict) else {}


def as_list(x: Any) -> list[Any]:
    """``x`` if it is a JSON array, else an empty one (tolerant reading)."""
    return x if isinstance(x, list) else []


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


# ----- counts ----------------------------------------------------------------------------

@dataclass(frozen=True)
class CountSeries:
    """One run of released noisy counts as a reviewer reads them: where, and which cells."""

    where: str
    mechanism_id: str | None
    cells: tuple[tuple[str, Any], ...]  # (cell label, noisy count)
    stddev: Any = None  # model modes: a cell's standard deviation (else the ledger's scale)


@dataclass(frozen=True)
class Counts:
    """The ``counts`` block as its records (`selpe_audit.artifact.records`), plus the blocks
    this version does not know (``extra``, shown as they are)."""

    signed: Any
    class_balance: ClassBalance
    histograms: Mapping[str, Histogram]  # in the document's order
    cohorts: Cohorts | None
    rates: tuple[Rate, ...]
    extra: Mapping[str, Any]  # blocks this version does not know, shown as they are
    mode: Any = None  # the counts mode's name ("marginals" when absent)
    model: CountsModel | None = None  # model modes: every noisy marginal, to refit the model
    topics: Mapping[str, Topics] = field(default_factory=dict)  # free-text topic codebooks
    #: a checked view's rule per cohort (None: the catch-all)
    cohort_rules: tuple[CohortRule | None, ...] = ()

    def cohort_of(self, record: Mapping[str, Any]) -> int:
        """The cohort that holds ``record``: the first rule it meets, else the catch-all
        (a checked view's cohorts only)."""
        if self.cohorts is None or len(self.cohort_rules) != len(self.cohorts.cohorts):
            raise RuntimeError("cohort_of needs a checked view with released cohorts")
        for i, rule in enumerate(self.cohort_rules):
            if rule is not None and rule.contains(record):
                return i
        return self.cohort_rules.index(None)

    @property
    def description(self) -> dict[str, Any]:
        """What the release said of its counts mode (``mode_description``: accounting,
        review words, whether it is a model), so a plugin's mode reads where it is not
        installed; empty in an artifact made before it was written."""
        return as_dict(self.extra.get("mode_description"))

    @property
    def model_expected(self) -> bool:
        """Whether the mode releases a counts model: as its description says, else as the
        built-in mode of that name (an artifact made before descriptions)."""
        if isinstance(self.description.get("model"), bool):
            return self.description["model"]
        try:
            return describe_counts(self.mode).model
        except ValueError:
            return False

    def class_hints(self) -> dict[Any, dict[str, str]]:
        """Post-processing for prompts: each class's most likely category or bin per field
        (the largest signed noisy count, the first one on ties)."""
        classes = self.class_balance.classes
        hints: dict[Any, dict[str, str]] = {c: {} for c in classes}
        for name, h in self.histograms.items():
            for c, row in zip(classes, h.dp_counts_by_class, strict=True):
                hints[c][name] = str(h.keys[max(range(len(row)), key=row.__getitem__)])
        return hints

    def series(self) -> Iterator[CountSeries]:
        """Every released noisy count, grouped as the review shows and flags them."""
        cb = self.class_balance
        labels = [str(c) for c in cb.classes]
        yield CountSeries("class balance", cb.mechanism_id,
                          tuple(zip(labels, cb.dp_counts, strict=False)), cb.stddev)
        for name, h in self.histograms.items():
            for cls, row in zip(labels, h.dp_counts_by_class, strict=False):
                yield CountSeries(f"histogram {name}, class {cls}", h.mechanism_id,
                                  tuple(zip([str(k) for k in h.keys], row, strict=False)),
                                  h.stddev)
        if self.cohorts is not None:
            co = self.cohorts
            for c in co.cohorts:
                yield CountSeries(f"cohort {c.name}", co.mechanism_id, tuple(
                    (f"class {k}", v) for k, v in zip([str(x) for x in co.classes],
                                                      c.dp_counts_by_class, strict=False)))
        for r in self.rates:
            cells: list[tuple[str, Any]] = []
            for c in r.cells:
                label = cell_label(c.cell)
                cells += [(f"{label} outcome", c.dp_n_outcome), (f"{label} other", c.dp_n_other)]
            yield CountSeries(f"rate {r.name}", r.mechanism_id, tuple(cells))


def cell_label(cell: Any) -> str:
    """``{"arrival_mode": "walk-in"}`` -> ``arrival_mode=walk-in``."""
    if isinstance(cell, dict):
        return ", ".join(f"{k}={v}" for k, v in cell.items())
    return str(cell)


def counts_view(raw: Any) -> Counts:
    """The ``counts`` block alone, read tolerantly (the release reads its own block): each
    part as its record, or empty where it is not one."""
    counts = as_dict(raw)
    hists = {name: h for name, v in as_dict(counts.get("histograms")).items()
             if (h := parse(Histogram, v)) is not None}
    rates = parse(tuple[Rate, ...], counts.get("rates")) or ()
    return Counts(counts.get("signed"),
                  parse(ClassBalance, counts.get("class_balance")) or NO_BALANCE, hists,
                  parse(Cohorts, counts.get("cohorts")), rates,
                  {k: v for k, v in counts.items() if k not in KNOWN_COUNTS},
                  counts.get("mode"), parse_model(counts.get("model")),
                  parse_topics(counts.get("topics")))


# ----- selection -------------------------------------------------------------------------

@dataclass(frozen=True)
class Exemplar:
    """One selected synthetic record and where it was selected."""

    round: int
    class_value: Any
    role: str  # "winner" or "partner" (its contrastive example)
    index: int
    record: Mapping[str, Any]


@dataclass(frozen=True)
class Selection:
    mode: Any
    config: Mapping[str, Any]  # every setting of the block but the rounds
    kernel: Mapping[str, Any] | None
    rounds: tuple[SelectionRound, ...]

    @property
    def description(self) -> Mapping[str, Any]:
        """What the release said of its mode (``mode_description``): enough to read the block
        where the mode is not installed."""
        return as_dict(self.config.get("mode_description"))

    def exemplars(self) -> Iterator[Exemplar]:
        """Every selected record in document order."""
        for r in self.rounds:
            for c in r.classes:
                for role, recs in (("winner", c.winners), ("partner", c.partners)):
                    for i, rec in enumerate(recs):
                        yield Exemplar(r.round, c.class_value, role, i, rec)

    def latest_first(self, role: str) -> dict[Any, list[dict[str, Any]]]:
        """Per class, the records in ``role`` (winner or partner), latest round first; a record
        already listed (in either role) is not listed again."""
        seen: set[str] = set()
        out: dict[Any, list[dict[str, Any]]] = {}
        for r in sorted(self.rounds, key=lambda r: -r.round):
            for c in r.classes:
                for kind, recs in (("winner", c.winners), ("partner", c.partners)):
                    for rec in recs:
                        key = json.dumps(rec, sort_keys=True)
                        if key not in seen:
                            seen.add(key)
                            if kind == role:
                                out.setdefault(c.class_value, []).append(rec)
        return out


def _selection(raw: Any) -> Selection | None:
    if not isinstance(raw, dict):
        return None
    kernel = raw.get("kernel")
    return Selection(raw.get("mode"), {k: v for k, v in raw.items() if k != "rounds"},
                     kernel if isinstance(kernel, dict) else None,
                     parse(tuple[SelectionRound, ...], raw.get("rounds")) or ())


# ----- the whole document ----------------------------------------------------------------

@dataclass(frozen=True)
class ReleaseView:
    """Everything in one release.json, typed; see the module docstring for the two modes."""

    dataset: Any
    schema_json: Mapping[str, Any]
    schema_sha256: Any
    release_key_id: Any
    privacy_unit: Mapping[str, Any]
    budget: Mapping[str, Any]
    ledger: Ledger
    guarantees: Guarantees
    counts: Counts
    selection: Selection | None
    doc: Mapping[str, Any] = field(repr=False)  # the document itself, for what is shown raw
    checked_schema: Schema | None = field(default=None, repr=False)
    persons: PersonsBlock | None = None  # the people tables (a schema with person structure)

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> ReleaseView:
        """Read any document tolerantly (for display before trust); never raises."""
        d = as_dict(doc)
        return cls(d.get("dataset"), as_dict(d.get("schema")), d.get("schema_sha256"),
                   d.get("release_key_id"), as_dict(d.get("privacy_unit")),
                   as_dict(d.get("budget")),
                   parse(Ledger, d.get("ledger")) or NO_LEDGER,
                   parse(Guarantees, d.get("guarantees")) or NO_GUARANTEES,
                   counts_view(d.get("counts")),
                   _selection(d.get("selection")), d, None, parse(PersonsBlock, d.get("persons")))

    @classmethod
    def checked(cls, doc: Mapping[str, Any]) -> ReleaseView:
        """Read a document to use it: every shape checked against its embedded schema."""
        schema = parse_schema(doc["schema"], source="release.json schema")
        if schema.sha256() != doc["schema_sha256"]:
            raise UserError("release.json: schema_sha256 does not match the embedded schema")
        view = cls.parse(doc)
        try:
            _check_parts(doc)
            counts = _check_counts(view.counts, schema)
            _check_selection(view.selection, schema)
            _check_persons(view.persons, doc.get("persons"), schema)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            raise UserError("release.json: the counts, people or selection block is malformed; "
                            "use a selpe-audit version that matches the release") from None
        return replace(view, counts=counts, checked_schema=schema)

    @property
    def schema(self) -> Schema:
        """The embedded schema, parsed (only on a view made by `checked`)."""
        if self.checked_schema is None:
            raise RuntimeError("an unchecked view has no parsed schema; use ReleaseView.checked")
        return self.checked_schema

    @property
    def field_order(self) -> list[str]:
        return [str(f) for f in as_list(self.schema_json.get("x-field-order"))]

    def histograms_in_field_order(self) -> list[tuple[str, Histogram]]:
        """(field, histogram) in the schema's field order (then any the schema does not
        name)."""
        hists = self.counts.histograms
        order = [f for f in self.field_order if f in hists]
        return [(k, hists[k]) for k in [*order, *(k for k in hists if k not in order)]]

    def count_floor(self, default: int) -> int:
        """The floor n_min under which a noisy count is flagged (budget.counts.n_min)."""
        n_min = _num(as_dict(self.budget.get("counts")).get("n_min"))
        return int(n_min) if n_min is not None else default


def _ints(row: tuple[Any, ...], n: int) -> tuple[int, ...]:
    if len(row) != n or not all(isinstance(v, int) and not isinstance(v, bool) for v in row):
        raise ValueError(f"expected {n} integer counts")
    return row


def _check_persons(block: PersonsBlock | None, raw: Any, schema: Schema) -> None:
    """The people tables against the schema: present exactly when it has person structure
    (and the document has the block), their keys every public combination, counts
    integers."""
    if raw is None:
        return
    s = schema.persons
    if block is None or s is None or block.order != s.order or block.cap < 2 \
            or block.gap_bins != s.gap_bins or block.person_fields != s.person_fields:
        raise ValueError("the people tables do not match the schema's person structure")
    tables = [block.visits, *(block.next or {}).values(),
              *([block.gaps] if block.gaps is not None else [])]
    for t in tables:
        if len(t.keys) != len(t.dp_counts) or len(set(t.keys)) != len(t.keys) \
                or any(len(k) != len(t.fields) for k in t.keys):
            raise ValueError("a people table's keys and counts differ")
        _ints(t.dp_counts, len(t.keys))
    if block.next is not None and set(block.next) != set(s.transitions):
        raise ValueError("the people tables' transition fields differ from the schema's")


def _check_counts(counts: Counts, schema: Schema) -> Counts:
    classes = tuple(schema.classes)
    if counts.class_balance.classes != classes:
        raise ValueError("class balance classes differ from the schema's label values")
    _ints(counts.class_balance.dp_counts, len(classes))
    _check_model_parts(counts, schema)
    for name, h in counts.histograms.items():
        f = schema.field(name)
        want = f.enum if f.kind == "categorical" else tuple(f.bin_labels())
        if f.kind not in ("categorical", "numeric") or h.keys != tuple(want):
            raise ValueError(f"histogram keys of '{name}' differ from the schema")
        if len(h.dp_counts_by_class) != len(classes):
            raise ValueError(f"histogram '{name}' needs one row per class")
        for row in h.dp_counts_by_class:
            _ints(row, len(want))
        _stddev(h.stddev)
    if counts.cohorts is None or not counts.cohorts.cohorts:
        return replace(counts, cohorts=None)
    rules = []
    for c in counts.cohorts.cohorts:
        _ints(c.dp_counts_by_class, len(classes))
        rules.append(None if c.is_catch_all else CohortRule.parse(schema, c.where))
    if rules.count(None) != 1:
        raise ValueError("cohorts need exactly one catch-all cohort")
    return replace(counts, cohort_rules=tuple(rules))


#: the typed parts of a document a checked view reads, each strictly as its record
_STRICT_PARTS: tuple[tuple[tuple[str, str], Any], ...] = (
    (("counts", "class_balance"), ClassBalance), (("counts", "histograms"), dict[str, Histogram]),
    (("counts", "cohorts"), Cohorts), (("counts", "rates"), tuple[Rate, ...]),
    (("counts", "model"), CountsModel), (("counts", "topics"), dict[str, Topics]),
    (("selection", "rounds"), tuple[SelectionRound, ...]))


def _check_parts(doc: Mapping[str, Any]) -> None:
    """Every typed part the document holds is its record (the tolerant parse would read a
    malformed one as absent); a pydantic ValidationError is a ValueError."""
    for (block, part), cls in _STRICT_PARTS:
        raw = as_dict(doc.get(block))
        if part in raw:
            adapter(cls).validate_python(raw[part])


def _stddev(x: Any) -> None:
    if x is not None and not positive(x):
        raise ValueError("a released stddev must be a positive number")


def _check_model_parts(counts: Counts, schema: Schema) -> None:
    """The optional model-mode parts: the mode, stddevs, the model and the topic codebooks
    (an artifact without them, made before model modes, reads as mode "marginals"). Any
    mode name reads: the block says whether it is a model (``counts.model``)."""
    if counts.mode is not None and not (isinstance(counts.mode, str) and counts.mode):
        raise ValueError("the counts mode must be a name")
    _stddev(counts.class_balance.stddev)
    check_topics(counts.topics, schema)
    if counts.model is not None:
        check_model(counts.model, schema, counts.topics)
    elif counts.model_expected:
        raise ValueError("a model counts mode needs its counts.model block")


def _check_selection(selection: Selection | None, schema: Schema) -> None:
    """Every exemplar is a record of the schema, of the class it was selected for."""
    if selection is None:
        return
    if selection.kernel is None:
        raise ValueError("the selection block states no kernel")
    validator = schema.record_validator()
    for r in selection.rounds:
        for c in r.classes:
            for rec in (*c.winners, *c.partners):
                if not validator.is_valid(rec) or rec[schema.label] != c.class_value:
                    raise ValueError("an exemplar breaks the schema")
