"""``ebb lint``: cost and stability pitfalls in DeepSpeed, Kubernetes, Prometheus and PyTorch configs.

Nothing is executed: YAML is composed, JSON scanned, Python parsed with :mod:`ast`.
"""

from __future__ import annotations

from ebb.lint.core import CONFIG_NAME, Document, Finding, LintResult, ParseError, Rule, lint_paths, load_disabled
from ebb.lint.rules import ALL_RULES, rule_by_id

__all__ = ["ALL_RULES", "CONFIG_NAME", "Document", "Finding", "LintResult", "ParseError", "Rule",
           "lint_paths", "load_disabled", "rule_by_id"]
