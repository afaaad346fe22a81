"""The selection-mode registry: a toy fourth mode, registered from this test alone, shows up
in ``release --help``, the config check, the artifact schema, the release and the review
page, with no other module edited. The built-in modes agree between the shared core (what
the reviewer sees) and the release (what runs)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from release import cli as release_cli
from release.config_file import load_config
from release.config_sections import SelectionConfig
from release.dp.noisy_max import NOISY_MAX_CONSTRUCTOR, make_selection_round
from release.pipeline import run_release
from release.selection import registry, selection_modes
from release.selection.types import Pools, RoundOutput, SelectionRun
from selpe_audit.artifact import document, modes
from selpe_audit.artifact.document import check_release_document, read_release
from selpe_audit.artifact.modes import ModeDescriptor, mode_names
from selpe_audit.artifact.records import OPEN, LedgerEntry
from selpe_audit.artifact.signing import generate_keypair
from selpe_audit.demo.generator import generate_rows
from selpe_audit.errors import UserError
from selpe_audit.kernel.distance import Kernel
from selpe_audit.review.page import render_review_html
from selpe_audit.schema import Schema, demo_schema_path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ToyBlock:
    """The toy mode's own block in ``selection``: a record, as the recipe says."""

    __pydantic_config__ = OPEN

    rule: str


TOY = ModeDescriptor(
    name="toy-first", accounting="pure", help="the first candidates, a data-blind toy",
    review="a data-blind toy rule (toy-first)", mechanism="toy: first candidates, no noise",
    block_key="toy_first", block=ToyBlock)


class ToyFirst:
    """Ranks candidates in generation order without reading the private input (0-DP, but
    charged its round's epsilon like any pure mode)."""

    descriptor = TOY
    constructor = NOISY_MAX_CONSTRUCTOR

    def private_rows(self, priv_rows: Any, schema: Schema, person_field: str | None) -> Any:
        return priv_rows

    def round(self, cfg: SelectionConfig, kernel: Kernel, pools: Pools, t: int,
              budget: float) -> tuple[Any, RoundOutput]:
        ranks = {c: list(range(f.n)) for c, (f, _) in pools.items()}
        return make_selection_round(budget, lambda _priv: ranks), RoundOutput(
            t, budget, 0.0, cfg.quota(t))

    def ledger_entries(self, cfg: SelectionConfig, run: SelectionRun) -> list[LedgerEntry]:
        return [LedgerEntry(f"selection/round/{r.round}", TOY.mechanism, self.constructor,
                            r.scale, float(r.epsilon or 0.0), 0.0, f"round {r.round}",
                            "sequential across rounds") for r in run.rounds]

    def artifact_block(self, cfg: SelectionConfig) -> ToyBlock:
        return ToyBlock("the first quota candidates of each class")


@pytest.fixture
def toy(monkeypatch):
    """Register the toy mode; both registries are restored afterwards."""
    for reg in (modes.MODES, registry.MODES):
        reg.load_builtins()
        monkeypatch.setattr(reg, "_entries", dict(reg._entries))
    return registry.register(ToyFirst())


def _cfg(tmp_path, **over):
    base = {"data": tmp_path / "d.csv", "schema": demo_schema_path(),
            "release_key": tmp_path / "k.pem", "counts_share": 0.5, "selection_share": 0.5}
    return load_config(ROOT / "examples" / "release.toml", {**base, **over})


def test_builtin_modes_agree_between_core_and_release():
    assert mode_names()[:3] == ("selpe", "pe-histogram", "representatives")
    assert [m.descriptor for m in selection_modes()] == list(modes.modes())
    assert [d.name for d in modes.modes() if d.needs_delta] == ["pe-histogram",
                                                                "representatives"]


def test_toy_mode_in_help_config_and_schema(tmp_path, toy):
    parser = argparse.ArgumentParser(prog="selpe-audit release")
    release_cli.COMMAND.add_arguments(parser)
    assert "toy-first" in parser.format_help().replace("\n", " ")
    assert parser.parse_args(["--selection", "toy-first"]).selection_mode == "toy-first"

    cfg = _cfg(tmp_path, selection_mode="toy-first")
    assert cfg.selection.mode == "toy-first" and cfg.selection_delta == 0.0
    with pytest.raises(UserError, match="toy-first"):  # the refusal lists it, on one line
        _cfg(tmp_path, selection_mode="histogram")

    sel = document.artifact_json_schema()["$defs"]["SelectionBlock"]["properties"]
    assert {"type": "string", "minLength": 1} in sel["mode"]["anyOf"]  # any mode reads off-site
    assert sel["toy_first"]["required"] == ["rule"]  # a registered mode's block is checked


@pytest.mark.model
def test_toy_mode_releases_and_reviews(tmp_path, toy):
    """A pool-mode release in the toy mode: a signed artifact the schema accepts (its block
    checked too), the toy's ledger entries, and the review page in the toy's words."""
    data = tmp_path / "priv.csv"
    pl.DataFrame(generate_rows(40, seed=3)).write_csv(data)
    pool = [{k: v for k, v in r.items() if k != "patient_id"}
            for r in generate_rows(60, seed=9)]
    pool_path = tmp_path / "pool.jsonl"
    pool_path.write_text("".join(json.dumps(r) + "\n" for r in pool))
    priv, pub, _ = generate_keypair(tmp_path / "k.pem")
    cfg = _cfg(tmp_path, data=data, release_key=priv, out=tmp_path / "out",
               lifetime_ledger=tmp_path / "ledger", candidates=pool_path, rounds=2, k=2,
               selection_mode="toy-first")
    run_release(cfg)
    doc = read_release(cfg.out, [pub]).doc
    sel = doc["selection"]
    assert sel["mode"] == "toy-first" and sel["toy_first"]["rule"].startswith("the first")
    assert [e["mechanism"] for e in doc["ledger"]["entries"]
            if e["id"].startswith("selection/")] == [TOY.mechanism] * 2
    assert TOY.review in render_review_html(doc)
    broken = dict(doc, selection=dict(sel, toy_first={"no": "rule"}))
    with pytest.raises(UserError, match="selection/toy_first"):
        check_release_document(broken)
