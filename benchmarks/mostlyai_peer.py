"""MOSTLY AI's engine as the persons benchmark's DP peer, in a venv of its own.

mostlyai-engine brings torch, transformers and opacus (about 2.7 GB), so it cannot share the
project's environment; `make peer-mostlyai` builds its venv once under the user's cache
(``python -m benchmarks.mostlyai_peer --build``, keyed by its requirements: torch's CPU build
from local disk first; torchvision and torchaudio, which PyPI builds against CUDA and which
the tabular model does not use, uninstalled). Nothing builds it during a run: the persons
benchmark asks for it only in its full run and fails, saying to build it, without it. This
file runs in that venv as a script:

    VENV/bin/python benchmarks/mostlyai_peer.py TRAIN.csv OUT.csv ID EPS DELTA MINUTES PEOPLE

One TabularARGN on the visits as sequences keyed by the person id (DP-SGD: each person's
whole sequence is one training example, so the guarantee is per person), the epsilon split
as the engine takes it: `VALUE_SHARE` for the value ranges it gathers before training
(``value_protection_epsilon``), the rest the training's cap (``max_epsilon``); it trains for
at most MINUTES, then samples PEOPLE new sequences with fresh ids. Free text is dropped
before (the people measures read none).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REQUIREMENTS = ["torch==2.13.0", "mostlyai-engine==2.7.3"]
NAME = "mostlyai"
MAKE = "make peer-mostlyai"
VALUE_SHARE = 0.25
#: how much of a failed run's stderr its error keeps
ERROR_TAIL = 400


def build() -> Path:
    """Build the peer's venv (a no-op when it is there)."""
    from benchmarks.smartnoise_peer import build_env

    return build_env(NAME, REQUIREMENTS, "from mostlyai.engine import TabularARGN",
                     drop=("torchvision", "torchaudio"))


def run_peer(train: Path, out: Path, id_field: str, epsilon: float, delta: float,
             minutes: float, people: int) -> dict[str, Any]:
    """Fit on ``train`` (a CSV of visits without free text) and write ``people`` synthetic
    people's visits to ``out``; the run's seconds. `PeerFailed` with the reason when it made
    none."""
    from benchmarks.smartnoise_peer import PeerFailed, peer_python

    python = peer_python(NAME, REQUIREMENTS, MAKE)
    out.unlink(missing_ok=True)
    r = subprocess.run([str(python), __file__, str(train), str(out), id_field, str(epsilon),
                        str(delta), str(minutes), str(people)], capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        tail = " ".join(r.stderr.split())[-ERROR_TAIL:] or "no output"
        raise PeerFailed(f"mostlyai-engine exited with status {r.returncode}: {tail}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _main(train: str, out: str, id_field: str, epsilon: str, delta: str, minutes: str,
          people: str) -> None:
    """Inside the peer venv: fit and sample."""
    import pandas as pd
    import torch
    from mostlyai.engine import TabularARGN
    from mostlyai.engine.domain import DifferentialPrivacyConfig

    torch.set_num_threads(2)
    eps = float(epsilon)
    t0 = time.perf_counter()
    model = TabularARGN(
        tgt_context_key=id_field, max_training_time=float(minutes), random_state=0,
        differential_privacy=DifferentialPrivacyConfig(
            max_epsilon=eps * (1 - VALUE_SHARE), delta=float(delta),
            value_protection_epsilon=eps * VALUE_SHARE),
        device="cpu", verbose=0)
    model.fit(pd.read_csv(train))
    fit_s = time.perf_counter() - t0
    synthetic = model.sample(n_samples=int(people))
    synthetic.to_csv(out, index=False)
    print(json.dumps({"fit_s": round(fit_s, 1), "sample_s": round(time.perf_counter() - t0
                                                                  - fit_s, 1),
                      "rows": len(synthetic)}))


if __name__ == "__main__":
    if sys.argv[1:] == ["--build"]:  # `make peer-mostlyai`
        print(f"mostlyai-engine venv: {build()}")
    else:
        _main(*sys.argv[1:8])
