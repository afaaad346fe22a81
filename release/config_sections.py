"""The release configuration's sections: [budget], [privacy_unit], [counts] (with
[[cohorts]] and [[rates]]) and [selection], each a frozen, keyword-only dataclass that
refuses an invalid value with a one-line `UserError` when built; `setting` declares a field
once, for the TOML file and the CLI (`release.config_file`). The file's reference is
`release.config`'s docstring."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from release.ledger import DEFAULT_LIFETIME_DELTA, DEFAULT_LIFETIME_EPSILON, ledger_folder
from release.phrases import Terms, term_kind
from selpe_audit.artifact.counts_modes import DEFAULT_COUNTS_MODE, counts_modes, describe_counts
from selpe_audit.artifact.modes import ModeDescriptor, describe, mode_names, modes, or_list
from selpe_audit.errors import UserError
from selpe_audit.schema import Field, Schema

DEFAULT_EPSILON = 2.0
DEFAULT_DELTA = 1e-6
MAX_DELTA = 1e-3
DEFAULT_TOPICS = 8
#: model counts: a class x field cell is measured when its expected count reaches this many
#: noise standard deviations (`release.counts.workload`; benchmarks.budget_parts measured it)
SIGNAL_SIGMAS = 1.0


def setting(default: Any = MISSING, help: str | None = None, *, flag: str | None = None,
            key: str | None = None, choices: Callable[[], list[str]] | None = None,
            show_default: bool = True) -> Any:
    """A config field, declared once. One with ``help`` is also a CLI argument: ``flag``
    (default ``--field-name``), its override key ``key`` (default the field's name: what
    `load_config` takes), ``choices`` (read when the parser is built, so plugins count),
    and its help, to which the CLI adds "(default X)" when ``show_default``."""
    meta = {"help": help, "flag": flag, "key": key, "choices": choices,
            "show_default": show_default}
    return field(metadata=meta) if default is MISSING else field(default=default, metadata=meta)


#: the least total epsilon a release takes: OpenDP finds no noise scale for the demo's parts
#: from about 1e-8 on (measured: 1e-7 releases, 1e-8 and 1e-300 do not); two decades of room
MIN_EPSILON = 1e-5


@dataclass(frozen=True)
class CohortSpec:
    """A configured cohort's public rule: numeric fields by closed [lo, hi] ranges,
    categorical by value sets (released as a `selpe_audit.artifact.records.Cohort`)."""

    name: str
    where: dict[str, tuple[Any, ...]]


@dataclass(frozen=True)
class RateSpec:
    """A binary outcome (field in values) and the public cells its rate is measured in."""

    name: str
    outcome_field: str
    outcome_values: tuple[Any, ...]
    cells: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class BudgetConfig:
    """[budget]: this release's epsilon (and delta) and the dataset's lifetime caps.

    The lifetime caps (None: the ledger's stored caps, or the installation's maximum for a
    new ledger) can only lower what the dataset's ledger stores (`release.ledger`) and never
    pass the installation's maximum (`release.installation`). The ledger folder
    is made absolute on construction (None: the installation's `default_ledger_folder`).
    """

    epsilon: float = setting(DEFAULT_EPSILON, "total epsilon of this release")
    delta: float | None = setting(
        None, "the release's total delta, split over its zCDP parts (model counts modes, "
        f"Gaussian selection modes; default {DEFAULT_DELTA:g}); counts mode 'marginals' with "
        "selpe is pure epsilon-DP")
    # counts only by default: the default decoder (model) reads no exemplar, and half of
    # epsilon on selection cost the records 0.10 of TSTR AUC at 400 rows (docs/release.md,
    # "What each part of the budget buys"; benchmarks.budget_parts)
    counts_share: float = setting(1.0, "share of epsilon for noisy counts; the rest goes to "
                                       "the SelPE selection of exemplars for the LLM decoder "
                                       "(1 = counts only)")
    selection_share: float = 0.0
    lifetime_epsilon: float | None = setting(
        None, "lifetime budget of a new dataset (default and maximum: the installation's, "
        f"{DEFAULT_LIFETIME_EPSILON:g} without /etc/selpe-audit/installation.toml); can only "
        "lower an existing one")
    lifetime_delta: float | None = setting(
        None, "lifetime cap on the sum of the releases' deltas (default and maximum: the "
        f"installation's, {DEFAULT_LIFETIME_DELTA:g} without the file)")
    lifetime_ledger: Path | str | None = setting(
        None, "folder of the lifetime ledger (refused where the installation names one)")

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise UserError("config: budget.epsilon must be a finite number > 0")
        if self.epsilon < MIN_EPSILON:
            raise UserError(f"config: budget.epsilon {self.epsilon:g} is below {MIN_EPSILON:g}, "
                            "the least OpenDP calibrates every part's noise at (smaller, the "
                            "noise scales leave its bounds, and the counts would be noise "
                            "alone); raise it")
        if self.delta is not None and not _probability(self.delta):
            raise UserError("config: budget.delta must be a number in [0, 1)")
        if self.lifetime_delta is not None and not _probability(self.lifetime_delta):
            raise UserError("config: budget.lifetime_delta must be a number in [0, 1)")
        shares = (self.counts_share, self.selection_share)
        if any(s < 0 for s in shares) or not math.isclose(sum(shares), 1.0, abs_tol=1e-9):
            raise UserError("config: budget.counts + budget.selection must sum to 1 "
                            f"(got {self.counts_share} + {self.selection_share})")
        if self.counts_share <= 0:
            raise UserError("config: budget.counts must be > 0: the noisy counts (class "
                            "balance, histograms) always run and need a share of epsilon")
        if self.lifetime_epsilon is not None:
            if not (math.isfinite(self.lifetime_epsilon) and self.lifetime_epsilon > 0):
                raise UserError("config: budget.lifetime_epsilon must be a finite number > 0")
            if self.epsilon > self.lifetime_epsilon:
                raise UserError(f"config: budget.epsilon {self.epsilon} exceeds the lifetime "
                                f"budget {self.lifetime_epsilon}")
        object.__setattr__(self, "lifetime_ledger", ledger_folder(self.lifetime_ledger))

    @property
    def counts_epsilon(self) -> float:
        return self.epsilon * self.counts_share

    @property
    def selection_epsilon(self) -> float:
        return self.epsilon * self.selection_share


@dataclass(frozen=True, kw_only=True)
class PrivacyUnitConfig:
    """[privacy_unit]: a row, or a person whose rows are bounded to max_contributions.
    ``unit`` None (left out) is decided by `resolved` once the schema is known."""

    unit: str | None = setting(None, "privacy unit (default: person when --id-field is given "
                                     "or the schema names x-id, else row)",
                               choices=lambda: ["row", "person"])
    id_field: str | None = setting(None, "person id field (unit = person; default: the "
                                         "schema's x-id)")
    max_contributions: int = setting(1, "rows kept per person (unit = person)")

    def __post_init__(self) -> None:
        if self.unit not in (None, "row", "person"):
            raise UserError("config: privacy_unit.unit must be 'row' or 'person'")
        if self.max_contributions < 1:
            raise UserError("config: privacy_unit.max_contributions must be >= 1")
        if self.unit == "row" and self.max_contributions != 1:
            raise UserError("config: max_contributions applies to unit = 'person' only")

    def resolved(self, schema: Schema) -> PrivacyUnitConfig:
        """The unit for ``schema``: as set, else the person when an id field is known (set,
        or the schema's x-id), since a row unit protects a person with m rows only at m
        times epsilon; else the row. ``unit = "row"`` stays possible, explicitly."""
        if self.unit is not None:
            return self
        if (self.id_field or schema.id_field) is not None:
            return replace(self, unit="person")
        if self.max_contributions != 1:
            raise UserError("config: privacy_unit.max_contributions applies to unit = "
                            "'person', which needs privacy_unit.id_field (the schema names no "
                            "x-id)")
        return replace(self, unit="row")


@dataclass(frozen=True, kw_only=True)
class CountsConfig:
    """[counts], [[cohorts]] and [[rates]]: the noisy counts' plan inside their budget."""

    mode: str = setting(DEFAULT_COUNTS_MODE, "; ".join(
        f"{d.name}: {d.help}" for d in counts_modes()), flag="--counts-mode", key="counts_mode",
        choices=lambda: [d.name for d in counts_modes()], show_default=False)
    class_share: float = 0.25
    topic_share: float = 0.3
    topics: int | None = setting(  # None: DEFAULT_TOPICS with a public pool, else off
        None, f"topic anchors per free-text field in the model modes (default: "
        f"{DEFAULT_TOPICS} with a --candidates pool, else 0; > 0 without a pool builds the "
        "codebook from LLM candidates)")
    phrases: bool | str = "auto"  # "auto": where the plan finds a term could pass
    phrase_share: float = 0.2
    phrases_per_unit: int = 1
    keywords_per_unit: int = 1
    keyword_slots: int = 1
    max_phrases: int = 64
    deny: Path | None = None
    aim_rounds: int | None = None  # None: OpenDP's, 16 per model column
    signal_sigmas: float = setting(
        SIGNAL_SIGMAS, "model counts: a class x field cell is measured when its expected count "
        "reaches this many noise standard deviations (else bins are merged, or the field is "
        "measured alone); 0 measures every field with the class over its public bins")
    gamma: float | None = None  # None: sized, one marginal's share (`table_shares`)
    alpha: float | None = None
    n_min: int = 10
    cohorts: tuple[CohortSpec, ...] = ()
    rates: tuple[RateSpec, ...] = ()

    def __post_init__(self) -> None:
        try:
            describe_counts(self.mode)
        except ValueError as e:
            raise UserError(f"config: {e}") from None
        if not 0 < self.class_share < 1 or not 0 < self.topic_share < 1 - self.class_share:
            raise UserError("config: counts.class_share must be a share in (0, 1), and "
                            "counts.topic_share above 0 and below 1 - class_share")
        if not (math.isfinite(self.signal_sigmas) and self.signal_sigmas >= 0):
            raise UserError("config: counts.signal_sigmas must be a number >= 0")
        if (self.topics is not None and (self.topics < 0 or self.topics == 1)) \
                or (self.aim_rounds is not None and self.aim_rounds < 1):
            raise UserError("config: counts.topics must be 0 (off) or >= 2, and "
                            "counts.aim_rounds >= 1")
        if not (isinstance(self.phrases, bool) or self.phrases == "auto"):
            raise UserError("config: counts.phrases must be \"auto\", true or false")
        if not 0 < self.phrase_share < 1 or min(self.phrases_per_unit, self.keywords_per_unit,
                                                 self.keyword_slots, self.max_phrases) < 1:
            raise UserError("config: counts.phrase_share must be a share in (0, 1), and "
                            "counts.phrases_per_unit, keywords_per_unit, keyword_slots and "
                            "max_phrases >= 1")
        gamma, alpha = self.gamma or 0.0, self.alpha or 0.0
        if not (0 <= gamma < 1 and 0 <= alpha < 1 and gamma + alpha < 1):
            raise UserError("config: counts.gamma and counts.alpha must be >= 0 with "
                            "gamma + alpha < 1 (the rest is for histograms)")
        if self.n_min < 0:
            raise UserError("config: counts.n_min must be >= 0")
        if self.cohorts and self.gamma is not None and self.gamma <= 0:
            raise UserError("config: counts.gamma must be > 0 when [[cohorts]] are configured "
                            "(or remove the cohorts, or leave gamma out for its sized share)")
        if self.rates and self.alpha is not None and self.alpha <= 0:
            raise UserError("config: counts.alpha must be > 0 when [[rates]] are configured "
                            "(or remove the rates, or leave alpha out for its sized share)")
        names = [c.name for c in self.cohorts]
        if len(set(names)) != len(names):
            raise UserError("config: cohort names must be unique")

    def table_shares(self, schema: Schema) -> tuple[float, float]:
        """(gamma, alpha): the counts' shares for the cohort table and the rates - as set,
        or, left out, one marginal's share for the cohort table and for each rate: 1 / (the
        class balance, one marginal per field, and these tables), so a table the steward
        asks for costs the others what one more field would; 0 where none is configured."""
        fields = sum(f.kind in ("categorical", "numeric") and f.name != schema.label
                     for f in schema.record_fields)
        tables = int(bool(self.cohorts)) + len(self.rates)
        each = 1 / (1 + fields + tables)
        gamma = (each if self.gamma is None else self.gamma) if self.cohorts else 0.0
        alpha = (each * len(self.rates) if self.alpha is None else self.alpha) \
            if self.rates else 0.0
        return gamma, alpha

    def terms(self, f: Field) -> Terms:
        """A free-text field's DP vocabulary: its kind (by the schema's maxLength), the terms
        one unit counts for, and its topic columns (slots)."""
        kind = term_kind(f.max_length)
        if kind == "phrases":
            return Terms(kind, self.phrases_per_unit, 1)
        return Terms(kind, self.keywords_per_unit, self.keyword_slots)

    @property
    def is_model(self) -> bool:
        """The mode releases a counts model, which free-text topics can be columns of."""
        return describe_counts(self.mode).model

    @property
    def needs_delta(self) -> bool:
        """The mode's counts are zCDP, converted to (epsilon, delta)."""
        return describe_counts(self.mode).needs_delta


@dataclass(frozen=True, kw_only=True)
class PersonsConfig:
    """[persons]: the people tables of a schema with person structure (``x-order``,
    `selpe_audit.person_schema`); ignored without it."""

    person_share: float = 0.3  # of the counts' epsilon, when every people table runs
    visits_cap: int = setting(
        3, "a person's visits the people tables read (the first ones, in order; the "
        "visits-per-person count's last value reads 'cap or more')")

    def __post_init__(self) -> None:
        if not 0 < self.person_share < 1:
            raise UserError("config: persons.person_share must be a share in (0, 1)")
        if not 2 <= self.visits_cap <= 10:
            raise UserError("config: persons.visits_cap must be from 2 to 10 (visits of a "
                            "person the people tables read)")


@dataclass(frozen=True, kw_only=True)
class SelectionConfig:
    """[selection]: the loop's T, K, b, q and schedule, the mode (see
    `selpe_audit.artifact.modes`) and its settings, and where candidates come from."""

    mode: str = setting("selpe", flag="--selection", key="selection_mode",
                        choices=lambda: list(mode_names()), show_default=False, help=(
        "selection mechanism: " + or_list([f"{d.name} ({d.help})" for d in modes()])
        + "; the Gaussian modes are (epsilon, delta)-DP"))
    # T = 1, b = 20: the selection-signal benchmark's choice (RESULTS.md, selection_signal):
    # at the demo's selection epsilon 1-2 one round's winner keeps 0.6-0.7 of the eps-inf
    # gap to the private rows; T = 5, b = 5 kept 0.04-0.12 (noise scale 10 per round).
    rounds: int = setting(1, "T, selection rounds")
    k: int = setting(3, "K, candidates per quota slot")
    batches: int = setting(20, "b, disjoint private batches")
    q: float = 1.0        # quota growth: m_t = ceil(t q)
    schedule: tuple[float, ...] | None = None  # shares of the selection budget per round
    candidates: Path | None = setting(None, "public JSONL pool of schema-valid candidate "
                                            "records instead of LLM generation")
    model: str | None = setting(None, "GGUF for candidate generation (default: the bundled "
                                      "Gemma 3 270M)")
    gpu_layers: int = setting(0, "layers to offload to a GPU (-1 = all)")
    seed: int = 0         # LLM sampling (public candidates), never DP noise
    channels: str | None = None
    #: the mode's own settings (``[selection.<mode>]``): its descriptor's settings dataclass,
    #: given as one, as a mapping of its fields, or None for its defaults
    settings: Any = None

    def __post_init__(self) -> None:
        try:
            mode = describe(self.mode)
        except ValueError as e:
            raise UserError(f"config: {e}") from None
        object.__setattr__(self, "settings", mode_settings(mode, self.settings))
        if self.rounds < 1 or self.k < 1 or self.batches < 1 or self.q <= 0:
            raise UserError("config: selection: rounds, k, batches must be >= 1 and q > 0")
        if self.schedule is not None:
            if len(self.schedule) != self.rounds or any(s <= 0 for s in self.schedule):
                raise UserError("config: selection: schedule needs one positive share per "
                                "round")
            if not math.isclose(sum(self.schedule), 1.0, abs_tol=1e-9):
                raise UserError("config: selection: schedule shares must sum to 1")

    @property
    def needs_delta(self) -> bool:
        """The mode's rounds are zCDP, converted to (epsilon, delta)."""
        return describe(self.mode).needs_delta

    def quota(self, t: int) -> int:
        return math.ceil(t * self.q)

    def shares(self) -> list[float]:
        return list(self.schedule or (1.0 / self.rounds,) * self.rounds)

    def round_epsilons(self, epsilon: float) -> list[float]:
        return [epsilon * s for s in self.shares()]


def mode_settings(mode: ModeDescriptor, given: Any) -> Any:
    """``given`` (None, a mapping, or the settings object) as ``mode``'s settings object;
    a one-line `UserError` naming the table and what to fix otherwise."""
    if isinstance(given, mode.settings):
        return given
    where = f"config: [selection.{mode.name}]"
    if given is not None and not isinstance(given, Mapping):
        raise UserError(f"{where} must be a table of settings")
    known = {f.name for f in fields(mode.settings)}
    if unknown := sorted(set(given or {}) - known):
        raise UserError(f"{where}: unknown setting(s) {', '.join(unknown)}; known: "
                        f"{', '.join(sorted(known)) or 'none'}")
    try:
        return mode.settings(**(given or {}))
    except (ValueError, TypeError) as e:
        raise UserError(f"{where}: {e}") from None


def _probability(x: Any) -> bool:
    return isinstance(x, int | float) and 0 <= x < 1
