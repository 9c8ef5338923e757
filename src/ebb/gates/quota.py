"""Elastic quota as an admission gate (SPEC §3.5, note §4.4): the public face of the quota model.

The model itself — :class:`Quota`, :class:`QuotaPolicy`, :class:`QuotaPod`, :func:`admit`,
:func:`borrowed`, :func:`borrower_keys` — is a planning concern and
lives in :mod:`ebb.decide.quota`, so that the L3 planner (:mod:`ebb.decide.coordinate`, one layer
below the gates) can reclaim borrowed capacity first. This module re-exports it unchanged:
``from ebb.gates.quota import admit`` and ``ebb.decide.quota.admit`` are the same object.

As a gate, :func:`admit` answers one question per pod, with a one-line reason: deny above
``max`` (every QoS class), allow within ``min`` (every class), and between them allow only the
classes :class:`QuotaPolicy` lets borrow (default: Guaranteed only). See ``docs/quota.md``.

Pure: stdlib only, no I/O.
"""

from __future__ import annotations

from ebb.decide.quota import (
    QUOTA_RESOURCES,
    Admission,
    PodKey,
    QoSClass,
    Quota,
    QuotaPod,
    QuotaPolicy,
    admit,
    borrowed,
    borrower_keys,
)

__all__ = ["QUOTA_RESOURCES", "Admission", "PodKey", "QoSClass", "Quota", "QuotaPod", "QuotaPolicy",
           "admit", "borrowed", "borrower_keys"]
