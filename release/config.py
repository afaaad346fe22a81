"""Release configuration: the whole release (`ReleaseConfig`), checked on construction.

Its frozen, keyword-only sections (budget, privacy unit, counts, selection) are in
`release.config_sections`; each refuses an invalid value with a one-line `UserError` when
built, so no invalid config exists; the checks that need the dataset's schema are
`ReleaseConfig.check`. `release.config_file` reads the TOML file below and the CLI's
overrides into one. The TOML reference stays here, in one place for the steward.

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
from dataclasses import dataclass, field
from pathlib import Path

from release.config_sections import (
    DEFAULT_DELTA,
    DEFAULT_TOPICS,
    MAX_DELTA,
    BudgetConfig,
    CountsConfig,
    PersonsConfig,
    PrivacyUnitConfig,
    SelectionConfig,
    setting,
)
from release.database import DatabaseSource, is_database_url
from release.enclave_log import check_log_path, default_log_path
from release.frame_source import FrameSource
from selpe_audit.artifact.counts_modes import counts_modes
from selpe_audit.artifact.modes import modes, or_list
from selpe_audit.errors import UserError
from selpe_audit.schema import CohortRule, Schema


@dataclass(frozen=True, kw_only=True)
class ReleaseConfig:
    """The whole release, checked on construction; `check` adds the checks that need the
    dataset's schema."""

    data: Path | str | FrameSource = setting(  # a file, a postgresql:// URL, or a DataFrame
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
    persons: PersonsConfig = field(default_factory=PersonsConfig)
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
    def source(self) -> Path | DatabaseSource | FrameSource:
        """Where the private rows are: a file, a database query, or a DataFrame (the API)."""
        if isinstance(self.data, FrameSource):
            return self.data
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
