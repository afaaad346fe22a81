"""The code's shape, before the pipeline was reshaped (issue 61) and now, side by side.

    python -m benchmarks.code_shape [--base COMMIT] [--json FILE]

Read from the source alone (`ast`), for the tree here and for ``BASE`` (taken with
`git archive`; left out where the history lacks it): the release pipeline module's and its
longest function's lines, functions over `MAX_FUNCTION` lines in release/, decode/ and
audits/, modules over `MAX_MODULE` lines (demo data and the benchmarks' report tables
aside), private names imported across modules, and modules outside `release.dp` that
import opendp. Targets (issue 61): no function over 60 lines, no module over 500, no
private name across modules, opendp only in release.dp (two named exceptions).
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: main before the reshaping: the pipeline as issue 61 found it
BASE = "25b17ff"
PACKAGES = ("release", "decode", "audits", "selpe_audit", "benchmarks")
MAX_FUNCTION = 60
MAX_MODULE = 500
#: demo data (the generator's tables of fictional values)
LONG_BY_NATURE = ("selpe_audit/demo/generator.py",)


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


def _functions(tree: ast.AST) -> Iterator[tuple[str, int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node.end_lineno - node.lineno + 1


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


def shape(root: Path) -> dict[str, Any]:
    """The measures of the tree at ``root``."""
    modules = _modules(root)
    long_functions, long_modules, private, opendp, pgm = [], [], [], [], []
    for module, path in modules.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        rel = path.relative_to(root).as_posix()
        if module.split(".")[0] in ("release", "decode", "audits"):
            long_functions += [(n, rel, name) for name, n in _functions(tree)
                               if n > MAX_FUNCTION]
        lines = len(text.splitlines())
        if lines > MAX_MODULE and rel not in LONG_BY_NATURE:
            long_modules.append((lines, rel))
        private += _private_imports(module, tree, set(modules))
        if not module.startswith("release.dp"):
            opendp += [module] if _imports(tree, "opendp") else []
            pgm += [module] if _imports(tree, "mbi") else []
    pipeline = ast.parse((root / "release/pipeline.py").read_text(encoding="utf-8"))
    return {"pipeline_lines": len((root / "release/pipeline.py").read_text().splitlines()),
            "release_function_lines": dict(_functions(pipeline)).get("_release"),
            "functions_over_max": sorted(long_functions, reverse=True),
            "modules_over_max": sorted(long_modules, reverse=True),
            "private_imports": sorted(private), "opendp_outside_dp": sorted(opendp),
            "mbi_outside_dp": sorted(pgm)}


def _base_tree(commit: str, into: Path) -> Path | None:
    """The project at ``commit`` (its packages only), or None where git lacks it."""
    got = subprocess.run(["git", "archive", commit, *PACKAGES], cwd=ROOT, capture_output=True)
    if got.returncode != 0:
        return None
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def _row(what: str, key: str, base: dict[str, Any] | None, now: dict[str, Any]) -> str:
    def cell(r: dict[str, Any] | None) -> str:
        if r is None:
            return "-"
        v = r[key]
        return str(len(v)) if isinstance(v, list) else str(v)
    return f"| {what} | {cell(base)} | {cell(now)} |"


def run(base: str = BASE) -> dict[str, Any]:
    now = shape(ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        tree = _base_tree(base, Path(tmp))
        before = shape(tree) if tree is not None else None
    table = "\n".join([
        f"| measure | before ({base}) | now |", "|---|---|---|",
        _row("release/pipeline.py lines", "pipeline_lines", before, now),
        _row("its `_release` lines", "release_function_lines", before, now),
        _row(f"functions over {MAX_FUNCTION} lines (release, decode, audits)",
             "functions_over_max", before, now),
        _row(f"modules over {MAX_MODULE} lines", "modules_over_max", before, now),
        _row("private names imported across modules", "private_imports", before, now),
        _row("modules importing opendp outside release.dp", "opendp_outside_dp", before, now)])
    summary = (f"Now: release/pipeline.py {now['pipeline_lines']} lines, "
               f"{len(now['functions_over_max'])} functions over {MAX_FUNCTION} lines, "
               f"{len(now['modules_over_max'])} modules over {MAX_MODULE}, "
               f"{len(now['private_imports'])} private names across modules, opendp outside "
               f"release.dp in {', '.join(now['opendp_outside_dp']) or 'none'}"
               + (f" (before: {before['pipeline_lines']} lines, "
                  f"{len(before['functions_over_max'])}, {len(before['modules_over_max'])}, "
                  f"{len(before['private_imports'])}, "
                  f"{len(before['opendp_outside_dp'])} modules)" if before else ""))
    return {"base": base, "before": before, "now": now, "table": table, "summary": summary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default=BASE, help=f"the commit to compare with ({BASE})")
    ap.add_argument("--json", help="also write the result to this file")
    args = ap.parse_args()
    result = run(args.base)
    print(result["summary"])
    print(result["table"])
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
