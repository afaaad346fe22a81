"""The model counts modes' audits: the noisy marginals of the Fixed workload (one
measurement kept from the release's own query), and AIM's and MST's whole adaptive
release per run."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from audits.mechanism.core import DEFAULT_DELTA, Neighbours, Sampler, conversion_check
from release.config_sections import CountsConfig
from release.counts import counts_modes
from release.counts import get as counts_mode
from release.counts.keys import derive_frame
from release.counts.model import ModelMode, model_columns
from release.dp import OpenDPException
from release.dp.compat import mbi_helpers, pgm
from release.dp.counts import make_context
from release.dp.tables import CalibratedFixed, calibrate_table_slot, make_table_query
from release.dp.unit import UNIT_COL, PrivacyUnit
from release.dp.zcdp import calibrate_zcdp_budget
from selpe_audit.demo.generator import generate_rows
from selpe_audit.schema import Schema

#: The model audit's columns besides the class: a small domain keeps a run at milliseconds
MODEL_FIELDS = ("age", "sex")
MODEL_ROWS = 200
MODEL_UNITS = ("row", "person")
MODEL_MAX_CONTRIBUTIONS = 2  # person unit: OpenDP's truncation bound
MODEL_CANARY_EXTRA_ROWS = 2  # person unit: the canary's rows beyond it, cut by the release
#: the counts modes this audit's model kind tests (their descriptors' ``audit``)
MODEL_MODES = tuple(d.name for d in counts_modes() if d.audit == "model")
#: those whose whole adaptive algorithm is audited per run (AIM, MST)
ADAPTIVE_MODES = tuple(m for m in MODEL_MODES if getattr(counts_mode(m), "adaptive", False))
MODEL_AIM_ROUNDS = 2       # aim: rounds per audited release (each refits the model)
MODEL_FIT_ITERS = 50  # aim and mst: mirror-descent steps per fit inside a run (numpy)
#: aim and mst: ~1-3 s a run on 2 cores (OpenDP builds each round's measurement when it runs);
#: 100 + 100 runs per dataset give mu's 99 % interval +-0.26: a factor 2 at epsilon 2 shows
ADAPTIVE_RUNS = 100
ADAPTIVE_RETRIES = 5  # a run OpenDP refuses (opendp #2789: a float overrun) is run again


@dataclass(kw_only=True, frozen=True)
class _KeptFixed(CalibratedFixed):
    """The release's ``CalibratedFixed``, keeping the first marginals measurement it builds
    (and the input domain, metric and distance OpenDP hands it): its map and sensitivities.
    OpenDP builds one per invocation of the query; later ones are the same."""

    kept: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    def make_marginals(self, input_domain: Any, input_metric: Any, output_measure: Any,
                       d_in: Any, d_out: float, *, marginals: Any, model: Any) -> Any:
        m = super().make_marginals(input_domain, input_metric, output_measure, d_in, d_out,
                                   marginals=marginals, model=model)
        if not self.kept:
            self.kept.append({"measurement": m, "input_domain": input_domain,
                              "input_metric": input_metric, "output_measure": output_measure,
                              "d_in": d_in, "d_out": d_out})
        return m


def _no_fit(domain: Any, measurements: Any, potentials: Any = None) -> Any:
    """Stands in for the model fit (post-processing of the released marginals, not
    audited): an all-zero model over the domain, which costs nothing."""
    mbi = pgm()
    zeros = mbi.CliqueVector.zeros(domain, [tuple(domain.attrs)[:1]])
    return mbi.MarkovRandomField(potentials=zeros, marginals=zeros)


def model_neighbours(schema: Schema, epsilon: float, delta: float = DEFAULT_DELTA,
                     unit: str = "row", calibrate_to: float | None = None,
                     scale_factor: float = 1.0, seed: int = 0,
                     mode: str = "fixed") -> Neighbours:
    """A model counts mode's noisy marginals (see module) on D and D' = D + a canary row or
    person, calibrated by the release to the counts' rho for ``calibrate_to`` (default: the
    claim) at ``delta``. ``scale_factor`` multiplies the noise scale (0.5: a planted
    factor-2 error; the release's calibration runs at rho / scale_factor^2). ``mode``
    "aim" or "mst": the whole adaptive algorithm per run (`_adaptive`). The columns, D's size
    and a person's rows are the module's `MODEL_FIELDS`, `MODEL_ROWS` and
    `MODEL_MAX_CONTRIBUTIONS`."""
    fields, max_contributions = MODEL_FIELDS, MODEL_MAX_CONTRIBUTIONS
    _check_arguments(schema, unit, mode, scale_factor)
    person = unit == "person"
    counts = CountsConfig(mode=mode, aim_rounds=MODEL_AIM_ROUNDS)
    model_mode = counts_mode(mode)
    assert isinstance(model_mode, ModelMode)
    every = model_columns(schema, {})
    cols = [every[0], *(c for c in every[1:] if c.field in fields)]
    if missing := set(fields) - {c.field for c in cols[1:]}:
        raise ValueError(f"the model has no column for {', '.join(sorted(missing))}")

    rows, canaries, priv_unit = _rows_and_canary(schema, MODEL_ROWS, seed, person,
                                                 max_contributions)
    frames = [derive_frame(data, schema, counts, schema.id_field if person else None)
              .collect().lazy() for data in (rows, [*rows, *canaries])]
    # what the truncation keeps of the canary (identical rows): the exact counts' D'
    kept_canary = canaries[:max_contributions] if person else canaries

    eps_cal = float(calibrate_to if calibrate_to is not None else epsilon)
    # as release_model: the counts' (eps, delta)
    (rho_cal,) = calibrate_zcdp_budget(eps_cal, delta, [1.0])
    slot = rho_cal / scale_factor ** 2
    common = {"unit": unit, "rows_in_D": len(rows), "canary_rows": len(canaries),
              "max_contributions": max_contributions if person else None,
              "columns": [c.name for c in cols], "calibrated_to_epsilon": eps_cal,
              "scale_factor": scale_factor, "delta": delta,
              **conversion_check(epsilon, delta)}
    release_algorithm = model_mode.algorithm(cols, counts, None)
    if not isinstance(release_algorithm, CalibratedFixed):
        return _adaptive(model_mode, counts, cols, frames, priv_unit, slot, epsilon, common)
    exact_frames = [derive_frame(data, schema, counts, schema.id_field if person else None)
                    for data in (rows, [*rows, *kept_canary])]
    return _fixed(release_algorithm, cols, frames, exact_frames, priv_unit, slot, epsilon,
                  common)


def _check_arguments(schema: Schema, unit: str, mode: str, scale_factor: float) -> None:
    """`model_neighbours`'s arguments, refused before any work with what is allowed."""
    if unit not in MODEL_UNITS:
        raise ValueError(f"unit must be one of {', '.join(MODEL_UNITS)}")
    if mode not in MODEL_MODES:
        raise ValueError(f"mode must be one of {', '.join(MODEL_MODES)}")
    if unit == "person" and schema.id_field is None:
        raise ValueError("the person unit needs a schema with a person id (x-id)")
    if not scale_factor > 0:
        raise ValueError("scale_factor must be > 0")


def _rows_and_canary(schema: Schema, n_rows: int, seed: int, person: bool,
                     max_contributions: int) -> tuple[list[dict], list[dict], PrivacyUnit]:
    """D's rows, the canary's rows that D' adds, and the privacy unit. Person unit: D's
    people cut to the bound (so D's counts are what the release counts), the canary one
    person over it, whose rows the release's truncation cuts."""
    rows = generate_rows(n_rows, seed)
    canary = generate_rows(1, seed + 1)[0]
    if person:  # D's people within the bound (D's counts fixed), the canary over it
        id_field, seen, kept_rows = schema.id_field, Counter[Any](), []
        for r in rows:
            seen[r[id_field]] += 1
            if seen[r[id_field]] <= max_contributions:
                kept_rows.append(r)
        rows = kept_rows
        canaries = [{**canary, id_field: "canary-person"}] * (max_contributions
                                                             + MODEL_CANARY_EXTRA_ROWS)
        priv_unit = PrivacyUnit(UNIT_COL, max_contributions)
    else:
        canaries, priv_unit = [canary], PrivacyUnit()
    return rows, canaries, priv_unit


def _fixed(release_algorithm: CalibratedFixed, cols: list[Any], frames: list[pl.LazyFrame],
           exact_frames: list[pl.LazyFrame], priv_unit: PrivacyUnit, slot: float,
           epsilon: float, common: dict[str, Any]) -> Neighbours:
    """Fixed: its marginals measurement, kept from one release on D, run per sample through
    the release's whole query. The output is the noisy marginals projected on the canary's
    exact shift (``exact_frames``: D and D' with the rows the truncation keeps), weighted by
    inverse variance, so its standardised shift is the measured mu."""
    unit = common["unit"]
    keeper = _KeptFixed(queries=release_algorithm.queries, estimator=_no_fit)
    # the release's table query with the kept algorithm
    ctx = make_context(frames[0], priv_unit, [slot], measure="rho")
    query = make_table_query(ctx, priv_unit, cols, keeper)
    table = query(frames[0])  # one release on D: CalibratedFixed builds the marginals
    (kept,) = keeper.kept
    marginals, d_in = kept["measurement"], kept["d_in"]
    rho_opendp = float(marginals.map(d_in))
    if rho_opendp > slot * (1 + 1e-9):
        raise RuntimeError("OpenDP's map of the marginals exceeds their slot")

    cliques = [q.by for q in keeper.queries]
    sensitivity, shift = _canary_shift(kept, cliques, cols, exact_frames)
    stddev = {m.clique: float(m.stddev) for m in table.marginals.flatten()}
    mu_mechanism = math.sqrt(sum(float(np.sum(shift[c] ** 2)) / stddev[c] ** 2
                                 for c in cliques))
    weights = {c: shift[c] / stddev[c] ** 2 / mu_mechanism for c in cliques}

    def sampler(x: pl.LazyFrame) -> Sampler:
        def statistic() -> float:  # the whole query: the person unit's truncation runs
            return sum(float(np.dot(np.asarray(m.noisy_measurement, dtype=np.float64),
                                    weights[m.clique]))
                       for m in query(x).marginals.flatten())

        return lambda n: np.fromiter((statistic() for _ in range(n)), dtype=np.float64,
                                     count=n)

    names = {c.frame_col: c.name for c in cols}
    details = {
        "mode": "fixed", **common,
        "marginals": [{"clique": [names[a] for a in c], "sensitivity": sensitivity[c],
                       "stddev": stddev[c], "cells": int(shift[c].size)} for c in cliques],
        "constructor": "release.dp.tables.CalibratedFixed.make_marginals (OpenDP "
        "make_stable_marginals >> then_noise_marginals, zCDP), inside the release's "
        "contingency_table query",
        "slot_rho": slot, "rho": rho_opendp, "mu": mu_mechanism,
        "opendp_mu": math.sqrt(2 * rho_opendp),
        "output": "projection of the noisy marginals on the canary's cells, weighted by "
                  "inverse variance"}
    return Neighbours(name=f"model ({unit} unit)", claimed_epsilon=epsilon,
                      run_d=sampler(frames[0]), run_dprime=sampler(frames[1]),
                      output="scalar", details=details, claimed_delta=common["delta"],
                      claimed_mu=details["claimed_mu"])


def _canary_shift(kept: dict[str, Any], cliques: list[Any], cols: list[Any],
                  exact_frames: list[pl.LazyFrame]) -> tuple[dict, dict]:
    """Each marginal's sensitivity (OpenDP's map of the exact marginals) and the canary's
    exact shift of its cells (D' minus D); refused unless the canary moves every marginal by
    its whole sensitivity, so the audit tests the worst case the claim covers."""
    mbi = mbi_helpers()
    exact = mbi.make_stable_marginals(kept["input_domain"], kept["input_metric"],
                                      mbi.get_associated_metric(kept["output_measure"]),
                                      cliques)
    sensitivity = {c: float(v) for c, v in exact.map(kept["d_in"]).items()}
    true_d, true_dp = (exact(frame.select([c.frame_col for c in cols]).collect().lazy())
                       for frame in exact_frames)
    shift = {c: (true_dp[c].astype(float) - true_d[c].astype(float)).ravel() for c in cliques}
    for c in cliques:
        if not math.isclose(float(np.linalg.norm(shift[c])), sensitivity[c], rel_tol=1e-9):
            raise RuntimeError(f"the canary moves marginal {c} by less than its sensitivity")
    return sensitivity, shift


def _dense_fit(domain: Any, measurements: list[Any], *, potentials: Any = None) -> Any:
    """AIM's and MST's model fit inside an audited run: mirror descent on the squared error
    of the released marginals, over the audit's small table held whole in numpy (a few
    hundred cells). Post-processing of released marginals, so it changes which marginal
    AIM picks next, never what a round costs; private-pgm's fit compiles a JAX program per
    call (its loss closes over the round's measurements), half of each audited run."""
    mbi = pgm()
    attrs, shape = tuple(domain.attrs), tuple(domain.shape)
    total = max(1.0, float(mbi.estimation.minimum_variance_unbiased_total(measurements)))
    terms = []
    for m in measurements:
        if m.query != mbi.Factor.datavector:
            raise ValueError("the audit's fit reads identity measurements only")
        axes = [attrs.index(a) for a in m.clique]
        terms.append((axes, np.asarray(m.noisy_measurement, dtype=np.float64),
                      1.0 / max(float(m.stddev), 1e-12) ** 2))
    step = 1.0 / (total * sum(w for _, _, w in terms))
    theta = np.zeros(shape)
    for _ in range(MODEL_FIT_ITERS):
        mu = np.exp(theta - theta.max())
        mu *= total / mu.sum()
        grad = np.zeros(shape)
        for axes, y, w in terms:
            kept = sorted(axes)
            marginal = mu.sum(axis=tuple(i for i in range(len(shape)) if i not in axes))
            diff = np.transpose(marginal, [kept.index(a) for a in axes]).ravel() - y
            back = np.transpose(diff.reshape([shape[a] for a in axes]),
                                [axes.index(a) for a in kept])
            grad += w * np.expand_dims(back, tuple(i for i in range(len(shape))
                                                   if i not in axes))
        theta -= step * grad
    mu = np.exp(theta - theta.max())
    mu *= total / mu.sum()
    whole = [attrs]
    return mbi.MarkovRandomField(
        potentials=mbi.CliqueVector(domain, whole, {attrs: mbi.Factor(domain, theta)}),
        marginals=mbi.CliqueVector(domain, whole, {attrs: mbi.Factor(domain, mu)}),
        total=total)


def _projection(cols: list[Any], frames: list[pl.LazyFrame]) -> Callable[[Any], float]:
    """One released marginal's term of the adaptive audit's output, by the true counts of
    its clique on D and D' (``frames``), computed the first time a run selects it."""
    frame_cols = [c.frame_col for c in cols]
    inputs = [f.select(frame_cols).collect().lazy() for f in frames]
    cells = {c.frame_col: len(c.keys) + 1 for c in cols}  # OpenDP's null cell last
    codes = [{a: x.collect()[a].to_numpy() for a in frame_cols} for x in inputs]
    exact: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}

    def on_d_and_shift(clique: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The clique's true counts on D and D' minus D (the canary's rows), row-major."""
        if clique not in exact:
            shape = tuple(cells[a] for a in clique)
            d, dp_ = (np.bincount(np.ravel_multi_index([c[a] for a in clique], shape),
                                  minlength=math.prod(shape)).astype(np.float64)
                      for c in codes)
            exact[clique] = d, dp_ - d
        return exact[clique]

    def term(m: Any) -> float:
        """One released marginal's noise, centred on D's counts, along the canary's shift,
        over its variance: mean 0 on D whichever marginal a run selected."""
        on_d, shift = on_d_and_shift(tuple(m.clique))
        noisy = np.asarray(m.noisy_measurement, dtype=np.float64)
        return float(np.dot(noisy - on_d, shift)) / float(m.stddev) ** 2

    return term


def _adaptive(model_mode: ModelMode, counts: CountsConfig, cols: list[Any],
              frames: list[pl.LazyFrame], priv_unit: PrivacyUnit, slot: float, epsilon: float,
              common: dict[str, Any]) -> Neighbours:
    """AIM or MST as the release runs it (its algorithm, the slot a hair under the budget
    that `release.dp.tables.calibrate_table_slot` finds), the whole adaptive release per run.
    The output is every released noisy marginal, centred on D's true counts, projected on
    the canary's cells and weighted by the inverse variance of its own (released) stddev:
    whichever marginals a run selects, the output has mean 0 on D and is shifted on D' by
    the measured part's squared mu, so the standardised shift estimates that mu, which the
    claim (sqrt(2 rho) of the whole budget, selections included) bounds."""
    mode = counts.mode
    alg = dataclasses.replace(model_mode.algorithm(cols, counts, None), estimator=_dense_fit)
    slot = calibrate_table_slot(frames[0], priv_unit, cols, alg, slot)
    ctx = make_context(frames[0], priv_unit, [slot], measure="rho")
    query = make_table_query(ctx, priv_unit, cols, alg)
    rho_opendp = float(query.map(ctx.d_in))
    if rho_opendp > slot * (1 + 1e-9):
        raise RuntimeError("OpenDP's map of the table exceeds its slot")
    term = _projection(cols, frames)
    details = {"mode": mode, **common, "aim_rounds": counts.aim_rounds
               if mode == "aim" else None, "fit_iterations": MODEL_FIT_ITERS,
               "constructor": f"opendp.extras.mbi.{model_mode.opendp_name} as the release "
               "builds it (release.counts.model.ModelMode.algorithm), inside the release's "
               "contingency_table query",
               "slot_rho": slot, "rho": rho_opendp, "opendp_mu": math.sqrt(2 * rho_opendp),
               "runs_refused_by_opendp": 0,  # OpenDP refused mid-way; rerun
               "output": "every released noisy marginal projected on the canary's cells, "
                         "weighted by inverse variance"}

    def sampler(x: pl.LazyFrame) -> Sampler:
        def statistic() -> float:
            for _ in range(ADAPTIVE_RETRIES):
                try:
                    table = query(x)
                    break
                except OpenDPException as e:  # opendp #2789 on a data-dependent path:
                    if "insufficient budget" not in str(e):  # the release refuses it too
                        raise
                    details["runs_refused_by_opendp"] += 1
            else:
                raise RuntimeError(f"OpenDP's {mode} overran its budget in "
                                   f"{ADAPTIVE_RETRIES} runs in a row")
            return sum(term(m) for m in table.marginals.flatten())

        return lambda n: np.fromiter((statistic() for _ in range(n)), dtype=np.float64,
                                     count=n)

    return Neighbours(name=f"model {mode} ({common['unit']} unit)", claimed_epsilon=epsilon,
                      run_d=sampler(frames[0]), run_dprime=sampler(frames[1]),
                      output="scalar", details=details, claimed_delta=common["delta"],
                      claimed_mu=common["claimed_mu"])
