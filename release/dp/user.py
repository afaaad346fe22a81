"""User-defined OpenDP objects: domains, functions and the flag they are built under.

Their maps are ours to get right, so OpenDP's "honest-but-curious" flag is turned on only
while one is built (`user_defined`), never globally.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opendp.mod import GLOBAL_FEATURES

from release.dp import prelude as dp

#: OpenDP's flag for user-defined domains, transformations and measurements
HONEST_BUT_CURIOUS = "honest-but-curious"
#: The user domain of the private input to selection rounds
#: (`release.selection.types.PrivateClasses`).
PRIVATE_DOMAIN = "SelPEPrivateBatches"
#: SelPE's round input (`release.selection.types.OneClassPerUnit`): one class per unit.
SELPE_DOMAIN = "SelPEOneClassPerUnit"


@contextmanager
def user_defined() -> Iterator[None]:
    """Enable "honest-but-curious" for the construction of one user-defined OpenDP object."""
    was_on = HONEST_BUT_CURIOUS in GLOBAL_FEATURES
    dp.enable_features(HONEST_BUT_CURIOUS)
    try:
        yield
    finally:
        if not was_on:
            dp.disable_features(HONEST_BUT_CURIOUS)


def make_post_processing(function: Callable[[Any], Any]) -> dp.Function:
    """A pure post-processing step as an OpenDP Function (user-defined: built under the flag)."""
    with user_defined():
        return dp.new_function(function, TO="ExtrinsicObject")


def user_domain(name: str) -> dp.Domain:
    """A private input the functions check themselves (OpenDP does not call the member
    test when a measurement is invoked)."""
    with user_defined():
        return dp.user_domain(name, lambda _: True)
