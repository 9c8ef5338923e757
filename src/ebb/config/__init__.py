"""Declarative configuration, parsed once into frozen dataclasses (no I/O beyond reading the file)."""

from __future__ import annotations

from ebb.config.triggers import (
    DEFAULT_TRIGGERS_YAML,
    Rule,
    Trigger,
    default_triggers,
    load_triggers,
    parse_triggers,
)

__all__ = ["DEFAULT_TRIGGERS_YAML", "Rule", "Trigger", "default_triggers", "load_triggers", "parse_triggers"]
