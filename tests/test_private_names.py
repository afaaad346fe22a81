"""No private name is imported across modules (issue 61).

A leading underscore says "this module's own": once another module imports it, it is shared
API in all but name, and a rename or a change of meaning breaks a caller nobody looked for.
A helper two modules need is public where it belongs (or, between benchmarks, in
`benchmarks.common`). This walks every module of the packages and the tests with `ast` and
lists each ``from module import _name`` and each ``module._name`` read through an imported
module; dunder names are not private. A module importing its own package's private name
is still cross-module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from conftest import ROOT

PACKAGES = ("release", "decode", "audits", "benchmarks", "selpe_audit")
TESTS = ROOT / "tests"



def _module_files() -> dict[str, Path]:
    """Dotted module name -> file: the packages', and the tests' under the bare names they
    import each other by (``conftest``)."""
    files = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in sorted(TESTS.glob("*.py")):
        files[path.stem] = path
    return files


MODULES = _module_files()


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _project(name: str) -> bool:
    """Whether ``name`` is a module of this project (not a library's)."""
    return name.split(".")[0] in {*PACKAGES, "tests"} or name in MODULES


def _canonical(name: str) -> str:
    """A tests module by the bare name the tests import it by (``tests.postgres``)."""
    return name.removeprefix("tests.")


def _base(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative imports resolved)."""
    if not node.level:
        return _canonical(node.module or "")
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = package[:len(package) - node.level + 1]
    return ".".join([*package, *([node.module] if node.module else [])])


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"] (None when the chain does not start at a name)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute) and (head := _dotted(node.value)) is not None:
        return [*head, node.attr]
    return None


def offenders(module: str, path: Path) -> Iterator[str]:
    """``"module: other._name"`` for each private name ``module`` takes from another."""
    tree = ast.parse(path.read_text(), str(path))
    bound: dict[str, str] = {}  # a local name -> the project module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = _base(module, path, node)
            for alias in node.names:
                if _is_private(alias.name) and _project(base):
                    yield f"{module}: {base}.{alias.name}"
                elif (name := _canonical(f"{base}.{alias.name}")) in MODULES:
                    bound[alias.asname or alias.name] = name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _project(alias.name):
                    local = alias.asname or alias.name.split(".")[0]
                    bound[local] = _canonical(alias.name) if alias.asname else local
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        chain = _dotted(node.value)
        if chain is None or chain[0] not in bound:
            continue
        target = _canonical(".".join([bound[chain[0]], *chain[1:]]))
        if target in MODULES and target != module:
            yield f"{module}: {target}.{node.attr}"


def test_no_private_name_is_imported_across_modules():
    found = {o for module, path in MODULES.items() for o in offenders(module, path)}
    assert sorted(found) == [], "private names imported across modules"


def test_the_check_sees_both_forms(tmp_path):
    """A ``from`` import and an attribute read through an imported module are both found;
    a dunder and a module's own private name are not."""
    path = tmp_path / "probe.py"
    path.write_text("from audits.fidelity import _x, __doc__\nfrom audits import fidelity\n"
                    "import audits.fidelity as fid\nimport decode.fit\n_own = 1\n"
                    "fidelity._y, fid._z, decode.fit._w, fidelity.__name__, _own\n")
    assert sorted(offenders("probe", path)) == [
        "probe: audits.fidelity._x", "probe: audits.fidelity._y", "probe: audits.fidelity._z",
        "probe: decode.fit._w"]
