"""The artifact's blocks as typed, frozen records: one definition for writer, reader and schema.

Each block of ``release.json`` that both sides of the air gap exchange is one frozen
dataclass here (the counts model and topic codebooks in `selpe_audit.artifact.model_block`,
the whole document in `selpe_audit.artifact.document`). The release builds them and writes
their JSON form (`json_form`); decode, review and the audits read them back (`parse`); and
pydantic generates the artifact's JSON Schema from the same classes, so the three cannot
drift. A record ignores keys it does not know (a later format's additions); only the top
level refuses them. The counts blocks (class balance, histograms, cohorts, rates) and the
selection rounds are records too: the release writes them with `json_form`, and
`selpe_audit.artifact.view` reads them back for review, decode and the audits, which have no
other shape of them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from functools import cache
from typing import Annotated, Any, Literal, TypeVar, get_type_hints

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

T = TypeVar("T")

#: the config of every record: unknown keys are read past (and allowed by the schema)
OPEN = ConfigDict(extra="allow")
#: the top level of the document: nothing but the blocks format 1 defines
CLOSED = ConfigDict(extra="forbid")

NonNegative = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
Probability = Annotated[float, Field(ge=0, le=1)]
Name = Annotated[str, Field(min_length=1)]
KeyId = Annotated[str, Field(pattern="^[0-9a-f]{16}$")]
Sha256 = Annotated[str, Field(pattern="^[0-9a-f]{64}$")]
Accounting = Literal["pure", "zCDP"]


@cache
def adapter(cls: type) -> TypeAdapter[Any]:
    """pydantic's validator, serializer and schema for one record class (built once)."""
    return TypeAdapter(cls)


@cache
def _json_names(cls: type) -> dict[str, str]:
    """Field name -> JSON key: the field's pydantic alias where it has one ("class")."""
    hints = get_type_hints(cls, include_extras=True)
    names = {}
    for f in fields(cls):
        alias = next((m.alias for m in getattr(hints[f.name], "__metadata__", ())
                      if isinstance(m, FieldInfo) and m.alias), None)
        names[f.name] = alias or f.name
    return names


def _as_json(x: Any) -> Any:
    if is_dataclass(x) and not isinstance(x, type):
        return json_form(x)
    if isinstance(x, tuple | list):
        return [_as_json(v) for v in x]
    if isinstance(x, dict):
        return {k: _as_json(v) for k, v in x.items()}
    return x


def json_form(record: Any) -> dict[str, Any]:
    """A record as the artifact stores it: its fields under their JSON names, nested records
    as objects, tuples as arrays, and no key whose value is None (an optional part the
    release did not make). A subclass's own fields (the release's working columns) stay out."""
    names = _json_names(_record_class(type(record)))
    return {key: _as_json(v) for name, key in names.items()
            if (v := getattr(record, name)) is not None}


def _record_class(cls: type) -> type:
    """The record class a value was made from: the first class up its MRO that declares
    ``__pydantic_config__`` itself (a release-side subclass adds working fields only)."""
    return next(c for c in cls.__mro__ if "__pydantic_config__" in vars(c))


def parse(cls: type[T], raw: Any) -> T | None:
    """``raw`` as a ``cls`` record, or None when it is not one (tolerant reading: the review
    shows a document before anyone trusts it; checked readers validate the schema first)."""
    try:
        return adapter(cls).validate_python(raw)
    except ValidationError:
        return None


def schema_of(cls: type) -> dict[str, Any]:
    """The JSON Schema pydantic generates for a record class (nested records under $defs)."""
    return adapter(cls).json_schema()


# ----- ledger ------------------------------------------------------------------------------

@dataclass(frozen=True)
class LedgerEntry:
    """One mechanism's accounting, as OpenDP's privacy map reports it."""

    __pydantic_config__ = OPEN

    id: str
    mechanism: str
    constructor: str
    scale: float
    epsilon: NonNegative
    delta: Probability
    scope: str
    composition: str
    #: "pure epsilon-DP", or "rho-zCDP" (its epsilon and delta then in a conversion entry)
    accounting: str = "pure epsilon-DP"
    rho: NonNegative | None = None
    mu: NonNegative | None = None


@dataclass(frozen=True)
class Ledger:
    entries: tuple[LedgerEntry, ...]
    total_epsilon: NonNegative
    total_delta: Probability
    accountant: str

    __pydantic_config__ = OPEN

    def scales(self) -> dict[str, float]:
        """Noise scale per mechanism id."""
        return {e.id: float(e.scale) for e in self.entries}


#: what a view shows for a document without a readable ledger
NO_LEDGER = Ledger((), 0.0, 0.0, "")


# ----- budget, privacy unit, source --------------------------------------------------------

@dataclass(frozen=True)
class LifetimeStamp:
    """Which enclave ledger and which entry of it charged the release. No path: the ledger
    id is random per ledger folder, the reservation id random per release."""

    __pydantic_config__ = OPEN

    ledger_id: KeyId
    dataset: Name
    reservation_id: Annotated[str, Field(pattern="^[0-9a-f]{12}$")]
    lifetime_epsilon: Positive | None = None
    lifetime_delta: Probability | None = None
    committed_epsilon: NonNegative | None = None
    committed_delta: Probability | None = None


@dataclass(frozen=True)
class PlanChoice:
    """One choice the release made from public facts and its DP row count, and why."""

    __pydantic_config__ = OPEN

    part: str
    choice: str
    reason: str


@dataclass(frozen=True)
class Plan:
    """``budget.plan``: what the release sized to the table before its other counts ran
    (`release.plan`): the DP count of rows it read (``rows``; its epsilon and noise scale are
    also a ledger entry), the Gaussian standard deviation a class x field cell was planned
    with, the rule's threshold in standard deviations, and each choice with its reason."""

    __pydantic_config__ = OPEN

    rows: Annotated[int, Field(ge=0)]
    rows_epsilon: NonNegative
    rows_scale: NonNegative
    cell_stddev: NonNegative
    signal_sigmas: NonNegative
    choices: tuple[PlanChoice, ...]


@dataclass(frozen=True)
class Budget:
    """The release's budget, its split, each part's settings, the plan that sized them to
    the table, and the lifetime caps."""

    __pydantic_config__ = OPEN

    epsilon: Positive
    delta: Probability
    split: dict[str, float]
    counts: dict[str, Any] | None = None  # the counts settings (shares, n_min, ...)
    lifetime_epsilon: Positive | None = None
    lifetime_delta: Probability | None = None
    lifetime_ledger: LifetimeStamp | None = None
    plan: Plan | None = None
    #: the policy for people this release would take past their lifetime cap: left out
    #: before any mechanism (true), else the release is refused; how many were is never
    #: released (it would tell of exactly those people)
    leave_out_exhausted: bool | None = None


@dataclass(frozen=True)
class UnitRecord:
    """Whom the guarantee protects, and how each mechanism bounds one unit's rows."""

    __pydantic_config__ = OPEN

    unit: Literal["row", "person"]
    id_field: str | None = None
    max_contributions: Annotated[int, Field(ge=1)] | None = None
    protects: str | None = None
    bounding: dict[str, str] | None = None


@dataclass(frozen=True)
class Source:
    """Where the private rows came from, without saying where that is: a file format, or a
    database kind and the query's HMAC-SHA256 under an enclave secret (never host, user or
    query; a plain hash of a short query is undone by guessing), or a DataFrame handed to
    the Python API."""

    __pydantic_config__ = CLOSED

    kind: Literal["file", "postgresql", "dataframe"]
    format: Literal["csv", "parquet", "jsonl"] | None = None
    query_hmac_sha256: Sha256 | None = None


# ----- guarantees --------------------------------------------------------------------------

@dataclass(frozen=True)
class PriorBound:
    """A secret guessed with probability ``prior`` beforehand is reconstructed with
    probability at most ``success_max``."""

    __pydantic_config__ = OPEN

    prior: float
    success_max: float


@dataclass(frozen=True)
class SelectionGdp:
    """SecPE's (p, r) reading of a Gaussian selection's mu-GDP (an interpretation)."""

    __pydantic_config__ = OPEN

    mu: NonNegative
    formula: str
    reconstruction_success_max: tuple[PriorBound, ...]
    scope: str | None = None
    statements: tuple[str, ...] = ()
    note: str | None = None
    references: tuple[str, ...] = ()


@dataclass(frozen=True)
class FprBound:
    """At a false-positive rate of ``fpr``, a membership test catches at most ``tpr_max``."""

    __pydantic_config__ = OPEN

    fpr: float
    tpr_max: float


@dataclass(frozen=True)
class Guarantees:
    """What the release's (epsilon, delta) means, in numbers and plain words by privacy unit;
    ``selection_gdp``: a Gaussian selection's own reading (an interpretation)."""

    __pydantic_config__ = OPEN

    epsilon: NonNegative | None = None
    delta: Probability | None = None
    protects: str | None = None
    membership_advantage_max: float | None = None
    membership_tpr_max: tuple[FprBound, ...] = ()
    reconstruction_success_max: tuple[PriorBound, ...] = ()
    statements: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    selection_gdp: SelectionGdp | None = None


#: what a view shows for a document without readable guarantees
NO_GUARANTEES = Guarantees()


# ----- mode descriptions -------------------------------------------------------------------

@dataclass(frozen=True)
class CountsDescription:
    """What the release says of its counts mode, so a plugin's mode reads where it is not
    installed."""

    __pydantic_config__ = OPEN

    accounting: Accounting | None = None
    review: str | None = None
    model: bool | None = None


@dataclass(frozen=True)
class SelectionDescription:
    """What the release says of its selection mode (review and decode read it)."""

    __pydantic_config__ = OPEN

    accounting: Accounting | None = None
    review: str | None = None
    mechanism: str | None = None
    person_bounding: str | None = None


@dataclass(frozen=True)
class SelectionAccounting:
    """The selection's total: its measure, and epsilon/delta (rho and mu: Gaussian modes)."""

    __pydantic_config__ = OPEN

    mode: str
    measure: str
    epsilon: NonNegative
    delta: Probability
    rho: NonNegative | None = None
    mu: NonNegative | None = None
    constructor: str = ""  # the OpenDP constructor that composed the rounds


# ----- counts ------------------------------------------------------------------------------

#: a released noisy count: an integer as OpenDP released it (a checked view requires that);
#: the schema admits any number so that a document with an odd cell still shows in review
Count = int | float


@dataclass(frozen=True)
class ClassBalance:
    __pydantic_config__ = OPEN

    mechanism_id: str
    classes: tuple[Any, ...]
    dp_counts: tuple[Count, ...]
    stddev: Positive | None = None  # model modes: the std of a cell of the model's projection


@dataclass(frozen=True)
class Histogram:
    """Noisy counts of one field per class over its public categories or bins."""

    __pydantic_config__ = OPEN

    mechanism_id: str
    kind: Literal["categories", "bins"]
    keys: tuple[Any, ...]
    dp_counts_by_class: tuple[tuple[Count, ...], ...]
    edges: tuple[float, ...] | None = None  # bins: the public edges
    stddev: Positive | None = None  # model modes (None: no measured marginal covers it)


@dataclass(frozen=True)
class Cohort:
    """A released cohort and its noisy counts per class; ``where`` is a table of rules, or
    for the catch-all (rows in no other cohort) words."""

    __pydantic_config__ = OPEN

    name: str
    where: dict[str, tuple[Any, ...]] | str
    dp_counts_by_class: tuple[Count, ...]
    post_size: Count | None = None

    @property
    def is_catch_all(self) -> bool:
        return not isinstance(self.where, dict)


@dataclass(frozen=True)
class Cohorts:
    __pydantic_config__ = OPEN

    mechanism_id: str
    classes: tuple[Any, ...]
    cohorts: tuple[Cohort, ...]


@dataclass(frozen=True)
class RateOutcome:
    __pydantic_config__ = OPEN

    field: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class RateCell:
    __pydantic_config__ = OPEN

    cell: dict[str, Any]  # {field: public value}
    dp_n_outcome: Count
    dp_n_other: Count
    post_n_cell: Count
    suppressed: bool
    post_rate: float | None = None  # None when suppressed


@dataclass(frozen=True)
class Rate:
    """A conditional outcome rate per public cell (post-processing of two noisy counts)."""

    __pydantic_config__ = OPEN

    mechanism_id: str
    name: str
    outcome: RateOutcome
    cells_by: tuple[str, ...]
    n_min: float
    cells: tuple[RateCell, ...]


#: what a view shows for a document without a readable class balance
NO_BALANCE = ClassBalance("", (), ())


# ----- selection ---------------------------------------------------------------------------

@dataclass(frozen=True)
class SelectedClass:
    """One class's selections in a round: winners and their contrastive partners."""

    __pydantic_config__ = OPEN

    class_value: Annotated[Any, Field(alias="class")]
    winners: tuple[dict[str, Any], ...] = ()
    partners: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class SelectionRound:
    """One round's public outputs and accounting: epsilon for a pure mode; rho (zCDP) and mu
    (GDP) = sensitivity / scale for a zCDP mode."""

    __pydantic_config__ = OPEN

    round: int
    classes: tuple[SelectedClass, ...]
    epsilon: NonNegative | None = None
    scale: float | None = None
    quota: int | None = None
    pool_size: int | None = None
    rho: NonNegative | None = None
    mu: NonNegative | None = None
    sensitivity: float | None = None


@dataclass(frozen=True)
class SelectionBlock:
    """``selection``: its mode, what it is, its accounting, kernel and rounds; the other keys
    are the mode's settings (shown as they are), and each registered mode's own block is
    added to the schema by `selpe_audit.artifact.document.artifact_json_schema`."""

    __pydantic_config__ = OPEN

    # any name: a mode registered by a plugin reads off-site, where it is not installed
    mode: Name | None = None
    mode_description: SelectionDescription | None = None
    accounting: SelectionAccounting | None = None
    kernel: dict[str, Any] | None = None
    rounds: tuple[SelectionRound, ...] = ()
