"""The public face of each counts mode, registered in one place.

Like `selpe_audit.artifact.modes` for selection: the config check, the CLI's choices, the
artifact and the review need a counts mode's name, accounting and words without the
enclave's code. The built-in modes are declared here; ``release.counts`` pairs each with
its OpenDP measurement, and a new mode registers its descriptor through
``release.counts.registry``. The artifact's ``counts.mode_description`` carries the words
and accounting, so decode and review read a release made by a mode they do not know.
"""

from __future__ import annotations

from dataclasses import dataclass

from selpe_audit.artifact.modes import Accounting, add_descriptor
from selpe_audit.registry import Registry


@dataclass(frozen=True)
class CountsModeDescriptor:
    """What the CLI, the config check and the review say of a counts mode.

    ``accounting``: ``pure`` (epsilon-DP) or ``zCDP`` (rho-zCDP that OpenDP converts to
    (epsilon, delta): the mode needs a delta). ``model``: it releases a counts model
    (``counts.model``: every noisy marginal, so decode refits it), which can hold free-text
    topic columns (the DP phrase vocabularies, topic codebooks). ``audit``: the
    ``selpe-audit audit mechanism`` kind that tests its measurement. ``topic_share``: the
    mode gives the free-text topic columns ``counts.topic_share`` of its budget (the
    artifact's ``budget.counts.topic_share`` says so when it has such columns).
    """

    name: str
    accounting: Accounting
    help: str
    review: str
    model: bool
    audit: str
    topic_share: bool = False

    @property
    def needs_delta(self) -> bool:
        return self.accounting == "zCDP"

    def to_json(self) -> dict[str, object]:
        """The artifact's ``counts.mode_description``."""
        return {"accounting": self.accounting, "review": self.review, "model": self.model}


#: the counts modes' public faces: the built-ins, declared below, then those that
#: ``release.counts.registry.register`` adds
COUNTS_MODES: Registry[CountsModeDescriptor] = Registry("counts mode")


def register_counts_mode(descriptor: CountsModeDescriptor,
                         stacklevel: int = 1) -> CountsModeDescriptor:
    """Add a counts mode (`selpe_audit.artifact.modes.add_descriptor`)."""
    return add_descriptor(COUNTS_MODES, descriptor, stacklevel + 1)


def counts_modes() -> tuple[CountsModeDescriptor, ...]:
    """Every registered counts mode, in registration order (the built-ins first)."""
    return COUNTS_MODES.values()


def describe_counts(name: str) -> CountsModeDescriptor:
    """The descriptor of ``name``; ValueError naming the known modes otherwise."""
    return COUNTS_MODES.get(name)


_MODEL = ("Gaussian noisy marginals in zCDP (OpenDP's contingency tables), and the "
          "maximum-entropy model fitted to them")

MARGINALS = register_counts_mode(CountsModeDescriptor(
    name="marginals", accounting="pure",
    help="Laplace histograms per class (pure epsilon-DP)",
    review="Laplace noisy counts: the class balance and one histogram per field and class",
    model=False, audit="counts"))
FIXED = register_counts_mode(CountsModeDescriptor(
    name="fixed", accounting="zCDP",
    help="the label's 2-way marginals, a fixed workload (zCDP); default",
    review=f"{_MODEL}: the class balance and the class's 2-way marginal with each field",
    model=True, audit="model", topic_share=True))
AIM = register_counts_mode(CountsModeDescriptor(
    name="aim", accounting="zCDP",
    help="OpenDP's AIM: adaptively chosen marginals (zCDP)",
    review=f"{_MODEL}: marginals chosen adaptively by AIM", model=True, audit="model"))
MST = register_counts_mode(CountsModeDescriptor(
    name="mst", accounting="zCDP",
    help="OpenDP's MST: a maximum spanning tree of 2-way marginals (zCDP)",
    review=f"{_MODEL}: a maximum spanning tree of 2-way marginals chosen by MST",
    model=True, audit="model"))

DEFAULT_COUNTS_MODE = FIXED.name
