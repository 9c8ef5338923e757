"""Ebb: safe, SLA-aware elastic scale-down for GPU clusters.

The public surface is deliberately small; see ``docs/architecture.md`` for the layers.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
