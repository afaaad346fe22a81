"""The public face of each selection mode, registered in one place.

The shared core may not import ``release`` (import-linter), yet the artifact schema and the
review must know every mode. So the public part of a mode - its name, its accounting, its
words and the JSON Schema of its artifact block - is a `ModeDescriptor` registered here.
The three built-in modes are declared below, so ``selpe-audit review`` knows them without
the enclave code; ``release.selection`` pairs each descriptor with its OpenDP measurement,
and a new mode registers its own descriptor through ``release.selection.registry``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import Field

from selpe_audit.artifact.records import OPEN, NonNegative, Positive
from selpe_audit.registry import Registry

Accounting = Literal["pure", "zCDP"]


#: selpe's per-batch utilities: "minmax" rescales each batch's -g to span [-1, 0] (the
#: same range, so the same sensitivity and noise); "raw" keeps -g (release.selection.selpe)
UTILITIES = ("minmax", "raw")


@dataclass(frozen=True)
class NoSettings:
    """The settings block of a mode that has none."""


@dataclass(frozen=True, kw_only=True)
class SelpeSettings:
    """``[selection.selpe]``."""

    utility: str = field(default="minmax", metadata={
        "help": "selpe: each batch's utilities min-max rescaled to span [-1, 0] (minmax; same "
                "sensitivity and noise) or -g as is (raw)", "choices": UTILITIES})

    def __post_init__(self) -> None:
        if self.utility not in UTILITIES:
            raise ValueError(f"utility must be {or_list([repr(u) for u in UTILITIES])}, got "
                             f"{self.utility!r}")


@dataclass(frozen=True, kw_only=True)
class PeHistogramSettings:
    """``[selection.pe-histogram]``: votes <= threshold x the noise scale are dropped."""

    threshold: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.threshold, int | float) and math.isfinite(self.threshold)
                and self.threshold >= 0):
            raise ValueError("threshold must be a number >= 0 (noise scales)")


@dataclass(frozen=True, kw_only=True)
class RepresentativesSettings:
    """``[selection.representatives]``: k-means ``anchors`` per class (0: the round's quota),
    the clip norm ``radius`` of a row's offset from its anchor, ``dims`` of the public
    basis."""

    anchors: int = 0
    radius: float = 0.5
    dims: int = 16

    def __post_init__(self) -> None:
        if self.anchors < 0 or self.dims < 0:
            raise ValueError("anchors and dims must be >= 0")
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise ValueError("radius must be a number > 0")

    def n_anchors(self, quota: int) -> int:
        return self.anchors or quota


@dataclass(frozen=True)
class ModeDescriptor:
    """What the CLI, the config check, the artifact schema and the review say of a mode.

    ``accounting``: ``pure`` (epsilon-DP rounds) or ``zCDP`` (rho-zCDP rounds that OpenDP
    converts to (epsilon, delta); such a mode needs a delta). ``help``: the --help words;
    ``review``: how the review page says winners were chosen; ``mechanism``: a round's
    ledger entry; ``block_key``/``block``: the mode's own block in ``selection`` and its
    record class (`selpe_audit.artifact.records`: the schema is generated from it);
    ``person_bounding``: how a round bounds one person's rows (the artifact's
    ``privacy_unit.bounding.selection`` under unit = "person"); ``settings``: the frozen
    dataclass of the mode's own settings (``[selection.<name>]``; a field with ``help`` in
    its metadata is also a CLI flag), which checks itself with a ValueError;
    ``section_settings``: those of its settings the artifact's ``selection`` block states
    at its top level (selpe: the utility), for the reviewer.
    """

    name: str
    accounting: Accounting
    help: str
    review: str
    mechanism: str
    block_key: str | None = None
    block: type | None = None  # a record: a frozen dataclass, __pydantic_config__ = OPEN
    person_bounding: str = "all of a person's rows; the round's sensitivity bounds them"
    settings: type = NoSettings
    section_settings: tuple[str, ...] = ()

    @property
    def needs_delta(self) -> bool:
        return self.accounting == "zCDP"


class _Described(Protocol):
    name: str
    accounting: Accounting


D = TypeVar("D", bound=_Described)


def add_descriptor(registry: Registry[D], descriptor: D, stacklevel: int = 1) -> D:
    """Add ``descriptor`` to ``registry`` (`Registry.add`: a name once) if its accounting
    is one the ledger knows. ``stacklevel``: as `Registry.add`'s, from the caller's side."""
    if descriptor.accounting not in ("pure", "zCDP"):
        raise ValueError(f"{registry.what} {descriptor.name}: accounting must be pure or zCDP")
    return registry.add(descriptor.name, descriptor, stacklevel=stacklevel + 1)


#: the selection modes' public faces: the built-ins, declared below, then those that
#: ``release.selection.registry.register`` adds
MODES: Registry[ModeDescriptor] = Registry("selection mode")


def register_mode(descriptor: ModeDescriptor, stacklevel: int = 1) -> ModeDescriptor:
    """Add a selection mode (`add_descriptor`)."""
    return add_descriptor(MODES, descriptor, stacklevel + 1)


def modes() -> tuple[ModeDescriptor, ...]:
    """Every registered mode, in registration order (the built-ins first, selpe the default)."""
    return MODES.values()


def mode_names() -> tuple[str, ...]:
    return MODES.names()


def find_mode(name: Any) -> ModeDescriptor | None:
    return MODES.find(name)


def describe(name: str) -> ModeDescriptor:
    """The descriptor of ``name``; ValueError naming the known modes otherwise."""
    return MODES.get(name)


def or_list(names: list[str] | tuple[str, ...]) -> str:
    """``a, b or c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


@dataclass(frozen=True)
class PeHistogramBlock:
    """``selection.pe_histogram``: the threshold and, in words, how votes and survivors
    are made."""

    __pydantic_config__ = OPEN

    threshold_noise_scales: NonNegative
    votes: str
    survivors: str


@dataclass(frozen=True)
class RepresentativesBlock:
    """``selection.representatives``: its settings and, in words, the public skeleton and
    how noisy centers vote."""

    __pydantic_config__ = OPEN

    anchors: int | str  # a number, or "the round's quota"
    radius: Positive
    dims: Annotated[int, Field(ge=0)]
    skeleton: str
    votes: str



SELPE = register_mode(ModeDescriptor(
    name="selpe", accounting="pure",
    help="per-batch noisy max, pure epsilon-DP; default",
    review="DP noisy max",
    mechanism="report noisy max per batch",
    person_bounding="a person's rows of one class only (where they have most rows), all of "
                    "them in one batch (keyed hash of the person id), however many: utilities "
                    "lie in [-1, 0], so one person moves one batch's scores by at most 1 "
                    "(L-inf); bounded by the utility range, not by max_contributions",
    settings=SelpeSettings, section_settings=("utility",)))
PE_HISTOGRAM = register_mode(ModeDescriptor(
    name="pe-histogram", accounting="zCDP",
    help="Private Evolution's Gaussian vote histogram",
    review="Gaussian noisy vote histograms (pe-histogram)",
    mechanism="Gaussian noise on the vote histogram (pe-histogram)",
    person_bounding="all of a person's rows, each voting with weight 1 / (the person's rows), "
                    "so one person's votes sum to 1 (L2 sensitivity 1); bounded by the 1/rows "
                    "weights, not by max_contributions",
    block_key="pe_histogram", block=PeHistogramBlock,
    settings=PeHistogramSettings))
REPRESENTATIVES = register_mode(ModeDescriptor(
    name="representatives", accounting="zCDP",
    help="SecPE's noisy cluster representatives",
    review="votes of Gaussian noisy cluster representatives (representatives)",
    mechanism="Gaussian noise on anchor counts and clipped offset sums (representatives, "
              "SecPE)",
    person_bounding="all of a person's rows, each weighted 1 / (the person's rows) in the "
                    "anchor counts and clipped offset sums (L2 sensitivity sqrt(1 + R^2)); "
                    "bounded by the 1/rows weights, not by max_contributions",
    block_key="representatives", block=RepresentativesBlock,
    settings=RepresentativesSettings))
