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
