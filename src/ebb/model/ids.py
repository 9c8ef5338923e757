"""Typed ids so that a replica id cannot be passed where a policy spec is expected."""

from __future__ import annotations

from typing import NewType

ReplicaId = NewType("ReplicaId", int)
"""Index of a simulated or live replica, unique within one run (never reused)."""

PolicySpec = NewType("PolicySpec", str)
"""A policy with its inline parameters, exactly as given on the command line (``hpa:target=0.5``)."""

TraceName = NewType("TraceName", str)
"""Human name of a trace (``azure-code``, a file stem)."""

CycleId = NewType("CycleId", str)
"""One decision cycle (one pass of the control loop), unique across all runs in a ledger."""

DecisionId = NewType("DecisionId", str)
"""One decision about one workload, unique across all cycles in a ledger."""

RunId = NewType("RunId", str)
"""One controller or simulator run; groups the cycles it wrote."""
