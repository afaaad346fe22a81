"""What an (epsilon, delta)-DP guarantee means in practice (public math, no data).

- Membership inference: any test has TPR <= min(1, e^eps FPR + delta,
  1 - e^-eps (1 - delta - FPR)) (Kairouz, Oh & Viswanath 2015, the DP hypothesis-testing
  region), and advantage TPR - FPR <= tanh(eps / 2) for pure DP (balanced prior;
  Humphries et al. 2023 / the tight bound (e^eps - 1) / (e^eps + 1)).
- Reconstruction of a secret with prior success p: r <= min(1, e^eps p + delta,
  1 - e^-eps (1 - p - delta)), the same region read as a bound on a Bayesian adversary
  (SecPE's (p, r)-protection; Hayes et al. 2023 give the same shape for pure DP).
- For mu-GDP mechanisms (the Gaussian selection modes), SecPE's interpretation
  r = Phi(Phi^-1(p) + mu) (Dong, Roth & Su 2022: the mu-GDP trade-off curve read as a bound
  on reconstruction). Reported for the selection step only, next to the (epsilon, delta)
  guarantee, never instead of it.

Every statement names what is protected: the privacy unit and its bound ("any one row",
"any one person, up to k rows each in the counts"). With row units a person with m rows
is protected only at m times epsilon (group privacy), and the statements say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import Any

from selpe_audit.artifact.records import FprBound, Guarantees, PriorBound, SelectionGdp

FPRS = (0.01, 0.001)
PRIORS = (1e-2, 1e-4)


_HUGE = 700.0  # e^700 overflows nothing yet; past it every bound here is 1


def tpr_bound(epsilon: float, delta: float, fpr: float) -> float:
    if epsilon > _HUGE:
        return 1.0
    e = math.exp(epsilon)
    return min(1.0, e * fpr + delta, 1.0 - (1.0 - delta - fpr) / e)


def advantage_bound(epsilon: float, delta: float = 0.0) -> float:
    """Max TPR - FPR over all tests: tanh(eps/2) + delta-ish slack for approximate DP."""
    return min(1.0, math.tanh(epsilon / 2.0) + delta)


def reconstruction_bound(epsilon: float, delta: float, prior: float) -> float:
    if epsilon > _HUGE:
        return 1.0
    e = math.exp(epsilon)
    return min(1.0, e * prior + delta, 1.0 - (1.0 - prior - delta) / e)


GROUP_SIZES = (2, 5)  # rows of one person, for the row-unit warning


def protects(privacy_unit: Mapping[str, Any] | None) -> str:
    """What one neighbouring step adds or removes, in words: the guarantee's subject."""
    unit = (privacy_unit or {}).get("unit", "row")
    if unit != "person":
        return "any one row"
    k = (privacy_unit or {}).get("max_contributions")
    if isinstance(k, int) and not isinstance(k, bool):
        return f"any one person, up to {k} row{'s' if k != 1 else ''} each in the counts"
    return "any one person"


def group_warning(epsilon: float, delta: float) -> str:
    """Row units: what a person with several rows gets (group privacy, m x epsilon)."""
    examples = ", ".join(f"{m} rows: epsilon {m * epsilon:.3g}" for m in GROUP_SIZES)
    more = " and a larger delta" if delta else ""
    return (f"The privacy unit is one row: a person with m rows in the data is protected only "
            f"at m times epsilon{more} ({examples}); use unit = 'person' when people can "
            "have several rows.")


def derived_guarantees(epsilon: float, delta: float,
                       privacy_unit: Mapping[str, Any] | None = None) -> Guarantees:
    """The guarantees block of release.json, numbers and plain words by privacy unit."""
    adv = advantage_bound(epsilon, delta)
    tprs = tuple(FprBound(f, tpr_bound(epsilon, delta, f)) for f in FPRS)
    recon = tuple(PriorBound(p, reconstruction_bound(epsilon, delta, p)) for p in PRIORS)
    subject = protects(privacy_unit)
    row_unit = (privacy_unit or {}).get("unit", "row") != "person"
    member = "rows" if row_unit else "people"
    words = [
        f"The guarantee protects {subject}.",
        f"An attacker trying to tell whether one {'row' if row_unit else 'person'} was in the "
        f"data succeeds at most {100 * adv:.1f} percentage points more often than by guessing "
        f"(advantage <= tanh(eps/2) = {adv:.3f}).",
        *(f"At a false-positive rate of {100 * t.fpr:g} %, any membership test catches at "
          f"most {100 * t.tpr_max:.2f} % of member {member}." for t in tprs),
        *(f"A secret of {subject} that an attacker could guess with probability "
          f"{r.prior:g} beforehand can be reconstructed with probability at most "
          f"{r.success_max:.3g}." for r in recon),
    ]
    if row_unit:
        words.append(group_warning(epsilon, delta))
    return Guarantees(epsilon, delta, subject, adv, tprs, recon, tuple(words), (
        "Kairouz, Oh, Viswanath (2015), The composition theorem for differential privacy",
        "Humphries et al. (2023), Investigating membership inference attacks under data "
        "dependencies",
        "Hayes, Mahloujifar, Balle (2023), Bounding data reconstruction attacks with the "
        "hypothesis testing interpretation of differential privacy"))


def gdp_reconstruction_bound(mu: float, prior: float) -> float:
    """SecPE's (p, r) for a mu-GDP mechanism: r = Phi(Phi^-1(p) + mu)."""
    n = NormalDist()
    return n.cdf(n.inv_cdf(prior) + mu)


def gdp_interpretation(mu: float, *, counts: str) -> SelectionGdp:
    """The (p, r) reading of the Gaussian selection's composed mu (guarantees.selection_gdp).
    ``counts``: the noisy counts' own accounting in words ("pure epsilon-DP (...)"), which the
    scope states as it is: a signed artifact must not call zCDP counts pure."""
    pr = tuple(PriorBound(p, gdp_reconstruction_bound(mu, p)) for p in PRIORS)
    return SelectionGdp(
        mu, "r = Phi(Phi^-1(p) + mu)", pr,
        scope="the Gaussian selection rounds only (mu = sqrt(sum of the rounds' mu^2)); "
              f"the noisy counts are {counts} and not part of this number",
        statements=tuple(
            f"Selection alone: a secret guessed with probability {r.prior:g} beforehand is "
            f"reconstructed from the selection with probability at most "
            f"{r.success_max:.3g} (SecPE's (p, r) reading of mu = {mu:.3g} GDP)." for r in pr),
        note="An interpretation, not the release's guarantee: the guarantee is the full "
             "(epsilon, delta)-DP stated above, which covers every mechanism.",
        references=("Dong, Roth, Su (2022), Gaussian differential privacy",
                    "SecPE: secret-protected evolution for DP synthetic data"))
