"""Every use of OpenDP's internals and of private-pgm (``mbi``, which ``opendp[mbi]`` pins),
in one place, pinned by `tests/test_opendp_compat.py`.

The release calibrates its noise from OpenDP's own privacy maps in one or two builds instead
of OpenDP's generic binary searches (tens of builds; half a minute for the demo's marginals),
and the mechanism audit rebuilds the marginals' stable transformation to check sensitivities.
Both need names OpenDP does not document as public: a query's LazyFrame plan, mbi's private
helpers and the signature of ``Fixed.make_marginals`` (which differs in OpenDP's development
branch). They are reached here only, so an OpenDP upgrade that moves them fails one test
that names what moved, not a release.
"""

from __future__ import annotations

from typing import Any

#: The parameters ``CalibratedFixed.make_marginals`` overrides (opendp 0.16).
FIXED_MAKE_MARGINALS = ("self", "input_domain", "input_metric", "output_measure", "d_in",
                        "d_out", "marginals", "model")


def polars_plan(query: Any) -> Any:
    """The LazyFrame plan of an OpenDP polars query (what OpenDP checks and measures), to
    build ``make_private_lazyframe`` at a scale of our choosing."""
    return object.__getattribute__(query, "polars_plan")


def mbi_helpers() -> Any:
    """opendp.extras.mbi's private helpers: ``get_associated_metric``, ``get_cardinalities``,
    ``make_stable_marginals``, ``then_noise_marginals``."""
    from opendp.extras.mbi import _utilities

    return _utilities


def pgm() -> Any:
    """private-pgm (``mbi``): ``Domain`` for the calibrated marginals, ``CliqueVector``,
    ``MarkovRandomField``, ``Factor`` and ``estimation`` for the audits' stand-in and
    dense fits. Reached here only (an import-linter contract), as decode reaches it only
    through `decode.decoders.pgm`."""
    import mbi
    import mbi.estimation

    return mbi
