"""The Gaussian selection modes' audits: the noisy statistics of one round, in eps_LB and
in mu."""

from __future__ import annotations

from typing import Any

import numpy as np

from audits.mechanism.core import DEFAULT_DELTA, Neighbours, Sampler, conversion_check
from release.config_sections import SelectionConfig
from release.dp.gaussian import calibrate_gaussian_scale, make_gaussian_round
from release.dp.zcdp import calibrate_zcdp_budget
from release.selection import PrivateClasses, get, selection_modes
from release.selection.gaussian import GaussianVotesMode
from selpe_audit.demo.generator import generate_rows
from selpe_audit.kernel.distance import Kernel, KernelConfig
from selpe_audit.schema import Schema

#: The Gaussian selection modes of the registry: each is audited through its statistics.
GAUSSIAN_KINDS = tuple(m.descriptor.name for m in selection_modes()
                       if isinstance(m, GaussianVotesMode))
GAUSSIAN_RUNS = 1000


def _far_canary(schema: Schema, template: dict[str, Any]) -> dict[str, Any]:
    """``template`` with every numeric field at its public maximum (far from demo rows)."""
    canary = dict(template)
    for f in schema.by_kind("numeric"):
        assert f.maximum is not None
        canary[f.name] = int(f.maximum) if f.is_integer else float(f.maximum)
    return canary


def gaussian_neighbours(schema: Schema, mode: str, epsilon: float, delta: float = DEFAULT_DELTA,
                        calibrate_to: float | None = None, n_rows: int = 6,
                        n_candidates: int = 6, seed: int = 0,
                        scale_factor: float = 1.0) -> Neighbours:
    """One round of ``mode`` on D and D' = D + a far canary, calibrated by OpenDP (one-round
    zCDP budget converted at ``delta``) to ``calibrate_to`` (default: the claim).
    ``scale_factor`` multiplies the noise scale (0.5: a planted factor-2 error)."""
    release_mode = get(mode)
    if not isinstance(release_mode, GaussianVotesMode):
        raise ValueError(f"not a Gaussian selection mode: {mode}")
    kernel = Kernel(schema, None, KernelConfig(channels="numeric"))
    fields = {f.name for f in schema.record_fields}
    rows = [{k: v for k, v in r.items() if k in fields} for r in generate_rows(200, seed)]
    c = rows[0][schema.label]
    same = [r for r in rows if r[schema.label] == c]
    cand, priv_rows = same[:n_candidates], same[n_candidates:n_candidates + n_rows]
    canary = _far_canary(schema, priv_rows[0])
    cand_features = kernel.featurize(cand)
    pools = {c: (cand_features, kernel.fit_scale(cand_features))}
    cfg = SelectionConfig(rounds=1, k=n_candidates, mode=mode,
                          settings={"anchors": 2} if mode == "representatives" else None)
    stats = release_mode.statistics(cfg, kernel, pools, 1)
    eps_cal = calibrate_to if calibrate_to is not None else epsilon
    rho = calibrate_zcdp_budget(eps_cal, delta, [1.0])[0]
    scale = calibrate_gaussian_scale(stats.sensitivity, rho) * scale_factor
    m = make_gaussian_round(stats.sensitivity, scale, stats.vectorize, lambda v: np.asarray(v))
    datasets = [PrivateClasses({c: kernel.featurize_private(data)},
                               {c: [f"u{j}" for j in range(len(data))]})
                for data in (priv_rows, [*priv_rows, canary])]
    v_d, v_dp = (np.asarray(stats.vectorize(p)) for p in datasets)
    shift = float(np.linalg.norm(v_dp - v_d))
    if shift > stats.sensitivity * (1 + 1e-9):
        raise RuntimeError("the canary moved the statistics by more than the sensitivity")
    direction = (v_dp - v_d) / shift

    def sampler(p: PrivateClasses) -> Sampler:
        return lambda n: np.fromiter((float(np.dot(m(p), direction)) for _ in range(n)),
                                     dtype=np.float64, count=n)

    details = {"mode": mode, "rows_in_D": n_rows, "candidates": n_candidates,
               "kernel_channels": kernel.channels, "sensitivity": stats.sensitivity,
               "canary_l2_shift": shift, "noise_scale": scale, "rho": float(m.map(1)),
               "mu": stats.sensitivity / scale, "calibrated_to_epsilon": eps_cal,
               "delta": delta, "constructor": "release.dp.gaussian.make_gaussian_round "
               "(OpenDP make_gaussian, zCDP) on the mode's release.selection statistics",
               "output": "projection of the noisy statistics on the D -> D' direction"}
    details.update(conversion_check(epsilon, delta))
    return Neighbours(name=mode, claimed_epsilon=epsilon, run_d=sampler(datasets[0]),
                      run_dprime=sampler(datasets[1]), output="scalar", details=details,
                      claimed_delta=delta, claimed_mu=details["claimed_mu"])
