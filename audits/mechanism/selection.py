"""The selection audit: SelPE's round through the release's loop (see `audits.mechanism`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from audits.mechanism.core import Neighbours, Sampler, Test
from release.config_sections import SelectionConfig
from release.dp.noisy_max import NOISY_MAX_CONSTRUCTOR
from release.selection import (
    OneClassPerUnit,
    PoolSource,
    PrivateClasses,
    SelectionRun,
    get,
    run_selection,
)
from release.selection.selpe import batch_utilities
from release.stages.selection import private_classes
from selpe_audit.kernel.distance import Kernel, KernelConfig
from selpe_audit.schema import Schema, parse_schema

#: A round's pool per class, b batches, D's people per class, the canary's rows in its home
#: class and in the other, and where they all sit. Two candidates and two batches reveal
#: the most per run: the winners list both votes.
DEFAULT_CANDIDATES = 2
SELECTION_BATCHES = 2
SELECTION_PERSONS = 6
SELECTION_CANARY_ROWS = (4, 2)
SELECTION_X = {"D": 25, "toward_canary": 75, "canary": 100}


def selection_schema() -> Schema:
    """The selection audit's public schema: a person id, one numeric field, two classes."""
    return parse_schema({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "selection_audit", "description": "Fictional people for the selection audit.",
        "type": "object", "x-label": "cls", "x-id": "person",
        "properties": {
            "person": {"type": "string", "maxLength": 16, "description": "fictional person"},
            "x": {"type": "integer", "minimum": 0, "maximum": 100, "description": "a value"},
            "cls": {"type": "integer", "enum": [0, 1], "description": "class"},
        },
        "required": ["person", "x", "cls"], "additionalProperties": False,
    }, "selection audit")


def _code(run: SelectionRun, toward_canary: dict[str, Any], home: Any) -> int:
    """A run's output: 2 if the candidate toward the canary is among the home class's
    winners, plus 1 if it is among the other class's."""
    has = {c.class_value: {**toward_canary, "cls": c.class_value} in c.winners
           for c in run.rounds[0].classes}
    return 2 * has[home] + sum(v for c, v in has.items() if c != home)


def selection_neighbours(epsilon: float, calibrate_to: float | None = None,
                         n_candidates: int = DEFAULT_CANDIDATES,
                         batches: int = SELECTION_BATCHES) -> Neighbours:
    """SelPE's round as the release runs it (see module) at ``calibrate_to`` (default: the
    claim) on D and D' = D + the canary person. The claim is the smaller of ``epsilon`` and
    OpenDP's map of the round measurement the release builds (`SelpeMode.round`)."""
    if n_candidates < 2 or batches < 2:
        raise ValueError("the selection audit needs at least 2 candidates and 2 batches")
    schema = selection_schema()
    home, other = schema.classes
    kernel = Kernel(schema, None, KernelConfig(channels="numeric"))
    toward_canary, toward_d = {"x": SELECTION_X["toward_canary"]}, {"x": SELECTION_X["D"]}
    pool = [{**r, "cls": c} for c in schema.classes
            for r in [toward_canary, *[toward_d] * (n_candidates - 1)]]
    source = PoolSource(schema, pool, "selection-audit-pool")
    rows = [{"person": f"p{c}-{i}", "x": SELECTION_X["D"], "cls": c}
            for c in schema.classes for i in range(SELECTION_PERSONS)]
    canary = [{"person": "canary", "x": SELECTION_X["canary"], "cls": c}
              for c, n in ((home, SELECTION_CANARY_ROWS[0]), (other, SELECTION_CANARY_ROWS[1]))
              for _ in range(n)]
    cfg = SelectionConfig(rounds=1, k=1, q=float(n_candidates), batches=batches,
                          settings={"utility": "minmax"}, channels="numeric")
    mode = get(cfg.mode)
    eps_run = float(calibrate_to if calibrate_to is not None else epsilon)
    # as the release: the mode's per-person rows, then the private features per class
    privs = [private_classes(mode.private_rows(pl.DataFrame(data), schema, schema.id_field),
                              schema, kernel, schema.id_field) for data in (rows, [*rows, *canary])]
    feats = kernel.featurize(pool[:n_candidates])
    pools = {c: (feats, kernel.fit_scale(feats)) for c in schema.classes}  # fixed order
    measurement, _ = mode.round(cfg, kernel, pools, 1, cfg.round_epsilons(eps_run)[0])
    opendp_eps = float(measurement.map(1))
    one = {name: batch_utilities(OneClassPerUnit(p), kernel, pools, home, 0, 1, b"audit",
                                 cfg.settings.utility).tolist()  # all rows in one batch: the flip
           for name, p in zip(("D", "D'"), privs, strict=True)}
    if one["D"][0] != -1.0 or one["D'"][0] != 0.0 or max(one["D'"][1:]) != -1.0:
        raise RuntimeError("the canary does not flip its batch's utilities")
    def sampler(priv: PrivateClasses) -> Sampler:
        def one_run() -> int:
            return _code(run_selection(schema, priv, kernel, source, cfg, eps_run),
                         toward_canary, home)
        return lambda n: np.fromiter((one_run() for _ in range(n)), dtype=np.int64, count=n)

    details = {
        "mode": cfg.mode, "batches": batches, "candidates": n_candidates, "rounds": 1,
        "quota": cfg.quota(1), "utility": cfg.settings.utility, "unit": "person",
        "kernel_channels": kernel.channels, "persons_in_D_per_class": SELECTION_PERSONS,
        "canary_rows": {str(home): SELECTION_CANARY_ROWS[0],
                        str(other): SELECTION_CANARY_ROWS[1]},
        "utilities_one_batch": one, "calibrated_to_epsilon": eps_run,
        "opendp_epsilon_of_round": opendp_eps,
        "constructor": "release.selection.run_selection >> SelpeMode.round ("
                       f"{NOISY_MAX_CONSTRUCTOR})",
        "output": "2 if the candidate toward the canary is among the home class's winners, "
                  "+ 1 if among the other class's"}
    return Neighbours(name="selection", claimed_epsilon=min(float(epsilon), opendp_eps),
                      run_d=sampler(privs[0]), run_dprime=sampler(privs[1]),
                      output="categorical", details=details, test=Test(accept=(2, 3)))
