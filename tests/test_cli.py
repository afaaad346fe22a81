"""The console script as a user meets it: help, keygen, and no command at all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXE = str(Path(sys.executable).with_name("selpe-audit"))


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", NO_COLOR="1", COLUMNS="200")
    return subprocess.run([EXE, *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)


@pytest.mark.slow
def test_help_lists_every_subcommand():
    r = run("--help")
    assert r.returncode == 0
    for name in ("keygen", "release", "review", "approve", "decode", "audit", "demo"):
        assert name in r.stdout


@pytest.mark.slow
def test_keygen(tmp_path):
    r = run("keygen", str(tmp_path / "keys" / "me.pem"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "keys" / "me.pub.pem").exists()
    again = run("keygen", str(tmp_path / "keys" / "me.pem"))
    assert again.returncode != 0
    assert again.stderr.count("\n") == 1 and "already exists" in again.stderr
    assert "Traceback" not in again.stderr


def test_a_command_loads_only_its_own_stage():
    """`selpe-audit decode` (review, release) builds only its own parser: the audits' and
    OpenDP's prelude's scikit-learn (seconds) stays out of every command but the audits."""
    probe = ("import sys\nfrom selpe_audit.cli.main import main\n"
             "for name in ('decode', 'review', 'release', 'ledger'):\n"
             "    try:\n        main([name, '--help'])\n    except SystemExit:\n        pass\n"
             "print(sorted(m for m in ('sklearn', 'audits.mia') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                       env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.slow
def test_no_command_prints_help():
    r = run()
    assert r.returncode != 0
    assert "usage" in r.stdout


def test_release_help_states_the_config_defaults():
    """--help's defaults are read from the config (they once said T = b = 5 for 1 and 20)."""
    import argparse
    from dataclasses import fields

    from release import cli
    from release.config_sections import BudgetConfig, SelectionConfig

    parser = argparse.ArgumentParser(prog="selpe-audit release")
    cli.COMMAND.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    sel = {f.name: f.default for f in fields(SelectionConfig)}
    for flag, name in (("--rounds", "rounds"), ("--batches", "batches"), ("--k", "k")):
        (action,) = [a for a in parser._actions if flag in a.option_strings]
        assert f"(default {sel[name]})" in str(action.help), flag
    assert sel["rounds"] == 1 and sel["batches"] == 20  # the defaults the help once got wrong
    share = {f.name: f.default for f in fields(BudgetConfig)}["counts_share"]
    assert f"(1 = counts only) (default {share:g})" in text


def test_every_release_argument_reaches_the_config_field_that_declares_it(tmp_path):
    """The CLI's arguments are built from the config's declarations (issue 34): each one,
    given on the command line, sets its field in the config `load_config` builds."""
    import argparse

    from release import cli
    from release.config_file import OVERRIDES, cli_settings, load_config, mode_setting_owner

    parser = argparse.ArgumentParser(prog="selpe-audit release")
    cli.COMMAND.add_arguments(parser)
    base = ["--data", "rows.csv", "--schema", "s.json", "--key", "k.pem",
            "--lifetime-ledger", str(tmp_path / "ledger")]
    samples = {float: "0.5", int: "2", str: "x"}
    for s in cli_settings():
        if s.flag in base or s.flag in ("--query", "--table", "--counts-share", "--delta"):
            continue  # set in base, database-only, or the pair of shares and delta (below)
        if s.type is bool:  # a switch: given without a value, it sets its field true
            value, given = "True", [s.flag]
        else:
            value = s.choices[-1] if s.choices else samples[s.type]
            value = {"--unit": "row", "--lifetime-epsilon": "4"}.get(s.flag, value)
            given = [s.flag, value]
        owner = mode_setting_owner(s.key)  # a selection mode's own setting: that mode
        mode = ["--selection", owner] if owner else []
        args = parser.parse_args([*base, *mode, *given])
        overrides = {k: v for k, v in vars(args).items() if k != "config"}
        cfg = load_config(None, overrides)
        section, name = OVERRIDES.get(s.key, (None, s.key))
        got = (getattr(cfg.selection.settings, s.key) if owner else
               getattr(getattr(cfg, section) if section else cfg, name))
        assert str(got) == value or got == s.type(value), (s.flag, got)
    args = parser.parse_args([*base, "--counts-share", "1", "--delta", "0.0001"])
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    overrides["selection_share"] = 0.0
    cfg = load_config(None, overrides)
    assert cfg.budget.counts_share == 1.0 and cfg.budget.delta == 1e-4


@pytest.mark.slow
def test_a_selection_mode_without_a_share_says_it_does_not_run(tmp_path):
    """The budget is counts only by default: naming a selection mode alone runs no selection,
    and the release says so in one line, with the flag that gives it a share."""
    import json

    from selpe_audit.schema import demo_schema_path
    from tests.conftest import DEMO_SAMPLE

    assert run("keygen", str(tmp_path / "k.pem")).returncode == 0
    out = tmp_path / "out"
    r = run("release", "--data", str(DEMO_SAMPLE), "--schema", str(demo_schema_path()),
            "--key", str(tmp_path / "k.pem"), "--out", str(out), "--selection", "selpe",
            "--lifetime-ledger", str(tmp_path / "ledger"))
    assert r.returncode == 0, r.stderr
    assert "--selection selpe gets no epsilon" in r.stderr and "--counts-share 0.5" in r.stderr
    assert json.loads((out / "release.json").read_text()).get("selection") is None
