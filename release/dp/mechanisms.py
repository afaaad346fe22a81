"""Every OpenDP call of the release lives here.

Noise is never hand-written and never seeded: each released number comes out of an OpenDP
measurement, and the epsilon recorded for it is what OpenDP's privacy map says. Sensitivity
and noise stay together inside OpenDP (the polars front-end derives the noise scale from
the privacy unit and the budget it is given).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import opendp.prelude as dp
import polars as pl
from opendp.mod import GLOBAL_FEATURES

from release.dp.calibration import calibrate
from release.dp.compat import polars_plan

IdsT = TypeVar("IdsT", pl.Expr, pl.Series)

#: OpenDP's flag for user-defined domains, transformations and measurements (whose maps are
#: ours to get right): turned on only while one is built (`_user_defined`), never globally.
HONEST_BUT_CURIOUS = "honest-but-curious"

COUNT_COLUMN = "dp_count"
#: The user domain of the private input to selection rounds
#: (`release.selection.types.PrivateClasses`).
PRIVATE_DOMAIN = "SelPEPrivateBatches"
#: SelPE's round input (`release.selection.types.OneClassPerUnit`): one class per unit.
SELPE_DOMAIN = "SelPEOneClassPerUnit"


@contextmanager
def _user_defined() -> Iterator[None]:
    """Enable "honest-but-curious" for the construction of one user-defined OpenDP object."""
    was_on = HONEST_BUT_CURIOUS in GLOBAL_FEATURES
    dp.enable_features(HONEST_BUT_CURIOUS)
    try:
        yield
    finally:
        if not was_on:
            dp.disable_features(HONEST_BUT_CURIOUS)


def post_processing(function: Callable[[Any], Any]) -> dp.Function:
    """A pure post-processing step as an OpenDP Function (user-defined: built under the flag)."""
    with _user_defined():
        return dp.new_function(function, TO="ExtrinsicObject")


def _user_domain(name: str) -> dp.Domain:
    """A private input the functions check themselves (OpenDP does not call the member
    test when a measurement is invoked)."""
    with _user_defined():
        return dp.user_domain(name, lambda _: True)


@dataclass(frozen=True)
class PrivacyUnit:
    """Rows (``id_field`` None) or people whose rows OpenDP truncates to ``max_contributions``.

    ``id_field`` names the frame column that identifies a person (its `unit_codes`).
    """

    id_field: str | None = None
    max_contributions: int = 1

    def bounded(self, query: Any) -> Any:
        """A Context's ``query`` with each person's rows cut to ``max_contributions``
        (OpenDP's truncate_per_group). It keeps a person's first rows of the frame, which
        `new_context` shuffled once: a uniformly random sample of them, as OpenDP's own
        "sample", without its shuffle per person (most of the counts' time, and 8 GB, at
        10^7 rows of 5 million people)."""
        if self.id_field is None:
            return query
        return query.truncate_per_group(self.max_contributions, keep="first")

    def opendp_unit(self) -> tuple:
        if self.id_field is None:
            return dp.unit_of(contributions=1)
        return dp.unit_of(contributions=1, identifier=pl.col(self.id_field))


def unit_codes(ids: IdsT) -> IdsT:
    """Each row's unit (a person id: an expression or a series) as a u32 code, the id's
    dense rank. Injective, so one person's rows stay one person's rows; OpenDP reads an
    identifier only to group rows by it (its truncations keep a unit's first, or a random,
    k rows), so a renumbering of the units changes no output's distribution. Cheaper to
    group by than the id's text at 10^7 rows, and exact where a hash could merge two
    people into one unit and break the per-person bound."""
    return ids.rank("dense")


@dataclass(frozen=True)
class CountQuery:
    """Counts of rows per public key combination; every key of ``keys`` is released."""

    id: str
    by: tuple[str, ...]
    keys: pl.DataFrame
    epsilon: float
    scope: str
    composition: str


@dataclass(frozen=True)
class NoisyCounts:
    """One measurement's output (``dp_count`` per key) and its OpenDP accounting."""

    id: str
    table: pl.DataFrame
    constructor: str
    mechanism: str
    scale: float
    epsilon: float
    scope: str
    composition: str


@dataclass(frozen=True)
class CountsRelease:
    results: list[NoisyCounts]
    total_epsilon: float


def count_measurement(ctx: dp.Context, unit: PrivacyUnit, q: CountQuery) -> dp.Measurement:
    """The OpenDP measurement of one count query, calibrated to the next budget slot of ``ctx``.

    The plan: truncation per person (if any), group-by count, join on the public keys.
    The scale comes from OpenDP's map (`calibrate`); the Context checks it again when the
    query is submitted.
    """
    query = (unit.bounded(ctx.query()).group_by(list(q.by))
             .agg(dp.len(signed=True).alias(COUNT_COLUMN))
             .join(q.keys.lazy(), on=list(q.by), how="right"))
    plan = polars_plan(query)  # the LazyFrame plan OpenDP checks
    domain, metric = ctx.accountant.input_space

    def make(scale: float) -> dp.Measurement:
        return dp.m.make_private_lazyframe(domain, metric, ctx.accountant.output_measure,
                                           lazyframe=plan, global_scale=scale)

    return calibrate(make, ctx.d_in, float(ctx.d_mids[0]))[0]


def measure_count(ctx: dp.Context, unit: PrivacyUnit, q: CountQuery) -> NoisyCounts:
    """Run count query ``q`` in ``ctx``'s next slot: its noisy counts and OpenDP's accounting
    (``epsilon`` holds the slot's measure: rho in a zCDP Context)."""
    measurement = count_measurement(ctx, unit, q)
    summary = dp.summarize_polars_measurement(measurement)
    table = ctx(measurement).collect().select([*q.by, COUNT_COLUMN])
    return NoisyCounts(
        id=q.id, table=table, constructor="opendp.extras.polars: group_by().agg(dp.len())",
        mechanism=str(summary["distribution"][0]), scale=float(summary["scale"][0]),
        epsilon=float(measurement.map(ctx.d_in)), scope=q.scope, composition=q.composition)


@dataclass(frozen=True)
class NoisyCount:
    """One noisy number and its OpenDP accounting."""

    value: int
    mechanism: str
    scale: float
    epsilon: float


SIZE_CONSTRUCTOR = "opendp.extras.polars: select(dp.len())"


def measure_size(priv_frame: pl.LazyFrame, unit: PrivacyUnit, epsilon: float) -> NoisyCount:
    """The number of rows after each person's rows are cut to their bound, released with
    OpenDP's integer Laplace at ``epsilon`` (pure DP) through a Context of its own: what
    the release's plan is sized by."""
    names = priv_frame.collect_schema().names()
    frame = priv_frame.select(unit.id_field if unit.id_field is not None else names[0])
    ctx = new_context(frame, unit, [epsilon])
    plan = polars_plan(unit.bounded(ctx.query()).select(dp.len(signed=True).alias(COUNT_COLUMN)))
    domain, metric = ctx.accountant.input_space

    def make(scale: float) -> dp.Measurement:
        return dp.m.make_private_lazyframe(domain, metric, ctx.accountant.output_measure,
                                           lazyframe=plan, global_scale=scale)

    measurement = calibrate(make, ctx.d_in, float(ctx.d_mids[0]))[0]
    summary = dp.summarize_polars_measurement(measurement)
    value = int(ctx(measurement).collect()[COUNT_COLUMN][0])
    return NoisyCount(value, str(summary["distribution"][0]), float(summary["scale"][0]),
                      float(measurement.map(ctx.d_in)))


def new_context(priv_frame: pl.LazyFrame, unit: PrivacyUnit, budgets: list[float],
                measure: str = "epsilon") -> dp.Context:
    """A compositor over a frame of u32 key codes (and the unit codes, if any);
    ``budgets`` are the queries' epsilons, or their rhos with ``measure="rho"`` (zCDP:
    Gaussian noise)."""
    types = {pl.UInt32: dp.u32, pl.UInt64: dp.u64, pl.String: dp.String}
    domain = dp.lazyframe_domain([dp.series_domain(name, dp.atom_domain(T=types[dtype]))
                                  for name, dtype in priv_frame.collect_schema().items()])
    # collected: OpenDP runs every query on this plan, which should hold the codes, not the
    # typed rows and the expressions that derived them (42 -> 25 s, 5.1 -> 3.3 GB for the
    # fixed mode's counts of 10^6 rows); shuffled once for `PrivacyUnit.bounded`, then
    # grouped by person (a stable sort: each person's rows stay in the shuffled order),
    # which makes each truncation's pass over the people cheaper
    data = priv_frame.collect()
    if unit.id_field is not None:
        data = (data.sample(fraction=1.0, shuffle=True)
                .sort(unit.id_field, maintain_order=True))
    return spooled_context(data, domain=domain, privacy_unit=unit.opendp_unit(),
                           privacy_loss=dp.loss_of(**{measure: sum(budgets)}),
                           split_by_weights=budgets)


SPOOL_PREFIX = "selpe-audit-spool-"
SPOOL_ENV = "SELPE_AUDIT_SPOOL"  # a folder for the spool (default: memory, else $TMPDIR)
MEMORY = Path("/dev/shm")


def spooled_context(priv_data: pl.DataFrame, **compositor: Any) -> dp.Context:
    """``dp.Context.compositor`` over ``priv_data`` read from a private temporary file.

    OpenDP hands a query's LazyFrame between Python and Rust serialized, data included, so
    a frame held in memory is copied at every crossing: a contingency table over 10^7 rows
    of 18 codes took 7 GB beyond the frame itself (about 11x its bytes). A frame scanned
    from a file crosses as its path, and each query reads only the columns it needs (the
    same table: 1.6 GB, in half the time). The file (Arrow IPC: the codes, or a phrase
    step's units and terms) lies in a folder only this user can open, named after this
    process, in memory (``/dev/shm``) where it has room, else in ``$TMPDIR`` inside the
    enclave (``$SELPE_AUDIT_SPOOL`` names another folder); it is deleted with the Context,
    at exit, and on SIGTERM or SIGINT during a release (`release.pipeline`), and a release
    that starts deletes what a killed one left (`sweep_spools`)."""
    root = spool_root(priv_data.estimated_size())
    folder = Path(tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-", dir=root))  # 0700
    _SPOOLS.add(folder)
    path = folder / "rows.arrow"
    try:
        priv_data.write_ipc(path)
        ctx = dp.Context.compositor(data=pl.scan_ipc(path, memory_map=False), **compositor)
    except BaseException:
        _remove(folder)
        raise
    weakref.finalize(ctx, _remove, folder)
    return ctx


#: this process's spool folders that exist (`remove_spools` deletes them on a signal)
_SPOOLS: set[Path] = set()


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    _SPOOLS.discard(folder)


def remove_spools() -> None:
    """Delete every spool folder of this process now (a signal handler's last act)."""
    for folder in list(_SPOOLS):
        _remove(folder)


def spool_root(size: int = 0) -> Path:
    """Where spools go: ``$SELPE_AUDIT_SPOOL``, else memory (``/dev/shm``) when it holds
    twice ``size`` bytes, else ``$TMPDIR``."""
    env = os.environ.get(SPOOL_ENV, "").strip()
    if env:
        return Path(env)
    if MEMORY.is_dir() and os.access(MEMORY, os.W_OK | os.X_OK):
        st = os.statvfs(MEMORY)
        if st.f_bavail * st.f_frsize > 2 * size:
            return MEMORY
    return Path(tempfile.gettempdir())


def sweep_spools() -> int:
    """Delete the spool folders of this user's processes that are gone (a release killed
    outright cannot delete its own); how many were deleted."""
    gone = 0
    for root in {spool_root(), MEMORY, Path(tempfile.gettempdir())}:
        if not root.is_dir():
            continue
        for folder in root.glob(f"{SPOOL_PREFIX}*"):
            pid = folder.name.removeprefix(SPOOL_PREFIX).split("-", 1)[0]
            try:
                mine = folder.stat().st_uid == os.getuid()
            except OSError:
                continue
            if mine and folder.is_dir() and not _alive(pid):
                shutil.rmtree(folder, ignore_errors=True)
                gone += 1
    return gone


def _alive(pid: str) -> bool:
    """Whether process ``pid`` (a spool folder's) still runs; a folder named otherwise (an
    earlier version's, without a pid) is never taken for gone: its release may be running."""
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_counts(priv_frame: pl.LazyFrame, unit: PrivacyUnit,
                   queries: list[CountQuery]) -> CountsRelease:
    """Run every count query through one OpenDP compositor (sequential composition).

    ``priv_frame`` holds the private rows plus derived public-key columns (class, bin,
    cohort...) computed row by row, which keeps neighbouring datasets neighbouring.
    Joining each grouped count onto the full public key set (OpenDP's key sanitizer)
    releases every key, empty ones included, so the released keys never depend on data.
    """
    ctx = new_context(priv_frame, unit, [q.epsilon for q in queries])
    results = [measure_count(ctx, unit, q) for q in queries]
    spent = float(sum(ctx.current_privacy_loss()))
    return CountsRelease(results, spent)


# ----- SelPE selection: per-batch noisy max over utilities in [-1, 0] ----------------------

NOISY_MAX_CONSTRUCTOR = (
    "opendp.transformations.make_user_transformation (one class per unit, stability 1) >> "
    "per batch: make_user_transformation (utilities in [-1, 0], L-inf) >> "
    "opendp.measurements.then_noisy_max (MaxDivergence, non-monotone L-inf); batches and "
    "classes in parallel")

def utility_metric() -> dp.Metric:
    """Utilities u_i(s) = -g(center_i, s) lie in [-1, 0], so one privacy unit (which sits in a
    single batch) moves a batch's score vector by at most 1 in L-infinity, in either
    direction: the scores are *not* monotone."""
    return dp.linf_distance(T=float, monotonic=False)


def noisy_max_with_scale(n_candidates: int, scale: float) -> dp.Measurement:
    """OpenDP's report-noisy-max (MaxDivergence) over ``n_candidates`` utilities."""
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n_candidates)
    return dp.m.make_noisy_max(domain, utility_metric(), dp.max_divergence(), scale=scale)


def batch_noisy_max(n_candidates: int, epsilon: float) -> dp.Measurement:
    """Noisy max calibrated by OpenDP's privacy map to ``epsilon`` at L-inf distance 1.

    For non-monotone scores OpenDP's map is eps = 2 d_in / scale, so the scale found is
    2 / epsilon (the SelPE paper's exp(eps u) sampling would be 2 eps-DP; we do not copy it).
    """
    return noisy_max_with_scale(n_candidates, noisy_max_scale(n_candidates, epsilon))


def noisy_max_scale(n_candidates: int, epsilon: float) -> float:
    """The scale whose OpenDP privacy map at L-inf distance 1 is <= epsilon (2 / epsilon)."""
    return calibrate(lambda s: noisy_max_with_scale(n_candidates, s), 1.0, epsilon)[1]


def selection_compositor(epsilons: list[float]) -> dp.Measurement:
    """Adaptive composition over rounds: each round's candidates depend on earlier winners."""
    return dp.c.make_adaptive_composition(_user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(),
                                          dp.max_divergence(), d_in=1, d_mids=list(epsilons))


def selection_round(epsilon: float, function: Callable[[Any], Any]) -> dp.Measurement:
    """A round as one user measurement with map epsilon * d_in, for a mode whose whole
    round ``function`` is epsilon-DP per unit by its own argument (selpe builds its round
    from OpenDP parts instead: `batch_selector`, `parallel_batches`)."""
    with _user_defined():
        return dp.m.make_user_measurement(
            _user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(), dp.max_divergence(),
            function=function, privacy_map=lambda d_in: epsilon * d_in, TO="ExtrinsicObject")


def one_class_per_unit_map(apply_rule: Callable[[Any], Any]) -> dp.Transformation:
    """The private input -> SelPE's input (``apply_rule``: the `OneClassPerUnit` constructor).

    The rule keeps each unit's rows of one class, chosen from that unit's rows alone, so
    d_in units added or removed change at most d_in units of the output: stability 1.
    """
    with _user_defined():
        return dp.t.make_user_transformation(
            _user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(), _user_domain(SELPE_DOMAIN),
            dp.symmetric_distance(), function=apply_rule, stability_map=lambda d_in: d_in)


def batch_selector(utilities: Callable[[Any], Any], n_candidates: int,
                   scale: float) -> dp.Measurement:
    """One batch: SelPE's input -> the batch's utilities (a stable transformation) chained
    with OpenDP's noisy max (``then_noisy_max``); OpenDP's map of the chain is its epsilon.

    The utilities are clipped to [-1, 0] here, so any two inputs give vectors at most 1
    apart in L-inf (not monotone): stability min(d_in, 1).
    """
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n_candidates)
    with _user_defined():
        to_utilities = dp.t.make_user_transformation(
            _user_domain(SELPE_DOMAIN), dp.symmetric_distance(), domain, utility_metric(),
            function=lambda priv: [float(u) for u in
                                   np.clip(np.asarray(utilities(priv), dtype=np.float64),
                                           -1.0, 0.0)],
            stability_map=lambda d_in: float(min(d_in, 1)))
    return to_utilities >> dp.m.then_noisy_max(dp.max_divergence(), scale=scale)


def parallel_batches(parts: dict[Any, dp.Measurement],
                     combine: Callable[[dict[Any, Any]], Any]) -> dp.Measurement:
    """Parallel composition of ``parts`` over disjoint privacy units, on SelPE's input.

    OpenDP 0.16 offers no parallel-composition combinator for a user domain (its
    compositors are sequential), so this one step is a user measurement; its map is built
    from OpenDP's maps of the parts: d_in units sit in at most min(d_in, parts) parts, each
    charged at most its own map at d_in. Contract: every unit reaches exactly one part
    (SelPE: one class by `one_class_per_unit`, one batch by the keyed hash of its id).
    ``combine`` post-processes the parts' outputs inside the measurement.
    """
    n = len(parts)

    def privacy_map(d_in: int) -> float:
        if d_in == 0 or n == 0:
            return 0.0
        return min(d_in, n) * max(float(m.map(d_in)) for m in parts.values())

    with _user_defined():
        return dp.m.make_user_measurement(
            _user_domain(SELPE_DOMAIN), dp.symmetric_distance(), dp.max_divergence(),
            function=lambda priv: combine({k: m(priv) for k, m in parts.items()}),
            privacy_map=privacy_map, TO="ExtrinsicObject")


# ----- Gaussian selection modes (pe-histogram, representatives): zCDP rounds ---------------

GAUSSIAN_CONSTRUCTOR = ("opendp.transformations.make_user_transformation (stability d_in * "
                        "sensitivity, L2) >> opendp.measurements.make_gaussian "
                        "(ZeroConcentratedDivergence)")
CONVERSION_CONSTRUCTOR = ("opendp.combinators.make_adaptive_composition (zCDP) >> "
                          "make_zCDP_to_approxDP >> make_fix_delta")


def _vector_space() -> tuple[dp.Domain, dp.Metric]:
    return dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float)


def gaussian_compositor(rhos: list[float]) -> dp.Measurement:
    """Adaptive composition of the rounds in zero-concentrated DP (rho adds up)."""
    return dp.c.make_adaptive_composition(_user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(),
                                          dp.zero_concentrated_divergence(), d_in=1,
                                          d_mids=list(rhos))


def to_approx_dp(measurement: dp.Measurement, delta: float) -> dp.Measurement:
    """OpenDP's rho-zCDP -> (epsilon, delta) conversion at a fixed delta."""
    return dp.c.make_fix_delta(dp.c.make_zCDP_to_approxDP(measurement), delta)


def to_approx_dp_of_rho(rho: float, delta: float) -> tuple[float, float]:
    """(epsilon, delta) of a total rho-zCDP, from OpenDP's conversion."""
    return approx_dp_of([rho], delta)


def approx_dp_of(rhos: list[float], delta: float) -> tuple[float, float]:
    """(epsilon, delta) of the composed rounds, from OpenDP's maps."""
    eps, d = to_approx_dp(gaussian_compositor(rhos), delta).map(1)
    return float(eps), float(d)


def zcdp_budget(epsilon: float, delta: float, shares: list[float]) -> list[float]:
    """Per-round rho (shares of a total) for the largest total whose OpenDP conversion to
    (epsilon, delta) stays within ``epsilon``."""
    def fits(total: float) -> bool:
        return approx_dp_of([total * s for s in shares], delta)[0] <= epsilon

    # zCDP -> (epsilon, delta) gives epsilon >= rho, so the total lies below epsilon
    total = float(dp.binary_search(fits, bounds=(epsilon * 1e-12, epsilon)))
    if not fits(total):
        raise RuntimeError("no zCDP budget meets the selection epsilon")
    return [total * s for s in shares]


def gaussian_with_scale(scale: float) -> dp.Measurement:
    return dp.m.make_gaussian(*_vector_space(), scale=scale)


def gaussian_scale(sensitivity: float, rho: float) -> float:
    """The Gaussian scale whose OpenDP map at L2 distance ``sensitivity`` is <= rho."""
    return calibrate(gaussian_with_scale, sensitivity, rho)[1]


def gaussian_round(sensitivity: float, scale: float, vectorize: Callable[[Any], Any],
                   postprocess: Callable[[Any], Any]) -> dp.Measurement:
    """One Gaussian round as an OpenDP chain on the private input.

    ``vectorize`` maps the private input to one float vector in which one privacy unit
    moves at most ``sensitivity`` in L2 (the caller bounds it by clipping and weights; the
    stability map states it). OpenDP's Gaussian adds the noise; ``postprocess`` turns the
    noisy vector into winners inside the measurement, so nothing else leaves it.
    """
    vdomain, vmetric = _vector_space()
    with _user_defined():
        stats = dp.t.make_user_transformation(
            _user_domain(PRIVATE_DOMAIN), dp.symmetric_distance(), vdomain, vmetric,
            function=lambda priv: [float(x) for x in vectorize(priv)],
            stability_map=lambda d_in: float(d_in) * sensitivity)
        post = dp.new_function(lambda noisy: postprocess(noisy), TO="ExtrinsicObject")
    return stats >> gaussian_with_scale(scale) >> post
