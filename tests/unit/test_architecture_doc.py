"""docs/architecture.md's package tables are what scripts/architecture.py makes of the code and .importlinter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_architecture_document_matches_the_packages_and_their_contracts() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "architecture.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + " — run: python scripts/architecture.py"


def test_every_package_says_what_it_owns_and_imports_only_what_it_may() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert "(no docstring)" not in text
    for block in text.split("\n### ")[1:]:
        name = block.split("`")[1]
        may = block.split("May import: ")[1].split(".  \n")[0]
        does = block.split("Imports: ")[1].split(".\n")[0]
        allowed = {p.strip("` ") for p in may.split(",")}
        used = {p.strip("` ") for p in does.split(",")} - {"no other ebb package"}
        assert used <= allowed, f"{name} imports {sorted(used - allowed)} beyond what it may"


def test_the_generator_reads_the_contracts_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, it parsed .importlinter again for every package (may_import called contracts() itself)."""
    import configparser
    import importlib.util

    spec = importlib.util.spec_from_file_location("architecture_script", ROOT / "scripts" / "architecture.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    reads: list[object] = []
    original = configparser.ConfigParser.read

    def counting(self: configparser.ConfigParser, *args: Any, **kwargs: Any) -> list[str]:
        reads.append(args)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(configparser.ConfigParser, "read", counting)
    text = script.generated()
    assert len(reads) == 1 and text.count("May import: ") == len(script.units())
