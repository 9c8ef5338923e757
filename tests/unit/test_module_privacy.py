"""No module reaches another module's private fields: a leading-underscore attribute is read only in the
module that defines it (``self._x`` of its own classes, or a private of another class of that module)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "ebb"
DUNDER_OK = {"_asdict", "_replace", "_fields", "_make"}  # NamedTuple's public API
EXTERNAL_OK = {"_getframe", "_exit", "_click"}  # the standard library's and Typer's documented privates


def defined_privates(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, attributes it assigns, slots it declares."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name.startswith("_"):
            out.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr.startswith("_"):
            out.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_"):
            out.add(node.value)  # __slots__ entries
    return out


def reaches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    own = defined_privates(tree)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr in own or node.attr in DUNDER_OK or node.attr in EXTERNAL_OK:
            continue
        found.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_another_module_s_private_fields() -> None:
    found = [hit for p in sorted(SRC.rglob("*.py")) for hit in reaches(p)]
    assert not found, "\n".join(found)


def test_the_check_catches_a_private_read_across_modules(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f(pol):\n    return pol._bound\n")
    global SRC
    saved, SRC = SRC, tmp_path
    try:
        assert reaches(tmp_path / "m.py") == [f"{tmp_path.name}/m.py:2: pol._bound"]
    finally:
        SRC = saved


def private_imports(path: Path) -> list[str]:
    """``from module import _name`` statements: a private name taken from another module."""
    tree = ast.parse(path.read_text())
    return [f"{path.name}:{node.lineno}: from {node.module} import {alias.name}" for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) for alias in node.names
            if alias.name.startswith("_") and not alias.name.startswith("__")]


def test_no_module_imports_another_module_s_private_names() -> None:
    """The product, the benchmarks and the scripts: a name another module needs is public (bench/deadlines.py
    took ``_refused`` from bench/limits.py, ebb.sources.replay ``_time_column`` from generic_csv)."""
    root = SRC.parents[1]
    files = [*sorted(SRC.rglob("*.py")), *sorted((root / "bench").glob("*.py")), *sorted((root / "scripts").glob("*.py"))]
    found = [hit for p in files for hit in private_imports(p)]
    assert not found, "\n".join(found)


def test_the_import_check_catches_a_private_name(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("from limits import Case, _refused\n")
    assert private_imports(tmp_path / "m.py") == ["m.py:1: from limits import _refused"]
