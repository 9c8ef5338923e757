"""Elastic quota per namespace, by Pod QoS class: the pure planning model (SPEC §3.5, note §4.4).

This is where quota lives for planning: the L3 planner (:mod:`ebb.decide.coordinate`) uses
:func:`borrowed` to reclaim borrowed capacity first; :mod:`ebb.gates.quota` re-exports all of it
as the admission gate, which ``ebb plan`` applies to a snapshot's ``pending`` pods. :class:`QoSClass` is defined here (not in :mod:`ebb.gates.qos`, which
re-exports it) because ``ebb.decide`` sits below ``ebb.gates`` and may not import it.

Each namespace has a :class:`Quota`: ``min`` (guaranteed capacity) and ``max`` (hard cap) per
resource, in integer milli-units (``cpu`` 1000 = one core, ``memory`` milli-bytes,
``nvidia.com/gpu`` 1000 = one GPU). Capacity between ``min`` and ``max`` is the *elastic
share*: borrowed from the cluster and taken back first when scaling down.

**Admission** (:func:`admit`), per resource the pod requests (> 0), with
``after = usage + request``:

Only resources listed in the quota's ``min`` or ``max`` are limited (a resource listed only
in ``max`` has min 0; one listed only in ``min`` has no cap).

1. ``after > max`` for any resource → deny (hard cap, every QoS class).
2. ``after <= min`` for every requested resource → allow (inside the guaranteed share).
3. Otherwise the pod would borrow: allowed only for the QoS classes :class:`QuotaPolicy`
   lets borrow — by default Guaranteed yes (high priority), Burstable no (only within min),
   BestEffort never.

Admission is monotone: lower usage, a higher ``min`` or a higher ``max`` never turns an
allow into a deny; and as long as usage starts at or below ``max``, admitted pods keep it there.

**Borrowers** (:func:`borrowed`). Pods hold ``min`` in protection order — highest priority,
then oldest, then name — first fit: a pod whose requests still fit under ``min`` (given the
pods before it) is inside the guaranteed share, every other pod is a borrower. Removing all
borrowers therefore always brings the namespace back to at or below ``min``.

**Reclaim** (in :mod:`ebb.decide.coordinate`, via :func:`borrower_keys`): scale-down takes
borrowed capacity back first — borrowers before non-borrowers, then lowest priority, then newest.

Namespaces without a :class:`Quota` have no elastic share, so none of their pods borrow.
Pure: stdlib only, no I/O. Bad arguments raise :class:`ValueError` quoting the value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

__all__ = ["QUOTA_RESOURCES", "Admission", "PodKey", "QoSClass", "Quota", "QuotaPod", "QuotaPolicy",
           "admit", "borrowed", "borrower_keys"]

#: Resources an elastic quota governs; requests for any other resource are not limited here.
QUOTA_RESOURCES: frozenset[str] = frozenset({"cpu", "memory", "nvidia.com/gpu"})


class QoSClass(StrEnum):
    """Kubernetes ``PodQOSClass``; values are the exact upstream strings.

    Computed from a pod spec by :func:`ebb.gates.qos.compute_pod_qos` (which re-exports it).
    """

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


PodKey = tuple[str, str]
"""(namespace, name): how pods are identified across namespaces."""


def _milli_map(what: str, values: Mapping[str, int], *, governed_only: bool) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for name, value in values.items():
        if governed_only and name not in QUOTA_RESOURCES:
            raise ValueError(f"{what}: unknown resource {name!r}; expected one of "
                             f"{sorted(QUOTA_RESOURCES)}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{what}[{name!r}] must be an integer milli-value, got {value!r}")
        if value < 0:
            raise ValueError(f"{what}[{name!r}] must be >= 0, got {value!r}")
        out[name] = value
    return MappingProxyType(dict(sorted(out.items())))


@dataclass(frozen=True)
class Quota:
    """Elastic quota of one namespace (milli-units per resource)."""

    namespace: str
    """Kubernetes namespace the quota applies to."""
    min: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Guaranteed capacity per resource. Listed only in ``max``: min 0 (all of it is borrowed).
    Listed in neither: the quota does not govern that resource at all."""
    max: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Hard cap per resource, >= ``min``. Listed only in ``min``: no cap above it."""

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not self.namespace:
            raise ValueError(f"quota namespace must be a non-empty string, got {self.namespace!r}")
        lo = _milli_map(f"quota {self.namespace!r} min", self.min, governed_only=True)
        hi = _milli_map(f"quota {self.namespace!r} max", self.max, governed_only=True)
        for name, cap in hi.items():
            if lo.get(name, 0) > cap:
                raise ValueError(f"quota {self.namespace!r}: min[{name!r}]={lo[name]!r} exceeds "
                                 f"max[{name!r}]={cap!r}")
        object.__setattr__(self, "min", lo)
        object.__setattr__(self, "max", hi)

    def governs(self, resource: str) -> bool:
        """Whether ``resource`` is listed in ``min`` or ``max`` (only those are limited)."""
        return resource in self.min or resource in self.max

    def min_of(self, resource: str) -> int:
        """Guaranteed milli-units of ``resource`` (0 when not listed)."""
        return self.min.get(resource, 0)

    def max_of(self, resource: str) -> int | None:
        """Hard cap of ``resource`` in milli-units, or None when uncapped."""
        return self.max.get(resource)


@dataclass(frozen=True)
class QuotaPolicy:
    """Which QoS classes may use the elastic share (capacity between ``min`` and ``max``).

    Defaults are the note's (§4.4). All fields are flags (no unit).
    """

    guaranteed_may_borrow: bool = True
    """Default True: Guaranteed pods may use the elastic share, at high priority — their
    requests equal their limits, so what they borrow is exactly what they will use."""
    burstable_may_borrow: bool = False
    """Default False: Burstable pods run only within ``min`` — they may burst past their
    requests, so letting them borrow would stack two kinds of overcommit."""
    best_effort_may_borrow: bool = False
    """Default False: BestEffort pods never enter the elastic share — they have no requests to
    account for and are the first the kubelet evicts anyway."""

    def may_borrow(self, qos: QoSClass) -> bool:
        """Whether pods of class ``qos`` may use capacity beyond ``min``."""
        if qos is QoSClass.GUARANTEED:
            return self.guaranteed_may_borrow
        if qos is QoSClass.BURSTABLE:
            return self.burstable_may_borrow
        if qos is QoSClass.BEST_EFFORT:
            return self.best_effort_may_borrow
        raise ValueError(f"qos must be a QoSClass, got {qos!r}")


@dataclass(frozen=True)
class QuotaPod:
    """A pod as the quota sees it."""

    name: str
    """Pod name, unique within its namespace."""
    namespace: str
    """Kubernetes namespace (selects the :class:`Quota`)."""
    qos: QoSClass
    """QoS class, from :func:`ebb.gates.qos.compute_pod_qos`."""
    priority: int = 0
    """Pod priority (``spec.priority``); higher is more important. Default 0 (upstream)."""
    created_s: float = 0.0
    """Creation time, seconds on any clock shared by the pods compared; larger = newer."""
    requests: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Requested milli-units per resource; only :data:`QUOTA_RESOURCES` count against quota."""

    def __post_init__(self) -> None:
        for what, v in (("name", self.name), ("namespace", self.namespace)):
            if not isinstance(v, str) or not v:
                raise ValueError(f"pod {what} must be a non-empty string, got {v!r}")
        if not isinstance(self.qos, QoSClass):
            raise ValueError(f"pod {self.name!r}: qos must be a QoSClass, got {self.qos!r}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ValueError(f"pod {self.name!r}: priority must be an int, got {self.priority!r}")
        if self.created_s != self.created_s:  # NaN would make every ordering arbitrary
            raise ValueError(f"pod {self.name!r}: created_s must be a number, got {self.created_s!r}")
        object.__setattr__(self, "requests", _milli_map(f"pod {self.name!r} requests",
                                                        self.requests, governed_only=False))

    @property
    def key(self) -> PodKey:
        """(namespace, name)."""
        return (self.namespace, self.name)


class Admission(NamedTuple):
    """Result of :func:`admit`; unpacks as ``allowed, reason, borrows``."""

    allowed: bool
    reason: str
    """One line: which rule decided, with the numbers that decided it."""
    borrows: bool
    """Allowed into the elastic share (beyond ``min``): capacity a scale-down reclaims first.
    Always False when not allowed."""


def admit(quota: Quota, usage: Mapping[str, int], pod_request: Mapping[str, int], qos: QoSClass,
          policy: QuotaPolicy | None = None) -> Admission:
    """Whether a pod of class ``qos`` requesting ``pod_request`` fits ``quota`` given ``usage``.

    ``usage``: the namespace's current requested milli-units per resource (missing = 0).
    ``policy``: default :class:`QuotaPolicy` (the note's rules). Zero requests and resources
    the quota does not list (:meth:`Quota.governs`) are not limited.
    """
    policy = QuotaPolicy() if policy is None else policy
    used = _milli_map(f"usage of {quota.namespace!r}", usage, governed_only=False)
    req = _milli_map("pod_request", pod_request, governed_only=False)
    may_borrow = policy.may_borrow(qos)  # validates qos before any decision
    asked = sorted(r for r, v in req.items() if v > 0 and quota.governs(r))
    over_max: list[str] = []
    over_min: list[str] = []
    for r in asked:
        after = used.get(r, 0) + req[r]
        cap = quota.max_of(r)
        if cap is not None and after > cap:
            over_max.append(f"{r} {after} > max {cap}")
        if after > quota.min_of(r):
            over_min.append(f"{r} {after} > min {quota.min_of(r)}")
    if over_max:
        return Admission(False, f"denied: exceeds the hard cap of {quota.namespace!r}: "
                                + ", ".join(over_max), False)
    if not over_min:
        return Admission(True, f"allowed: within min of {quota.namespace!r}", False)
    detail = ", ".join(over_min)
    if may_borrow:
        return Admission(True, f"allowed: {qos.value} borrows the elastic share of "
                               f"{quota.namespace!r}: {detail}", True)
    return Admission(False, f"denied: {qos.value} may not use the elastic share of "
                            f"{quota.namespace!r} (only within min): {detail}", False)


def _protection_key(p: QuotaPod) -> tuple[int, float, str]:
    return (-p.priority, p.created_s, p.name)


def _check_unique(pods: Sequence[QuotaPod]) -> None:
    seen: set[PodKey] = set()
    for p in pods:
        if p.key in seen:
            raise ValueError(f"duplicate pod {p.namespace!r}/{p.name!r}")
        seen.add(p.key)


def borrowed(quota: Quota, pods: Iterable[QuotaPod]) -> list[QuotaPod]:
    """Pods of ``quota.namespace`` using borrowed capacity (beyond ``min``), in reclaim order.

    Pods of other namespaces are ignored. ``min`` is held first-fit in protection order
    (highest priority, then oldest, then name); a pod that does not fit is a borrower.
    """
    mine = [p for p in pods if p.namespace == quota.namespace]
    _check_unique(mine)
    held: dict[str, int] = {}
    out: list[QuotaPod] = []
    for p in sorted(mine, key=_protection_key):
        asked = {r: v for r, v in p.requests.items() if v > 0 and quota.governs(r)}
        if all(held.get(r, 0) + v <= quota.min_of(r) for r, v in asked.items()):
            for r, v in asked.items():
                held[r] = held.get(r, 0) + v
        else:
            out.append(p)
    return sorted(out, key=_reclaim_key)


def _reclaim_key(p: QuotaPod) -> tuple[int, float, str, str]:
    return (p.priority, -p.created_s, p.namespace, p.name)


def borrower_keys(pods: Sequence[QuotaPod], quotas: Mapping[str, Quota]) -> set[PodKey]:
    """(namespace, name) of every pod in ``pods`` that borrows, over all namespaces at once.

    ``quotas`` maps namespace → :class:`Quota` (a mismatched key raises); see :func:`borrowed`.
    """
    _check_unique(pods)
    for ns, q in quotas.items():
        if q.namespace != ns:
            raise ValueError(f"quotas[{ns!r}] is the quota of namespace {q.namespace!r}")
    keys: set[PodKey] = set()
    for ns in sorted({p.namespace for p in pods} & quotas.keys()):
        keys.update(p.key for p in borrowed(quotas[ns], pods))
    return keys
