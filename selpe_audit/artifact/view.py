"""The typed, read-only view of a ``release.json``: parsed once, read by review, decode, audits.

Two kinds of reader share it. The review shows a document *before* anyone trusts it and must
render whatever it holds, so `ReleaseView.parse` never raises: a missing block reads as
empty, an odd value is kept as it is (released cells are ``Any``), and blocks a later format
adds stay in ``Counts.extra``. Decode and the audits read a verified document and need it
well formed: `ReleaseView.checked` (what `VerifiedRelease.view` returns) also checks every
shape against the embedded schema - class balance, histogram keys, integer counts, cohort
rules, exemplars - and refuses with a one-line `UserError`. Nothing in the document is
executed; every value here is a DP output or post-processing of one. Over 400 lines: one
frozen dataclass per block of the document, each with its tolerant and its checked parser.
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
from selpe_audit.artifact.records import NO_GUARANTEES, NO_LEDGER, Guarantees, Ledger, parse
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


def _str(x: Any) -> str | None:
    return x if isinstance(x, str) else None


# ----- counts ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ClassBalance:
    mechanism_id: str | None
    classes: tuple[Any, ...]
    dp_counts: tuple[Any, ...]
    stddev: Any = None  # model modes: the std of a cell of the model's projection


@dataclass(frozen=True)
class Histogram:
    """Noisy counts of one field per class over its public categories or bins."""

    field: str
    mechanism_id: str | None
    kind: str | None  # "categories" or "bins"
    keys: tuple[Any, ...]
    edges: tuple[Any, ...] | None
    dp_counts_by_class: tuple[tuple[Any, ...], ...]
    stddev: Any = None  # model modes: the std of a cell (None: no measured marginal covers it)


@dataclass(frozen=True)
class Cohort:
    """A released cohort and its noisy counts per class; ``rule`` is None for the catch-all
    (rows in no other cohort) and, in a document read unchecked, for any rule."""

    name: Any
    where: Any  # as stored: a table of rules, or the catch-all's words
    dp_counts_by_class: tuple[Any, ...]
    post_size: Any
    rule: CohortRule | None = None

    @property
    def is_catch_all(self) -> bool:
        return not isinstance(self.where, dict)


@dataclass(frozen=True)
class Cohorts:
    mechanism_id: str | None
    classes: tuple[Any, ...]
    cohorts: tuple[Cohort, ...]

    def index_of(self, record: Mapping[str, Any]) -> int:
        """The cohort that holds ``record``: the first rule it meets, else the catch-all."""
        for i, c in enumerate(self.cohorts):
            if c.rule is not None and c.rule.contains(record):
                return i
        return next(i for i, c in enumerate(self.cohorts) if c.is_catch_all)


@dataclass(frozen=True)
class RateCell:
    cell: Any  # {field: public value}
    dp_n_outcome: Any
    dp_n_other: Any
    post_n_cell: Any
    post_rate: Any  # None when suppressed
    suppressed: Any


@dataclass(frozen=True)
class Rate:
    """A conditional outcome rate per public cell (post-processing of two noisy counts)."""

    mechanism_id: str | None
    name: Any
    outcome_field: Any
    outcome_values: Any
    cells_by: Any
    n_min: Any
    cells: tuple[RateCell, ...]


@dataclass(frozen=True)
class CountSeries:
    """One run of released noisy counts as a reviewer reads them: where, and which cells."""

    where: str
    mechanism_id: str | None
    cells: tuple[tuple[str, Any], ...]  # (cell label, noisy count)
    stddev: Any = None  # model modes: a cell's standard deviation (else the ledger's scale)


@dataclass(frozen=True)
class Counts:
    signed: Any
    class_balance: ClassBalance
    histograms: Mapping[str, Histogram]  # in the document's order
    cohorts: Cohorts | None
    rates: tuple[Rate, ...]
    extra: Mapping[str, Any]  # blocks this version does not know, shown as they are
    mode: Any = None  # the counts mode's name ("marginals" when absent)
    model: CountsModel | None = None  # model modes: every noisy marginal, to refit the model
    topics: Mapping[str, Topics] = field(default_factory=dict)  # free-text topic codebooks

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


def _tuple(x: Any) -> tuple[Any, ...]:
    return tuple(as_list(x))


def counts_view(raw: Any) -> Counts:
    """The ``counts`` block alone, read tolerantly (the release reads its own block)."""
    counts = as_dict(raw)
    cb = as_dict(counts.get("class_balance"))
    balance = ClassBalance(_str(cb.get("mechanism_id")), _tuple(cb.get("classes")),
                           _tuple(cb.get("dp_counts")), cb.get("stddev"))
    hists = {}
    for name, h in as_dict(counts.get("histograms")).items():
        h = as_dict(h)
        edges = h.get("edges")
        hists[name] = Histogram(name, _str(h.get("mechanism_id")), _str(h.get("kind")),
                                _tuple(h.get("keys")),
                                tuple(edges) if isinstance(edges, list) else None,
                                tuple(_tuple(r) for r in as_list(h.get("dp_counts_by_class"))),
                                h.get("stddev"))
    cohorts = None
    if "cohorts" in counts:
        co = as_dict(counts["cohorts"])
        cohorts = Cohorts(_str(co.get("mechanism_id")), _tuple(co.get("classes")), tuple(
            Cohort(c.get("name"), c.get("where"), _tuple(c.get("dp_counts_by_class")),
                   c.get("post_size"))
            for c in map(as_dict, as_list(co.get("cohorts")))))
    rates = []
    for r in map(as_dict, as_list(counts.get("rates"))):
        out = as_dict(r.get("outcome"))
        rates.append(Rate(_str(r.get("mechanism_id")), r.get("name"), out.get("field"),
                          out.get("values"), r.get("cells_by"), r.get("n_min"), tuple(
            RateCell(c.get("cell"), c.get("dp_n_outcome"), c.get("dp_n_other"),
                     c.get("post_n_cell"), c.get("post_rate"), c.get("suppressed"))
            for c in map(as_dict, as_list(r.get("cells"))))))
    return Counts(counts.get("signed"), balance, hists, cohorts, tuple(rates),
                  {k: v for k, v in counts.items() if k not in KNOWN_COUNTS},
                  counts.get("mode"), parse_model(counts.get("model")),
                  parse_topics(counts.get("topics")))


# ----- selection -------------------------------------------------------------------------

@dataclass(frozen=True)
class Exemplar:
    """One selected synthetic record and where it was selected."""

    round: Any
    class_value: Any
    role: str  # "winner" or "partner" (its contrastive example)
    index: int
    record: Mapping[str, Any]


@dataclass(frozen=True)
class SelectedClass:
    class_value: Any
    winners: tuple[Any, ...]
    partners: tuple[Any, ...]


@dataclass(frozen=True)
class SelectionRound:
    round: Any
    epsilon: Any
    rho: Any  # Gaussian modes: the round's rho-zCDP and mu
    mu: Any
    classes: tuple[SelectedClass, ...]


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
        """Every selected record in document order (non-records read as empty ones)."""
        for r in self.rounds:
            for c in r.classes:
                for role, recs in (("winner", c.winners), ("partner", c.partners)):
                    for i, rec in enumerate(recs):
                        yield Exemplar(r.round, c.class_value, role, i, as_dict(rec))

    def latest_first(self, role: str) -> dict[Any, list[dict[str, Any]]]:
        """Per class, the records in ``role`` (winner or partner), latest round first; a record
        already listed (in either role) is not listed again."""
        seen: set[str] = set()
        out: dict[Any, list[dict[str, Any]]] = {}
        for r in sorted(self.rounds, key=lambda r: -int(r.round)):
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
    rounds = []
    for r in map(as_dict, as_list(raw.get("rounds"))):
        rounds.append(SelectionRound(r.get("round"), r.get("epsilon"), r.get("rho"), r.get("mu"),
                                     tuple(SelectedClass(c.get("class"), _tuple(c.get("winners")),
                                                         _tuple(c.get("partners")))
                                           for c in map(as_dict, as_list(r.get("classes"))))))
    kernel = raw.get("kernel")
    return Selection(raw.get("mode"), {k: v for k, v in raw.items() if k != "rounds"},
                     kernel if isinstance(kernel, dict) else None, tuple(rounds))


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
                   _selection(d.get("selection")), d)

    @classmethod
    def checked(cls, doc: Mapping[str, Any]) -> ReleaseView:
        """Read a document to use it: every shape checked against its embedded schema."""
        schema = parse_schema(doc["schema"], source="release.json schema")
        if schema.sha256() != doc["schema_sha256"]:
            raise UserError("release.json: schema_sha256 does not match the embedded schema")
        view = cls.parse(doc)
        try:
            counts = _check_counts(view.counts, schema)
            _check_selection(view.selection, schema)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            raise UserError("release.json: the counts or selection block is malformed; "
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

    def histograms_in_field_order(self) -> list[Histogram]:
        """The histograms in the schema's field order (then any the schema does not name)."""
        hists = self.counts.histograms
        order = [f for f in self.field_order if f in hists]
        return [hists[k] for k in [*order, *(k for k in hists if k not in order)]]

    def count_floor(self, default: int) -> int:
        """The floor n_min under which a noisy count is flagged (budget.counts.n_min)."""
        n_min = _num(as_dict(self.budget.get("counts")).get("n_min"))
        return int(n_min) if n_min is not None else default


def _ints(row: tuple[Any, ...], n: int) -> tuple[int, ...]:
    if len(row) != n or not all(isinstance(v, int) and not isinstance(v, bool) for v in row):
        raise ValueError(f"expected {n} integer counts")
    return row


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
    cohorts = []
    for c in counts.cohorts.cohorts:
        _ints(c.dp_counts_by_class, len(classes))
        rule = None if c.is_catch_all else CohortRule.parse(schema, c.where)
        cohorts.append(Cohort(c.name, c.where, c.dp_counts_by_class, c.post_size, rule))
    if sum(c.is_catch_all for c in cohorts) != 1:
        raise ValueError("cohorts need exactly one catch-all cohort")
    return replace(counts, cohorts=Cohorts(counts.cohorts.mechanism_id, counts.cohorts.classes,
                                           tuple(cohorts)))


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
        int(r.round)
        for c in r.classes:
            for rec in (*c.winners, *c.partners):
                if not validator.is_valid(rec) or rec[schema.label] != c.class_value:
                    raise ValueError("an exemplar breaks the schema")
