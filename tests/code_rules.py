"""The code's shape, read from the source alone (`ast`): modules over `MAX_MODULE` lines,
private names imported across modules, modules outside `release.dp` that
import OpenDP or private-pgm, and the release stages' untyped payloads.
tests/test_code_shape.py holds the rules (no module over 600
lines, no private name across modules, OpenDP and mbi behind their adapter); a function's
size is ruff's to check, by what it does, not its lines (pyproject.toml: C901 complexity
at most 15 branches, PLR0913 at most 10 arguments; issue 69).
Once the benchmark ``code_shape`` (retired 2026-12-07; its before/after table stays in
benchmarks/RESULTS.md)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("release", "decode", "audits", "selpe_audit", "benchmarks")
MAX_MODULE = 600


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the project's packages under ``root``."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _private_imports(module: str, tree: ast.AST, known: set[str]) -> Iterator[str]:
    """``from X import _y`` of another project module X (dunders aside)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in known and node.module != module:
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    yield f"{module}: {node.module}.{alias.name}"


def _imports(tree: ast.AST, package: str) -> bool:
    """Whether the module imports ``package`` (or one of its modules) anywhere."""
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if any(n == package or n.startswith(f"{package}.") for n in names):
            return True
    return False


def _dict_payloads(module: str, tree: ast.AST) -> Iterator[str]:
    """A stage's untyped payloads: record fields and function parameters annotated
    ``dict[str, Any]`` (what a stage hands the next should be a record)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and \
                        ast.unparse(item.annotation) == "dict[str, Any]":
                    yield f"{module}.{node.name}.{item.target.id}"
        elif isinstance(node, ast.FunctionDef):
            for arg in node.args.args + node.args.kwonlyargs:
                if arg.annotation is not None and \
                        ast.unparse(arg.annotation) == "dict[str, Any]":
                    yield f"{module}.{node.name}({arg.arg})"


def shape(root: Path) -> dict[str, Any]:
    """The measures of the tree at ``root``."""
    modules = _modules(root)
    long_modules, private, opendp, pgm, payloads = [], [], [], [], []
    for module, path in modules.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        rel = path.relative_to(root).as_posix()
        lines = len(text.splitlines())
        if lines > MAX_MODULE:
            long_modules.append((lines, rel))
        private += _private_imports(module, tree, set(modules))
        if not module.startswith("release.dp"):
            opendp += [module] if _imports(tree, "opendp") else []
            pgm += [module] if _imports(tree, "mbi") else []
        if module.startswith("release.stages."):
            payloads += _dict_payloads(module, tree)
    return {"modules_over_max": sorted(long_modules, reverse=True),
            "private_imports": sorted(private), "opendp_outside_dp": sorted(opendp),
            "mbi_outside_dp": sorted(pgm), "stage_dict_payloads": sorted(payloads)}
