"""decode's one door to private-pgm (``mbi``) and OpenDP's mirror descent, for the refit of
the released counts model (`decode.decoders.mrf`). decode may not import the release's
adapter (`release.dp`, across the air gap), so the few names it needs are here, pinned: the
version ``opendp[mbi]`` pins (`PINNED`, checked by tests/test_model_decoder.py), since
`Chain.fit` reads mbi's junction tree and message passing, which mbi does not promise to
keep."""

from __future__ import annotations

from typing import Any

from mbi import CliqueVector, Domain, Factor, LinearMeasurement, junction_tree, marginal_oracles

__all__ = ["PINNED", "CliqueVector", "Domain", "Factor", "LinearMeasurement", "fit",
           "junction_tree", "marginal_oracles", "version"]

#: the private-pgm version this module's names were read against
PINNED = "1.1.0"


def version() -> str:
    """The installed private-pgm's version."""
    from importlib.metadata import version as installed

    return installed("mbi")


def fit(domain: Any, measurements: list[Any]) -> Any:
    """OpenDP's mirror descent over the released marginals, as the release fitted them."""
    from opendp.extras import mbi

    return mbi.mirror_descent(domain, measurements)

