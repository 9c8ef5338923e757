"""Shared by the fluid-engine tests: the script that writes Ebb's fluid reference, loaded as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "sim"


@pytest.fixture(scope="session")
def reference_maker() -> ModuleType:
    """``tests/data/sim/make_ebb_fluid_reference.py``: its workloads and ``run_case``."""
    spec = importlib.util.spec_from_file_location("make_ebb_fluid_reference", DATA / "make_ebb_fluid_reference.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
