"""Release configuration: a TOML file plus CLI overrides, checked on construction.

Example (``examples/release.toml``)::

    dataset = "ed_triage_demo"
    data = "selpe_audit/data/ed_triage_sample.csv"
    schema = "selpe_audit/data/ed_triage.schema.json"
    out = "out/release"
    release_key = "keys/release.pem"

    [budget]
    epsilon = 2.0          # total for this release
    # delta = 1e-6         # only for the Gaussian selection modes (default 1e-6 there)
    counts = 0.5           # shares of epsilon; they must sum to 1
    selection = 0.5
    lifetime_epsilon = 10.0
    lifetime_delta = 1e-5                # caps the sum of the releases' deltas, too
    lifetime_ledger = "enclave/ledger"   # a folder; one ledger file per dataset

    [privacy_unit]
    unit = "person"        # or "row"
    id_field = "patient_id"
    max_contributions = 2

    [counts]
    gamma = 0.2            # share of the counts budget for cohort counts
    alpha = 0.2            # share for conditional rates
    n_min = 10             # suppress a rate whose noisy cell size is below this

    [[cohorts]]
    name = "older, by ambulance"
    where = { age = [65, 105], arrival_mode = ["ambulance", "helicopter"] }

    [[rates]]
    name = "admission by arrival mode"
    outcome = { field = "disposition", values = ["admitted-ward", "admitted-icu"] }
    cells = ["arrival_mode"]

    [selection]
    mode = "selpe"         # or "pe-histogram", "representatives" (Gaussian, need delta)
    threshold = 1.0        # pe-histogram: drop candidates with noisy votes <= 1 noise scale
    anchors = 0            # representatives: k-means anchors per class (0: the round quota)
    radius = 0.5           # representatives: clip norm of a row's offset from its anchor
    dims = 16              # representatives: dimensions of the public basis

Delta: selpe and the counts are pure epsilon-DP (delta = 0, and a delta > 0 is refused).
The Gaussian modes spend rho-zCDP that OpenDP converts to (epsilon, delta) at the given
delta; leaving delta out uses DEFAULT_DELTA = 1e-6 (a fixed public number: a rule like
1 / n^1.1 would depend on the private row count). Delta should stay well below 1 / (number
of privacy units); more than MAX_DELTA = 1e-3 is refused.
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release.selection import GAUSSIAN_MODES, MODES, SelectionConfig
from selpe_audit.errors import UserError
from selpe_audit.schema import Schema

DEFAULT_EPSILON = 2.0
DEFAULT_LIFETIME_EPSILON = 10.0
DEFAULT_LIFETIME_DELTA = 1e-5  # ten releases at the default delta
DEFAULT_DELTA = 1e-6
MAX_DELTA = 1e-3


@dataclass(frozen=True)
class Cohort:
    """A public rule: numeric fields by closed [lo, hi] ranges, categorical by value sets."""

    name: str
    where: dict[str, tuple[Any, ...]]


@dataclass(frozen=True)
class RateSpec:
    """A binary outcome (field in values) and the public cells its rate is measured in."""

    name: str
    outcome_field: str
    outcome_values: tuple[Any, ...]
    cells: tuple[str, ...]


@dataclass(frozen=True)
class ReleaseConfig:
    dataset: str
    data: Path
    schema: Path
    out: Path
    release_key: Path
    epsilon: float = DEFAULT_EPSILON
    delta: float | None = None
    counts_share: float = 0.5
    selection_share: float = 0.5
    lifetime_epsilon: float = DEFAULT_LIFETIME_EPSILON
    lifetime_delta: float = DEFAULT_LIFETIME_DELTA
    lifetime_ledger: Path = Path("enclave/ledger")
    unit: str = "row"
    id_field: str | None = None
    max_contributions: int = 1
    gamma: float = 0.2
    alpha: float = 0.2
    n_min: int = 10
    invalid_rows: str = "fail"
    cohorts: tuple[Cohort, ...] = ()
    rates: tuple[RateSpec, ...] = ()
    rounds: int = 5
    k: int = 3
    batches: int = 5
    q: float = 1.0
    schedule: tuple[float, ...] | None = None
    candidates: Path | None = None
    model: str | None = None
    gpu_layers: int = 0
    generation_seed: int = 0
    channels: str | None = None
    selection_mode: str = "selpe"
    threshold: float = 1.0
    anchors: int = 0
    radius: float = 0.5
    dims: int = 16

    @property
    def gaussian_selection(self) -> bool:
        return self.selection_share > 0 and self.selection_mode in GAUSSIAN_MODES

    @property
    def selection_delta(self) -> float:
        """The delta the release spends: 0 unless a Gaussian selection mode runs."""
        if not self.gaussian_selection:
            return 0.0
        return DEFAULT_DELTA if self.delta is None else self.delta

    @property
    def counts_epsilon(self) -> float:
        return self.epsilon * self.counts_share

    @property
    def selection_epsilon(self) -> float:
        return self.epsilon * self.selection_share

    def selection_config(self) -> SelectionConfig:
        return SelectionConfig(self.rounds, self.k, self.batches, self.q, self.schedule,
                               self.selection_mode, self.threshold, self.anchors, self.radius,
                               self.dims)

    def check(self, schema: Schema | None = None) -> ReleaseConfig:
        """Raise a one-line `UserError` for anything invalid; return self for chaining."""
        if not self.dataset.strip():
            raise UserError("config: dataset must be a non-empty name")
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise UserError("config: budget.epsilon must be a finite number > 0")
        if self.selection_mode not in MODES:
            raise UserError(f"config: unknown selection mode '{self.selection_mode}'; choose "
                            f"one of {', '.join(MODES)}")
        self._check_delta()
        shares = (self.counts_share, self.selection_share)
        if any(s < 0 for s in shares) or not math.isclose(sum(shares), 1.0, abs_tol=1e-9):
            raise UserError("config: budget.counts + budget.selection must sum to 1 "
                            f"(got {self.counts_share} + {self.selection_share})")
        if not (math.isfinite(self.lifetime_epsilon) and self.lifetime_epsilon > 0):
            raise UserError("config: budget.lifetime_epsilon must be a finite number > 0")
        if self.epsilon > self.lifetime_epsilon:
            raise UserError(f"config: budget.epsilon {self.epsilon} exceeds the lifetime "
                            f"budget {self.lifetime_epsilon}")
        if self.unit not in ("row", "person"):
            raise UserError("config: privacy_unit.unit must be 'row' or 'person'")
        if self.max_contributions < 1:
            raise UserError("config: privacy_unit.max_contributions must be >= 1")
        if self.unit == "row" and self.max_contributions != 1:
            raise UserError("config: max_contributions applies to unit = 'person' only")
        if not (0 <= self.gamma < 1 and 0 <= self.alpha < 1 and self.gamma + self.alpha < 1):
            raise UserError("config: counts.gamma and counts.alpha must be >= 0 with "
                            "gamma + alpha < 1 (the rest is for histograms)")
        if self.n_min < 0:
            raise UserError("config: counts.n_min must be >= 0")
        if self.selection_share > 0:
            try:
                self.selection_config()
            except ValueError as e:
                raise UserError(f"config: {e}") from None
        if self.invalid_rows not in ("fail", "drop"):
            raise UserError("config: invalid_rows must be 'fail' or 'drop'")
        names = [c.name for c in self.cohorts]
        if len(set(names)) != len(names):
            raise UserError("config: cohort names must be unique")
        if schema is not None:
            self._check_against(schema)
        return self

    def _check_delta(self) -> None:
        """budget.delta against the selection mode, and against budget.lifetime_delta."""
        delta = self.delta
        if delta is not None and not _probability(delta):
            raise UserError("config: budget.delta must be a number in [0, 1)")
        if not _probability(self.lifetime_delta):
            raise UserError("config: budget.lifetime_delta must be a number in [0, 1)")
        if self.selection_mode in GAUSSIAN_MODES:
            if delta == 0:
                raise UserError(f"config: selection mode '{self.selection_mode}' is Gaussian "
                                "and needs budget.delta > 0 (leave it out for the default "
                                f"{DEFAULT_DELTA:g})")
            if delta is not None and delta > MAX_DELTA:
                raise UserError(f"config: budget.delta {delta:g} is above {MAX_DELTA:g}; keep "
                                "it well below 1 / (number of privacy units)")
        elif delta:
            raise UserError("config: budget.delta > 0 applies to the Gaussian selection modes "
                            "(pe-histogram, representatives) only; selpe and the counts are "
                            "pure epsilon-DP: set delta = 0 or leave it out")
        if self.selection_delta > self.lifetime_delta:
            raise UserError(f"config: budget.delta {self.selection_delta:g} exceeds the "
                            f"lifetime delta {self.lifetime_delta:g}; lower budget.delta or "
                            "raise budget.lifetime_delta")

    def _check_against(self, schema: Schema) -> None:
        known = set(schema.field_names)
        if self.unit == "person":
            idf = self.id_field or schema.id_field
            if idf is None:
                raise UserError("config: unit = 'person' needs privacy_unit.id_field (or "
                                "x-id in the schema)")
            if idf not in known:
                raise UserError(f"config: privacy_unit.id_field names unknown field '{idf}'")
        for c in self.cohorts:
            for name, rule in c.where.items():
                _check_rule(schema, f"cohort '{c.name}'", name, rule, known)
        for a, b in itertools.combinations(self.cohorts, 2):
            if _overlap(schema, a, b):
                raise UserError(f"config: cohorts '{a.name}' and '{b.name}' overlap; cohorts "
                                "must be disjoint so their counts compose in parallel")
        for r in self.rates:
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


def _check_rule(schema: Schema, where: str, name: str, rule: tuple, known: set[str]) -> None:
    if name not in known:
        raise UserError(f"config: {where} uses unknown field '{name}'")
    f = schema.field(name)
    if f.kind == "numeric":
        if len(rule) != 2 or not all(isinstance(x, int | float) for x in rule) or rule[0] > rule[1]:
            raise UserError(f"config: {where}: '{name}' needs a range [low, high]")
    elif f.kind == "categorical":
        if not rule or not set(rule) <= set(f.enum):
            raise UserError(f"config: {where}: '{name}' must list values from its enum")
    else:
        raise UserError(f"config: {where}: '{name}' is free text or an id; cohorts use "
                        "numeric or categorical fields")


def _overlap(schema: Schema, a: Cohort, b: Cohort) -> bool:
    """Two boxes over the public domain overlap unless some shared field separates them."""
    for name in set(a.where) & set(b.where):
        ra, rb = a.where[name], b.where[name]
        if schema.field(name).kind == "numeric":
            lo, hi = max(ra[0], rb[0]), min(ra[1], rb[1])
            if schema.field(name).is_integer:
                lo = math.ceil(lo)
            if lo > hi:
                return False
        elif not set(ra) & set(rb):
            return False
    return True


def _probability(x: Any) -> bool:
    return isinstance(x, int | float) and 0 <= x < 1


def load_config(path: str | Path | None, overrides: dict[str, Any]) -> ReleaseConfig:
    """TOML (optional) first, then non-None CLI overrides; relative paths are kept as given."""
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{p}: config file not found") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"{p}: not valid TOML ({e})") from None
    flat = _flatten(raw, str(path or "config"))
    flat.update({k: v for k, v in overrides.items() if v is not None})
    for needed in ("data", "schema"):
        if needed not in flat:
            raise UserError(f"config: '{needed}' is required (in the TOML file or as --{needed})")
    flat.setdefault("dataset", Path(flat["data"]).stem)
    flat.setdefault("out", "out/release")
    if "release_key" not in flat:
        raise UserError("config: 'release_key' is required (TOML release_key or --key); make "
                        "one with 'selpe-audit keygen keys/release.pem'")
    if "schedule" in flat:
        flat["schedule"] = tuple(flat["schedule"])
    for k in ("data", "schema", "out", "release_key", "lifetime_ledger", "candidates"):
        if k in flat:
            flat[k] = Path(flat[k])
    try:
        return ReleaseConfig(**flat)
    except TypeError as e:
        raise UserError(f"config: {e}") from None


_SECTIONS = {
    "budget": {"epsilon": "epsilon", "delta": "delta", "counts": "counts_share",
               "selection": "selection_share", "lifetime_epsilon": "lifetime_epsilon",
               "lifetime_delta": "lifetime_delta", "lifetime_ledger": "lifetime_ledger"},
    "privacy_unit": {"unit": "unit", "id_field": "id_field",
                     "max_contributions": "max_contributions"},
    "counts": {"gamma": "gamma", "alpha": "alpha", "n_min": "n_min"},
    "selection": {"rounds": "rounds", "k": "k", "batches": "batches", "q": "q",
                  "schedule": "schedule", "candidates": "candidates", "model": "model",
                  "gpu_layers": "gpu_layers", "seed": "generation_seed",
                  "channels": "channels", "mode": "selection_mode", "threshold": "threshold",
                  "anchors": "anchors", "radius": "radius", "dims": "dims"},
}
_TOP = {"dataset", "data", "schema", "out", "release_key", "invalid_rows"}


def _flatten(raw: dict[str, Any], src: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _TOP:
            flat[key] = value
        elif key in _SECTIONS and isinstance(value, dict):
            for k, v in value.items():
                if k not in _SECTIONS[key]:
                    raise UserError(f"{src}: unknown setting '{key}.{k}'; known: "
                                    f"{sorted(_SECTIONS[key])}")
                flat[_SECTIONS[key][k]] = v
        elif key == "cohorts" and isinstance(value, list):
            flat["cohorts"] = tuple(_cohort(c, src) for c in value)
        elif key == "rates" and isinstance(value, list):
            flat["rates"] = tuple(_rate(r, src) for r in value)
        else:
            raise UserError(f"{src}: unknown setting '{key}'")
    return flat


def _cohort(c: Any, src: str) -> Cohort:
    if not isinstance(c, dict) or "name" not in c or not isinstance(c.get("where"), dict):
        raise UserError(f"{src}: each [[cohorts]] needs a name and a where table")
    where = {k: tuple(v) if isinstance(v, list) else (v,) for k, v in c["where"].items()}
    return Cohort(str(c["name"]), where)


def _rate(r: Any, src: str) -> RateSpec:
    try:
        out = r["outcome"]
        return RateSpec(str(r["name"]), str(out["field"]), tuple(out["values"]),
                        tuple(r["cells"]))
    except (KeyError, TypeError):
        raise UserError(f"{src}: each [[rates]] needs name, outcome = {{ field, values }} "
                        "and cells = [fields]") from None
