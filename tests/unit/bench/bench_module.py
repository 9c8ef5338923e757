"""Loading a ``bench/`` script as a module (the folder is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parents[3] / "bench"


def load_bench(name: str) -> ModuleType:
    """``bench/NAME.py`` imported under ``NAME`` (registered first: dataclasses resolve their module by name)."""
    spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
