"""Typed ids so that a replica id cannot be passed where a policy spec is expected."""

from __future__ import annotations

from typing import NewType

ReplicaId = NewType("ReplicaId", int)
"""Index of a simulated or live replica, unique within one run (never reused)."""

PolicySpec = NewType("PolicySpec", str)
"""A policy with its inline parameters, exactly as given on the command line (``hpa:target=0.5``)."""

TraceName = NewType("TraceName", str)
"""Human name of a trace (``azure-code``, a file stem)."""
