"""Shared fixtures: the bundled demo schema and sample, and small file helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from selpe_audit.schema import Schema, demo_schema_path, load_schema

ROOT = Path(__file__).resolve().parents[1]
DEMO_SAMPLE = ROOT / "selpe_audit" / "data" / "ed_triage_sample.csv"


@pytest.fixture(autouse=True)
def _ledger_folder(tmp_path_factory, monkeypatch):
    """The installation's default lifetime ledger is a per-test folder: a test never
    charges (or reads) a real ledger, and no test fixes the folder unless it says so."""
    monkeypatch.setenv("SELPE_AUDIT_LEDGER", str(tmp_path_factory.mktemp("ledger")))
    monkeypatch.delenv("SELPE_AUDIT_LEDGER_FIXED", raising=False)


@pytest.fixture(scope="session")
def demo_schema() -> Schema:
    return load_schema(demo_schema_path())


@pytest.fixture(scope="session")
def demo_schema_path_() -> Path:
    return demo_schema_path()


def good_row(i: int = 1) -> dict:
    """One valid demo row (fictional)."""
    return {
        "patient_id": f"P{i:06d}", "age": 44, "sex": "female", "arrival_mode": "walk-in",
        "temperature_c": 37.1, "heart_rate": 88, "respiratory_rate": 16, "o2_saturation": 98,
        "systolic_bp": 128, "diastolic_bp": 82, "pain_score": 3,
        "chief_complaint": "sore throat for two days", "disposition": "discharged", "acuity": 4,
    }


def with_settings(cfg, **flat):
    """``cfg`` with settings changed by their flat CLI-override names (``epsilon``,
    ``selection_mode``, ``cohorts``...); the new config is checked on construction."""
    from dataclasses import replace

    from release.config import OVERRIDES

    top = {k: v for k, v in flat.items() if k not in OVERRIDES}
    sections: dict = {}
    for key, value in flat.items():
        if key in OVERRIDES:
            section, name = OVERRIDES[key]
            sections.setdefault(section, {})[name] = value
    return replace(cfg, **top, **{s: replace(getattr(cfg, s), **v) for s, v in sections.items()})
