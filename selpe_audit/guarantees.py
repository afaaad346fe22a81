"""What an (epsilon, delta)-DP guarantee means in practice (public math, no data).

- Membership inference: any test has TPR <= min(1, e^eps FPR + delta,
  1 - e^-eps (1 - delta - FPR)) (Kairouz, Oh & Viswanath 2015, the DP hypothesis-testing
  region), and advantage TPR - FPR <= tanh(eps / 2) for pure DP (balanced prior;
  Humphries et al. 2023 / the tight bound (e^eps - 1) / (e^eps + 1)).
- Reconstruction of a secret with prior success p: r <= min(1, e^eps p + delta,
  1 - e^-eps (1 - p - delta)), the same region read as a bound on a Bayesian adversary
  (SecPE's (p, r)-protection; Hayes et al. 2023 give the same shape for pure DP).
"""

from __future__ import annotations

import math

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


def derived_guarantees(epsilon: float, delta: float) -> dict:
    """The guarantees block of release.json, numbers and plain words."""
    adv = advantage_bound(epsilon, delta)
    tprs = [{"fpr": f, "tpr_max": tpr_bound(epsilon, delta, f)} for f in FPRS]
    recon = [{"prior": p, "success_max": reconstruction_bound(epsilon, delta, p)}
             for p in PRIORS]
    words = [
        f"An attacker trying to tell whether one person's records were used succeeds at most "
        f"{100 * adv:.1f} percentage points more often than by guessing (advantage <= "
        f"tanh(eps/2) = {adv:.3f}).",
        *(f"At a false-positive rate of {100 * t['fpr']:g} %, any membership test catches at "
          f"most {100 * t['tpr_max']:.2f} % of members." for t in tprs),
        *(f"A secret an attacker could guess with probability {r['prior']:g} beforehand can be "
          f"reconstructed with probability at most {r['success_max']:.3g}." for r in recon),
    ]
    return {
        "epsilon": epsilon,
        "delta": delta,
        "membership_advantage_max": adv,
        "membership_tpr_max": tprs,
        "reconstruction_success_max": recon,
        "statements": words,
        "references": [
            "Kairouz, Oh, Viswanath (2015), The composition theorem for differential privacy",
            "Humphries et al. (2023), Investigating membership inference attacks under data "
            "dependencies",
            "Hayes, Mahloujifar, Balle (2023), Bounding data reconstruction attacks with the "
            "hypothesis testing interpretation of differential privacy",
        ],
    }
