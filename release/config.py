"""Release configuration: a TOML file plus CLI overrides, checked on construction.

Frozen, keyword-only sections (budget, privacy unit, counts, selection) that refuse an
invalid value with a one-line `UserError` when built, so no invalid config exists; the
checks that need the dataset's schema are `ReleaseConfig.check`. Over 400 lines: the TOML
reference below and every check's one-line message stay in one place for the steward.

Example (``examples/release.toml``)::

    dataset = "ed_triage_demo"
    data = "selpe_audit/data/ed_triage_sample.csv"   # or postgresql://user@host/db with
    # query = "SELECT ..."  or  table = "schema.name"  (the password: PGPASSWORD / PGPASSFILE)
    schema = "selpe_audit/data/ed_triage.schema.json"
    out = "out/release"
    release_key = "keys/release.pem"
    # enclave_log = "out/enclave.log"  # invalid-row report, timings (default: beside out)

    [budget]
    epsilon = 2.0          # total for this release
    # delta = 1e-6         # only for the Gaussian selection modes (default 1e-6 there)
    counts = 1.0           # shares of epsilon; they must sum to 1 (default: counts only;
    selection = 0.0        # selection buys exemplars for the LLM decoder's prompt)
    lifetime_epsilon = 10.0   # caps of a new dataset's ledger (fixed there; an existing
    lifetime_delta = 1e-5     # ledger's caps rise only by a signed 'selpe-audit ledger
                              # raise'); never above /etc/selpe-audit/installation.toml's
    # lifetime_ledger = "/abs/folder"  # default: $SELPE_AUDIT_LEDGER, else
    #                  # /var/lib/selpe-audit/ledger, else ~/.local/share/selpe-audit/ledger

    [privacy_unit]
    unit = "person"        # or "row"; left out: "person" when id_field is set or the schema
                           # names one (x-id), else "row" (PrivacyUnitConfig.resolved)
    id_field = "patient_id"  # left out: the schema's x-id
    max_contributions = 2  # rows kept per person (default 1)

    [counts]
    mode = "fixed"         # "marginals" (Laplace histograms per class), "fixed" (a fixed
                           # workload of the label's 2-way marginals, Gaussian, zCDP), "aim",
                           # "mst" (OpenDP's adaptive contingency tables); see
                           # selpe_audit.artifact.counts_modes
    class_share = 0.25     # share of the histogram/marginal budget for the class balance
    topic_share = 0.3      # fixed: share of the marginals' rho for the free-text topics x class
    topics = 8             # topic anchors per free-text field (model modes; 0: off); left
                           # out: 8 when a public pool is set ([selection] candidates), else
                           # 0 (set it to build the codebook from LLM candidates instead)
    phrases = "auto"       # model modes: a DP phrase vocabulary per free-text field that has
                           # no topic codebook (release.phrases: OpenDP partition selection);
                           # "auto": where the table is large enough for a term to pass
                           # (release.plan), true: always, false: never
    phrase_share = 0.2     # share of the counts' epsilon (and half their delta) it spends
    phrases_per_unit = 1   # phrases one person may count for (person unit)
    keywords_per_unit = 1  # keywords (words, then word pairs) one unit counts for (long text)
    keyword_slots = 1      # a long text's topics: its first released keywords (model columns)
    max_phrases = 64       # at most this many released phrases per field, largest first
    # deny = "phrases-deny.txt"  # a reviewer's rejected phrases/keywords, one per line: never
                           # released (its SHA-256 and size, not its lines, go in the artifact)
    # aim_rounds = 8       # aim: at most this many rounds (left out: OpenDP's 16 a column)
    # gamma = 0.2          # share of the counts budget for cohort counts (left out: one
    # alpha = 0.2          # marginal's share each: 1 / (1 + fields + tables)); for rates
    n_min = 10             # suppress a rate whose noisy cell size is below this

    [[cohorts]]
    name = "older, by ambulance"
    where = { age = [65, 105], arrival_mode = ["ambulance", "helicopter"] }

    [[rates]]
    name = "admission by arrival mode"
    outcome = { field = "disposition", values = ["admitted-ward", "admitted-icu"] }
    cells = ["arrival_mode"]

    [selection]
    mode = "selpe"         # or "pe-histogram", "representatives" (Gaussian, need delta);
                           # selpe_audit.artifact.modes lists every registered mode

    # each mode's own settings (ModeDescriptor.settings), in a table named after it
    [selection.selpe]
    utility = "minmax"     # each batch's utilities rescaled to span [-1, 0]; or "raw"
    [selection.pe-histogram]
    threshold = 1.0        # drop candidates with noisy votes <= 1 noise scale
    [selection.representatives]
    anchors = 0            # k-means anchors per class (0: the round quota)
    radius = 0.5           # clip norm of a row's offset from its anchor
    dims = 16              # dimensions of the public basis

Delta: selpe and the "marginals" counts are pure epsilon-DP. The counts modes "fixed",
"aim" and "mst" and the Gaussian selection modes spend rho-zCDP that OpenDP converts to
(epsilon, delta); budget.delta is the release's total delta, split evenly over the parts
that need one. Leaving it out uses DEFAULT_DELTA = 1e-6 (a fixed public number: a rule like
1 / n^1.1 would depend on the private row count); a delta > 0 with no such part is refused.
Delta should stay well below 1 / (number of privacy units); more than MAX_DELTA = 1e-3 is
refused.
"""

from __future__ import annotations

import itertools
import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from release.database import DatabaseSource, is_database_url
from release.enclave_log import check_log_path, default_log_path
from release.ledger import DEFAULT_LIFETIME_DELTA as DEFAULT_LIFETIME_DELTA  # re-exported
from release.ledger import DEFAULT_LIFETIME_EPSILON as DEFAULT_LIFETIME_EPSILON
from release.ledger import ledger_folder
from release.phrases import term_kind
from selpe_audit.artifact.counts_modes import DEFAULT_COUNTS_MODE, counts_modes, describe_counts
from selpe_audit.artifact.modes import UTILITIES as UTILITIES  # re-exported
from selpe_audit.artifact.modes import ModeDescriptor, describe, mode_names, modes, or_list
from selpe_audit.errors import UserError
from selpe_audit.schema import CohortRule, Field, Schema

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


@dataclass(frozen=True)
class CliSetting:
    """One CLI argument of ``selpe-audit release``, as its config field declares it."""

    section: str | None  # None: a top-level setting
    flag: str
    key: str
    type: type
    choices: list[str] | None
    help: str


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

    def terms(self, f: Field) -> tuple[str, int, int]:
        """A free-text field's DP vocabulary: its kind (by the schema's maxLength), the terms
        one unit counts for, and its topic columns (slots)."""
        kind = term_kind(f.max_length)
        if kind == "phrases":
            return kind, self.phrases_per_unit, 1
        return kind, self.keywords_per_unit, self.keyword_slots

    @property
    def is_model(self) -> bool:
        """The mode releases a counts model, which free-text topics can be columns of."""
        return describe_counts(self.mode).model

    @property
    def needs_delta(self) -> bool:
        """The mode's counts are zCDP, converted to (epsilon, delta)."""
        return describe_counts(self.mode).needs_delta




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
        object.__setattr__(self, "settings", _mode_settings(mode, self.settings))
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



def _mode_settings(mode: ModeDescriptor, given: Any) -> Any:
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


@dataclass(frozen=True, kw_only=True)
class ReleaseConfig:
    """The whole release, checked on construction; `check` adds the checks that need the
    dataset's schema."""

    data: Path | str = setting(  # a file, or a postgresql:// URL (with query or table)
        help="private rows: .csv, .parquet or .jsonl, or a database "
        "postgresql://user@host[:port]/db (password from PGPASSWORD or PGPASSFILE, never "
        "here) with --query or --table")
    query: str | None = setting(None, "with a database --data: the SELECT that returns the rows "
                                      "(run once, read-only, in one repeatable-read snapshot)")
    table: str | None = setting(None, "with a database --data: read schema.name whole")
    schema: Path = setting(help="dataset schema (JSON Schema with x-label, x-bins)")
    dataset: str = setting(help="dataset name (the lifetime ledger is per dataset)")
    out: Path = setting(help="artifact folder to write (default out/release)")
    release_key: Path = setting(help="release signing key (PEM)", flag="--key")
    invalid_rows: str = setting("fail", "what to do with rows that break the schema",
                                choices=lambda: ["fail", "drop"])
    leave_out_exhausted: bool = setting(
        False, "leave out, before any mechanism, the people this release would take past "
        "their lifetime epsilon (default: refuse the release); how many stays in the enclave "
        "log", show_default=False)
    enclave_log: Path | None = None  # None: <out>/../enclave.log (never inside out)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    privacy_unit: PrivacyUnitConfig = field(default_factory=PrivacyUnitConfig)
    counts: CountsConfig = field(default_factory=CountsConfig)
    selection: SelectionConfig = field(default_factory=SelectionConfig)

    def __post_init__(self) -> None:
        if not self.dataset.strip():
            raise UserError("config: dataset must be a non-empty name")
        if self.invalid_rows not in ("fail", "drop"):
            raise UserError("config: invalid_rows must be 'fail' or 'drop'")
        log = default_log_path(self.out) if self.enclave_log is None else self.enclave_log
        check_log_path(log, self.out)
        object.__setattr__(self, "enclave_log", Path(log).absolute())
        if (self.query or self.table) and not is_database_url(str(self.data)):
            raise UserError("config: query and table apply to a database source only "
                            "(data = \"postgresql://user@host/db\")")
        _ = self.source  # a database source checks itself (no password, one query or table)
        self._check_delta()

    @property
    def source(self) -> Path | DatabaseSource:
        """Where the private rows are: a file, or a database query."""
        if is_database_url(str(self.data)):
            return DatabaseSource(str(self.data), query=self.query, table=self.table)
        return Path(self.data)

    @property
    def selects(self) -> bool:
        """Whether the release spends any budget on selection."""
        return self.budget.selection_share > 0

    @property
    def topics(self) -> int:
        """Topic anchors per free-text field: 0 unless a model counts mode runs; left out,
        DEFAULT_TOPICS when a public pool gives the texts (LLM texts cost minutes on a CPU
        and are asked for by setting counts.topics)."""
        if not self.counts.is_model:
            return 0
        if self.counts.topics is not None:
            return self.counts.topics
        return DEFAULT_TOPICS if self.selection.candidates is not None else 0

    def phrase_fields(self, schema: Schema) -> list[str]:
        """Free-text fields whose topics are a DP phrase vocabulary (`release.phrases`): in a
        model counts mode with counts.phrases on, every one when no embedding codebook is
        built (counts.topics 0)."""
        if not (self.counts.is_model and self.counts.phrases) or self.topics > 0:
            return []
        return [f.name for f in schema.by_kind("text")]

    @property
    def _zcdp_parts(self) -> int:
        """How many parts spend rho-zCDP converted to (epsilon, delta): counts, selection."""
        return int(self.counts.needs_delta) + int(self.selects and self.selection.needs_delta)

    def _delta_share(self) -> float:
        total = DEFAULT_DELTA if self.budget.delta is None else self.budget.delta
        return total / self._zcdp_parts if self._zcdp_parts else 0.0

    @property
    def selection_delta(self) -> float:
        """The selection's delta: 0 unless a zCDP selection mode runs."""
        return self._delta_share() if self.selects and self.selection.needs_delta else 0.0

    @property
    def counts_delta(self) -> float:
        """The counts' delta: 0 for a pure-DP counts mode ("marginals")."""
        return self._delta_share() if self.counts.needs_delta else 0.0

    @property
    def release_delta(self) -> float:
        """The delta the whole release spends (counts and selection)."""
        return self.selection_delta + self.counts_delta

    def check(self, schema: Schema) -> ReleaseConfig:
        """The checks that need the schema (one-line `UserError`); return self."""
        self._check_against(schema)
        return self

    def _check_delta(self) -> None:
        """budget.delta against the selection mode, and against budget.lifetime_delta."""
        delta = self.budget.delta
        if self._zcdp_parts:
            what = (f"counts mode '{self.counts.mode}'" if self.counts.needs_delta
                    else f"selection mode '{self.selection.mode}'")
            if delta == 0:
                raise UserError(f"config: {what} is Gaussian (zCDP) and needs budget.delta > 0 "
                                f"(leave it out for the default {DEFAULT_DELTA:g}, or use "
                                "counts.mode = \"marginals\" with a pure-DP selection mode)")
            if delta is not None and delta > MAX_DELTA:
                raise UserError(f"config: budget.delta {delta:g} is above {MAX_DELTA:g}; keep "
                                "it well below 1 / (number of privacy units)")
        elif delta:
            zcdp = [d.name for d in modes() if d.needs_delta]
            pure = [d.name for d in modes() if not d.needs_delta]
            counts_zcdp = [d.name for d in counts_modes() if d.needs_delta]
            counts_pure = [d.name for d in counts_modes() if not d.needs_delta]
            raise UserError(f"config: budget.delta > 0 applies to the zCDP counts modes "
                            f"({', '.join(counts_zcdp)}) and the Gaussian selection modes "
                            f"({', '.join(zcdp)}) only; counts mode {or_list(counts_pure)} and "
                            f"{or_list(pure)} are pure epsilon-DP: set delta = 0 or leave it "
                            "out")
        cap = self.budget.lifetime_delta  # None: the ledger checks its stored cap
        if cap is not None and self.release_delta > cap:
            raise UserError(f"config: budget.delta {self.release_delta:g} exceeds the "
                            f"lifetime delta {cap:g}; lower budget.delta or leave "
                            "budget.lifetime_delta out")

    def _check_against(self, schema: Schema) -> None:
        known = set(schema.field_names)
        unit = self.privacy_unit.resolved(schema)
        if unit.unit == "person":
            idf = unit.id_field or schema.id_field
            if idf is None:
                raise UserError("config: unit = 'person' needs privacy_unit.id_field (or "
                                "x-id in the schema)")
            if idf not in known:
                raise UserError(f"config: privacy_unit.id_field names unknown field '{idf}'")
        rules = []
        for c in self.counts.cohorts:
            try:
                rules.append((c, CohortRule.parse(schema, c.where)))
            except ValueError as e:
                raise UserError(f"config: cohort '{c.name}': {e}") from None
        for (a, rule_a), (b, rule_b) in itertools.combinations(rules, 2):
            if rule_a.overlaps(rule_b):
                raise UserError(f"config: cohorts '{a.name}' and '{b.name}' overlap; cohorts "
                                "must be disjoint so their counts compose in parallel")
        for r in self.counts.rates:
            where = f"rate '{r.name}'"
            if r.outcome_field not in known:
                raise UserError(f"config: {where} outcome names unknown field '{r.outcome_field}'")
            f = schema.field(r.outcome_field)
            if f.kind != "categorical" or not set(r.outcome_values) <= set(f.enum):
                raise UserError(f"config: {where} outcome must be values of a categorical field")
            for c in r.cells:
                if c not in known:
                    raise UserError(f"config: {where} cells name unknown field '{c}'")
                if schema.field(c).kind not in ("categorical", "numeric"):
                    raise UserError(f"config: {where} cells must be categorical or numeric "
                                    f"fields ('{c}' is not)")


def _probability(x: Any) -> bool:
    return isinstance(x, int | float) and 0 <= x < 1


#: The sections' classes by TOML table (each is also the ReleaseConfig field of that name).
_SECTION_TYPES = {"budget": BudgetConfig, "privacy_unit": PrivacyUnitConfig,
                  "counts": CountsConfig, "selection": SelectionConfig}
#: settings whose TOML key is not their field's name (budget's two shares)
_TOML_NAMES = {("budget", "counts_share"): "counts", ("budget", "selection_share"): "selection"}
#: fields set by their own TOML tables ([[cohorts]], [[rates]], [selection.<mode>]), not as
#: keys of their section
_OWN_TABLES = {"cohorts", "rates", "settings"}


def _section_keys() -> dict[str, dict[str, tuple[str, str]]]:
    """TOML table -> {TOML key: (config section, field)}, from the sections' fields: a
    setting is declared once, as a field of its section's class."""
    return {section: {_TOML_NAMES.get((section, f.name), f.name): (section, f.name)
                      for f in fields(cls) if f.name not in _OWN_TABLES}
            for section, cls in _SECTION_TYPES.items()}


_SECTIONS = _section_keys()
#: the top-level settings: ReleaseConfig's fields that are not sections
_TOP = {f.name for f in fields(ReleaseConfig)} - set(_SECTION_TYPES)
#: CLI override keys (flat, as `release.cli` passes them) -> (config section, field): each
#: field's name, and the key its declaration gives (``counts_mode``, ``selection_mode``)
OVERRIDES: dict[str, tuple[str, str]] = {
    **{f: (s, f) for table in _SECTIONS.values() for s, f in table.values()},
    **{f.metadata["key"]: (section, f.name) for section, cls in _SECTION_TYPES.items()
       for f in fields(cls) if f.metadata.get("key")},
    "cohorts": ("counts", "cohorts"), "rates": ("counts", "rates"),
}


def cli_settings() -> list[CliSetting]:
    """The CLI arguments of ``selpe-audit release``: every setting declared with help, top
    level first, then section by section, then the selection modes' own settings (a field
    with help in its metadata), with type, choices and default from the declaration."""
    out, flags = [], set()
    declared = [(None, ReleaseConfig), *_SECTION_TYPES.items(),
                *(("selection", d.settings) for d in modes())]
    for section, cls in declared:
        for f in fields(cls):
            m = f.metadata
            if not m.get("help") or (flag := m.get("flag") or
                                     "--" + f.name.replace("_", "-")) in flags:
                continue  # a mode sharing a setting's name shares its flag
            flags.add(flag)
            choices = m.get("choices")
            shown = (m.get("show_default", True) and f.default is not MISSING
                     and f.default is not None)
            out.append(CliSetting(
                section, flag, m.get("key") or f.name, _scalar_type(str(f.type)),
                list(choices() if callable(choices) else choices) if choices else None,
                m["help"] + (f" (default {f.default:g})" if shown and isinstance(f.default, float)
                             else f" (default {f.default})" if shown else "")))
    return out


def _scalar_type(annotation: str) -> type:
    """A field's CLI type from its annotation: bool (a switch), float, int, else str (paths
    are made by `load_config`)."""
    first = annotation.split("|")[0].strip()
    return {"bool": bool, "float": float, "int": int}.get(first, str)


def setting_keys() -> frozenset[str]:
    """Every flat key `load_config` takes as an override (the CLI's argument names)."""
    return frozenset(_TOP | OVERRIDES.keys() | {s.key for s in cli_settings()})


_PATHS = {"data", "schema", "out", "release_key", "lifetime_ledger", "candidates",
          "enclave_log", "deny"}


def load_config(path: str | Path | None, overrides: dict[str, Any]) -> ReleaseConfig:
    """TOML (optional) first, then non-None CLI overrides (flat keys: ``epsilon``,
    ``selection_mode``...); relative paths are kept as given. Checked on construction."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{p}: config file not found") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"{p}: not valid TOML ({e})") from None
    top, sections, mode_tables = _read_tables(raw, str(path or "config"))
    active = overrides.get("selection_mode") or sections["selection"].get(
        "mode", SelectionConfig.mode)
    for key, value in overrides.items():
        if value is None:
            continue
        if key in _TOP:
            top[key] = value
        elif key in OVERRIDES:
            section, name = OVERRIDES[key]
            sections[section][name] = value
        elif (owner := mode_setting_owner(key, active)) is not None:
            mode_tables.setdefault(owner, {})[key] = value
        else:
            raise UserError(f"config: unknown setting '{key}'")
    for name, table in mode_tables.items():  # every mode's table is checked, used or not
        _mode_settings(describe(name), table)
    sections["selection"]["settings"] = mode_tables.get(active)
    for needed in ("data", "schema"):
        if needed not in top:
            raise UserError(f"config: '{needed}' is required (in the TOML file or as --{needed})")
    if "dataset" not in top:
        if not is_database_url(str(top["data"])):
            top["dataset"] = Path(top["data"]).stem
        elif top.get("table"):
            top["dataset"] = str(top["table"]).rsplit(".", 1)[-1]
        else:
            raise UserError("config: name the dataset (--dataset or dataset = ...) when the "
                            "rows come from a database query; the lifetime ledger is per "
                            "dataset")
    top.setdefault("out", "out/release")
    if "release_key" not in top:
        raise UserError("config: 'release_key' is required (TOML release_key or --key); make "
                        "one with 'selpe-audit keygen keys/release.pem'")
    sel = sections["selection"]
    if "schedule" in sel:
        sel["schedule"] = tuple(sel["schedule"])
    for values in (top, *sections.values()):
        for k in _PATHS & values.keys():
            if not (k in ("data", "lifetime_ledger") and is_database_url(str(values[k]))):
                values[k] = Path(values[k])
    try:
        return ReleaseConfig(**top, **{name: _SECTION_TYPES[name](**values)
                                       for name, values in sections.items()})
    except TypeError as e:
        raise UserError(f"config: {e}") from None


def _read_tables(raw: dict[str, Any], src: str,
                 ) -> tuple[dict[str, Any], dict[str, dict], dict[str, dict]]:
    """The TOML's top-level settings, its sections' settings, and the selection modes' own
    tables (``[selection.<mode>]``)."""
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTION_TYPES}
    mode_tables: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        if key in _TOP:
            top[key] = value
        elif key in _SECTIONS and isinstance(value, dict):
            for k, v in value.items():
                if key == "selection" and k in mode_names() and isinstance(v, dict):
                    mode_tables[k] = v
                elif k in _SECTIONS[key]:
                    section, name = _SECTIONS[key][k]
                    sections[section][name] = v
                elif key == "selection" and (owner := mode_setting_owner(k)) is not None:
                    raise UserError(f"{src}: selection.{k} is a setting of selection mode "
                                    f"'{owner}': write it in a [selection.{owner}] table")
                else:
                    raise UserError(f"{src}: unknown setting '{key}.{k}'; known: "
                                    f"{sorted(_SECTIONS[key])}")
        elif key == "cohorts" and isinstance(value, list):
            sections["counts"]["cohorts"] = tuple(_cohort(c, src) for c in value)
        elif key == "rates" and isinstance(value, list):
            sections["counts"]["rates"] = tuple(_rate(r, src) for r in value)
        else:
            raise UserError(f"{src}: unknown setting '{key}'")
    return top, sections, mode_tables


def mode_setting_owner(key: str, active: str | None = None) -> str | None:
    """The selection mode a flat setting ``key`` belongs to (a CLI flag such as
    ``--utility``, or an old flat key of ``[selection]``): the ``active`` mode if its
    settings have that field, else the first mode's whose do."""
    owners = [d.name for d in modes() if key in {f.name for f in fields(d.settings)}]
    return active if active in owners else next(iter(owners), None)


def _cohort(c: Any, src: str) -> CohortSpec:
    if not isinstance(c, dict) or "name" not in c or not isinstance(c.get("where"), dict):
        raise UserError(f"{src}: each [[cohorts]] needs a name and a where table")
    where = {k: tuple(v) if isinstance(v, list) else (v,) for k, v in c["where"].items()}
    return CohortSpec(str(c["name"]), where)


def _rate(r: Any, src: str) -> RateSpec:
    try:
        out = r["outcome"]
        return RateSpec(str(r["name"]), str(out["field"]), tuple(out["values"]),
                        tuple(r["cells"]))
    except (KeyError, TypeError):
        raise UserError(f"{src}: each [[rates]] needs name, outcome = {{ field, values }} "
                        "and cells = [fields]") from None
