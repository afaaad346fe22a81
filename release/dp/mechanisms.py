"""The names `release.pipeline` imports from here, until it imports them from their
mechanism family's module (`counts`, `unit`, `spools`): kept so that work on the pipeline
in flight merges."""

from __future__ import annotations

from release.dp.counts import SIZE_CONSTRUCTOR, NoisyCount, measure_size
from release.dp.spools import remove_spools, sweep_spools
from release.dp.unit import PrivacyUnit

__all__ = ["SIZE_CONSTRUCTOR", "NoisyCount", "PrivacyUnit", "measure_size", "remove_spools",
           "sweep_spools"]
