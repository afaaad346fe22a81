"""The OpenDP internals the release relies on (`release.dp.compat`), pinned: an OpenDP
upgrade that moves one fails here, naming it."""

from __future__ import annotations

import inspect

import opendp.prelude as dp
import polars as pl

from release.dp.compat import FIXED_MAKE_MARGINALS, mbi_helpers, polars_plan
from release.dp.tables import CalibratedFixed


def _params(f) -> list[str]:
    return list(inspect.signature(f).parameters)


def test_fixed_make_marginals_has_the_signature_calibrated_fixed_overrides():
    assert tuple(_params(dp.mbi.Fixed.make_marginals)) == FIXED_MAKE_MARGINALS
    assert tuple(_params(CalibratedFixed.make_marginals)) == FIXED_MAKE_MARGINALS
    kinds = inspect.signature(dp.mbi.Fixed.make_marginals).parameters
    assert kinds["marginals"].kind == kinds["model"].kind == inspect.Parameter.KEYWORD_ONLY


def test_mbi_private_helpers_are_where_the_release_calls_them():
    mbi = mbi_helpers()
    assert _params(mbi.get_associated_metric) == ["measure"]
    assert _params(mbi.get_cardinalities) == ["input_domain"]
    assert _params(mbi.make_stable_marginals) == ["input_domain", "input_metric",
                                                  "output_inner_metric", "cliques"]
    assert _params(mbi.then_noise_marginals) == ["output_measure", "cliques", "scale",
                                                 "weights"]


def test_a_query_exposes_its_lazyframe_plan():
    import release.dp.counts  # noqa: F401  (enables OpenDP's contrib features)

    frame = pl.LazyFrame({"x": ["a", "b"]})
    ctx = dp.Context.compositor(data=frame, privacy_unit=dp.unit_of(contributions=1),
                                privacy_loss=dp.loss_of(epsilon=1.0, delta=1e-6),
                                split_evenly_over=1)
    query = ctx.query().group_by("x").agg(dp.len())
    plan = polars_plan(query)
    assert isinstance(plan, pl.LazyFrame)
    domain, metric = ctx.accountant.input_space
    m = dp.m.make_private_lazyframe(domain, metric, ctx.accountant.output_measure,
                                    lazyframe=plan, global_scale=1.0, threshold=5)
    assert float(m.map(ctx.d_in)[0]) > 0


def test_importing_the_stages_turns_on_no_opendp_feature():
    """OpenDP's "contrib" is turned on at each command's entry (`release.dp.enable`), not as
    a side effect of importing the release, the audits or the benchmarks."""
    import subprocess
    import sys

    code = ("import release.pipeline, release.counts, release.cli, audits.cli, audits.mechanism, "
            "benchmarks.counts_modes; from opendp.mod import GLOBAL_FEATURES; "
            "print(sorted(GLOBAL_FEATURES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]
