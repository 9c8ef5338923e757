"""Regenerate the package tables of docs/architecture.md from the code and .importlinter.

    python scripts/architecture.py          # rewrite the generated part of docs/architecture.md
    python scripts/architecture.py --check  # exit 1 when it is out of date (tests/unit/test_architecture_doc.py)

For every package (and top-level module) of ``src/ebb``: what it owns (its ``__init__`` docstring's
first sentence), its modules with the first sentence of each one's docstring, the packages it may
import (from the layer contract and the forbidden/independence contracts of ``.importlinter``) and
the ones it does import (read from its ``import`` statements). The prose above the generated part is
kept as written.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ebb"
DOC = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- BEGIN GENERATED: python scripts/architecture.py -->"
END = "<!-- END GENERATED -->"


def first_sentence(doc: str | None) -> str:
    """The docstring's first sentence, on one line, code roles reduced to their text."""
    if not doc:
        return ""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    para = re.sub(r":\w+:`~?([^`]+)`", lambda m: f"`{m.group(1).split('.')[-1]}`", para)
    para = para.replace("``", "`")
    depth, tick = 0, False
    for i, ch in enumerate(para):
        tick = not tick if ch == "`" else tick
        if tick:
            continue
        depth += (ch in "([{") - (ch in ")]}")
        if depth == 0 and ch in ".!?" and (i + 1 == len(para) or para[i + 1] == " "):
            return para[:i + 1]
    return para


def units() -> list[str]:
    """Top-level packages and modules of ebb (``__init__`` and ``__main__`` aside)."""
    out = []
    for p in sorted(SRC.iterdir()):
        if p.is_dir() and (p / "__init__.py").exists():
            out.append(p.name)
        elif p.suffix == ".py" and p.stem not in ("__init__", "__main__"):
            out.append(p.stem)
    return out


def modules_of(unit: str) -> list[tuple[str, Path]]:
    base = SRC / unit
    if base.is_dir():
        return [((".".join(p.parent.relative_to(base).parts) + "/") if p.name == "__init__.py"
                 else ".".join(p.relative_to(base).with_suffix("").parts), p) for p in sorted(base.rglob("*.py"))
                if p.name != "__init__.py" or p.parent != base]
    return []


def imports_of(unit: str) -> set[str]:
    """The other ebb units a unit imports (any import statement, ``TYPE_CHECKING`` ones included)."""
    base = SRC / unit
    files = sorted(base.rglob("*.py")) if base.is_dir() else [SRC / f"{unit}.py"]
    found: set[str] = set()
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                parts = n.split(".")
                if parts[0] == "ebb" and len(parts) > 1 and parts[1] != unit:
                    found.add(parts[1])
    return found


Contracts = tuple[list[list[str]], dict[str, set[str]], list[tuple[set[str], set[tuple[str, str]]]]]
"""(layers top first, each a list of units; forbidden imports per unit; independent groups with the
imports their contract ignores)."""


def contracts() -> Contracts:
    """The import contracts of ``.importlinter``, parsed (read once per run, by :func:`generated`)."""
    cp = configparser.ConfigParser()
    cp.read(ROOT / ".importlinter")
    layers: list[list[str]] = []
    forbidden: dict[str, set[str]] = {}
    independent: list[tuple[set[str], set[tuple[str, str]]]] = []
    for sec in cp.sections():
        if not sec.startswith("importlinter:contract:"):
            continue
        c = cp[sec]
        kind = c.get("type")
        if kind == "layers":
            layers = [[x.strip() for x in line.split("|")] for line in c["layers"].split("\n") if line.strip()]
        elif kind == "forbidden":
            srcs = [m.strip().removeprefix("ebb.") for m in c["source_modules"].split("\n") if m.strip()]
            bans = {m.strip().removeprefix("ebb.") for m in c["forbidden_modules"].split("\n")
                    if m.strip().startswith("ebb.")}
            for s in srcs:
                forbidden.setdefault(s, set()).update(bans)
        elif kind == "independence":
            ignored = {tuple(x.strip().removeprefix("ebb.") for x in line.split("->"))
                       for line in c.get("ignore_imports", "").split("\n") if "->" in line}
            independent.append(({m.strip().removeprefix("ebb.") for m in c["modules"].split("\n") if m.strip()},
                                {(a, b) for a, b in ignored}))
    return layers, forbidden, independent


def may_import(unit: str, all_units: list[str], rules: Contracts) -> list[str]:
    """The units ``unit`` may import under the parsed contracts ``rules``."""
    layers, forbidden, independent = rules
    flat = [u for row in layers for u in row]
    lower: set[str]
    if unit in flat:
        row = next(i for i, r in enumerate(layers) if unit in r)
        lower = {u for r in layers[row + 1:] for u in r}
        lower |= {u for u in all_units if u not in flat}  # outside the layers: usable by all
    else:
        lower = {u for u in all_units if u not in flat}
    lower -= forbidden.get(unit, set())
    for group, ignored in independent:
        if unit in group:
            lower -= {u for u in group if (unit, u) not in ignored}
    lower.discard(unit)
    return sorted(lower)


def generated() -> str:
    all_units = units()
    rules = contracts()
    layers = rules[0]
    order = [u for row in layers for u in row] + [u for u in all_units if u not in {x for r in layers for x in r}]
    lines = [BEGIN, "", "## The packages, top layer first", "",
             "Layer order (`.importlinter`): " + " > ".join(" | ".join(f"`{u}`" for u in row) for row in layers)
             + "; outside the layers, usable by all: "
             + ", ".join(f"`{u}`" for u in all_units if u not in {x for r in layers for x in r}) + ".", ""]
    for unit in order:
        if unit not in all_units:
            continue
        path = SRC / unit
        init = path / "__init__.py" if path.is_dir() else SRC / f"{unit}.py"
        owns = first_sentence(ast.get_docstring(ast.parse(init.read_text())))
        lines += [f"### `ebb.{unit}`", "", owns or "(no docstring)", ""]
        may, does = may_import(unit, all_units, rules), sorted(imports_of(unit))
        lines.append("May import: " + (", ".join(f"`{u}`" for u in may) or "no other ebb package") + ".  ")
        lines.append("Imports: " + (", ".join(f"`{u}`" for u in does) or "no other ebb package") + ".")
        mods = modules_of(unit)
        if mods:
            lines += ["", "| module | what it produces |", "|---|---|"]
            for name, p in mods:
                doc = first_sentence(ast.get_docstring(ast.parse(p.read_text()))).replace("|", "\\|")
                lines.append(f"| `{name}` | {doc} |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/architecture.md is out of date")
    args = ap.parse_args()
    text = DOC.read_text()
    head = text.split(BEGIN)[0].rstrip() + "\n\n"
    new = head + generated()
    if args.check:
        if new != text:
            print("docs/architecture.md is out of date: run python scripts/architecture.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
