"""`selpe_audit.registry.Registry`, the one registry type: a name is registered once (the
second registration names both places), built-ins load at the first lookup in the order
named, a broken plugin is one line naming its entry point, and every built-in registers in
its own module."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from selpe_audit.errors import UserError
from selpe_audit.registry import DuplicateName, Registry


def _register_again(reg: Registry[int]) -> None:
    reg.add("a", 2)


def test_a_second_registration_fails_naming_both_places():
    reg: Registry[int] = Registry("toy")
    assert reg.add("a", 1) == 1
    with pytest.raises(DuplicateName) as e:
        _register_again(reg)
    msg = str(e.value)
    assert "toy 'a' is registered twice" in msg and "\n" not in msg
    first = f"{__name__}.test_a_second_registration_fails_naming_both_places"
    assert f"first by {first} (line" in msg
    assert f"then by {__name__}._register_again (line" in msg
    assert reg.get("a") == 1 and isinstance(e.value, UserError)


def test_unknown_name_lists_the_known_ones():
    reg: Registry[int] = Registry("toy")
    reg.add("a", 1)
    reg.add("b", 2)
    with pytest.raises(ValueError, match="unknown toy 'c'; choose one of a, b"):
        reg.get("c")
    assert reg.find("c") is None and reg.find(3) is None and "a" in reg
    assert reg.names() == ("a", "b") and reg.items() == (("a", 1), ("b", 2))


def _package(root: Path, name: str, modules: dict[str, str]) -> None:
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for mod, text in modules.items():
        (pkg / f"{mod}.py").write_text(textwrap.dedent(text))


def test_builtins_load_at_the_first_lookup_in_the_order_named(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    reg_src = """
        from selpe_audit.registry import Registry
        REG = Registry("toy", builtins=("toy_builtins.first", "toy_builtins.second"))
        """
    _package(tmp_path, "toy_builtins", {
        "reg": reg_src,
        "first": "from toy_builtins.reg import REG\nREG.add('one', 1)\n",
        "second": "from toy_builtins.reg import REG\nREG.add('two', 2)\n"})
    from toy_builtins import second  # type: ignore[import-not-found]  # imported first
    from toy_builtins.reg import REG  # type: ignore[import-not-found]

    assert second is not None
    assert REG.names() == ("one", "two")  # the named order, whichever was imported first
    REG.load_builtins()  # again: nothing registered twice
    assert REG.values() == (1, 2)


def test_a_broken_plugin_is_one_line_naming_its_entry_point(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "broken_toy.py").write_text("raise ImportError('no such thing')\n")
    info = tmp_path / "broken_toy-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-toy\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[selpe_audit.test_toys]\nbroken = broken_toy\n")
    reg: Registry[int] = Registry("toy", group="selpe_audit.test_toys")
    with pytest.raises(UserError) as e:
        reg.names()
    msg = str(e.value)
    assert "\n" not in msg and e.value.__cause__ is None and e.value.__suppress_context__
    assert msg.startswith("toy plugin 'broken' (broken_toy) failed to load: ImportError: "
                          "no such thing")


def test_a_plugin_mode_may_not_take_a_builtin_name():
    from dataclasses import replace

    from release.selection import registry
    from release.selection.selpe import SelpeMode
    from selpe_audit.artifact.modes import SELPE

    class Impostor(SelpeMode):
        descriptor = replace(SELPE, help="another selpe")

    with pytest.raises(DuplicateName, match=r"'selpe' is registered twice: first by "
                                            r"selpe_audit\.artifact\.modes .*then by "
                                            rf"{__name__}\.test_a_plugin"):
        registry.register(Impostor())
    assert registry.get("selpe").descriptor is SELPE


def test_every_builtin_registers_in_its_own_module():
    from audits.kinds import KINDS
    from decode.decoders.registry import DECODERS
    from release.counts.registry import MODES as COUNTS
    from release.selection.registry import MODES as SELECTION

    for reg in (KINDS, DECODERS, COUNTS, SELECTION):
        reg.load_builtins()
    assert {n: e.module for n, e in KINDS._entries.items()} == {
        "mia": "audits.mia", "mechanism": "audits.mechanism_kind",
        "fidelity": "audits.fidelity", "utility": "audits.utility", "report": "audits.report"}
    assert {n: e.module for n, e in DECODERS._entries.items()} == {
        "marginals": "decode.decoders.marginals", "model": "decode.decoders.model",
        "llm": "decode.decoders.llm"}
    assert {e.module for e in COUNTS._entries.values()} == {"release.counts.marginals",
                                                            "release.counts.model"}
    assert [e.module for e in SELECTION._entries.values()] == [
        "release.selection.selpe", "release.selection.pe_histogram",
        "release.selection.representatives"]
