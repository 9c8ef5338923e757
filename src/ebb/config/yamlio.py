"""Shared YAML reading for config files: one mapping per document, errors that name the fix."""

from __future__ import annotations

from typing import Any

import yaml

from ebb.errors import ConfigError


def config_error(source: str, key: str, msg: str, fix: str) -> ConfigError:
    """``source: key: msg (fix: fix)`` — every config error reads the same way."""
    return ConfigError(f"{source}: {key}: {msg} (fix: {fix})")


def load_mapping(text: str, source: str, shape_hint: str) -> dict[Any, Any]:
    """Parse YAML ``text`` that must be a mapping; broken YAML names its line."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "document"
        raise config_error(source, where, f"broken YAML: {exc}", "fix the YAML syntax") from exc
    if not isinstance(doc, dict):
        raise config_error(source, "<top>", f"expected a mapping, got {type(doc).__name__}", shape_hint)
    return doc
