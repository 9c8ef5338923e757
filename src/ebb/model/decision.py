"""What a policy decides in one reconcile: the typed :class:`Decision` every seam carries.

A scaling policy (:class:`ebb.decide.base.Policy`) returns one :class:`Decision` per reconcile, in
the simulator (virtual clock) and the live controller (monotonic clock) alike. The simulator's
engines apply ``to_replicas`` and ``victims``; the live controller clamps it, may veto it on stale
data, records it (:mod:`ebb.decide.records`) and hands ``victims`` to the actuator, which maps the
:class:`~ebb.model.ids.ReplicaId` values to its own names (worker names, pod names) — only the ledger
record carries names.

Guarantees (checked on construction, :class:`ValueError` quoting the values otherwise):

* ``action`` is one of :data:`ebb.model.decisions.ACTIONS` and agrees with the counts:
  ``scale_up`` ⇔ ``to > from``, ``scale_down`` ⇔ ``to < from``, ``hold`` / ``veto`` ⇒ ``to == from``.
* Replica counts are integers ≥ 0; victims are at most ``from − to`` replica ids, none twice, and
  only on a ``scale_down``.
* Frozen: ``signals``, ``weights`` and ``plan`` are read-only mappings (NaN in ``signals`` means
  "not measured"; :mod:`ebb.decide.records` drops non-finite values in one place).

Construction is cheap (a few µs): the simulator builds one per policy tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final, Literal, TypeVar, get_args

from ebb.model.decisions import ACTIONS, Action
from ebb.model.ids import ReplicaId

__all__ = ["Decision", "GATE_STEPS", "GateStep", "GateStepName", "action_between"]

GateStepName = Literal["canary", "watch", "proceed", "compensate"]
"""A gated scale-down's steps (:mod:`ebb.gates.guard`): remove the canary replicas (``canary``) or the
whole step to be checked after the fact (``watch``), proceed (the gates passed), or compensate (undo
the gated step through the rollback channel)."""
GATE_STEPS: Final[tuple[str, ...]] = get_args(GateStepName)

_EMPTY: Final[Mapping[str, float]] = MappingProxyType({})
_V = TypeVar("_V")


def _empty() -> Mapping[str, float]:
    """The shared empty mapping (a hold carries no signals: no dict is built per reconcile)."""
    return _EMPTY


def action_between(from_replicas: int, to_replicas: int) -> Action:
    """``scale_up``, ``scale_down`` or ``hold``: the action that moves ``from`` to ``to``."""
    if to_replicas > from_replicas:
        return "scale_up"
    return "scale_down" if to_replicas < from_replicas else "hold"


@dataclass(frozen=True)
class GateStep:
    """The canary gate's part in a decision (:mod:`ebb.gates.guard`)."""

    step: GateStepName
    query: str
    """The first gate's query (the built-in TTFT gate, or PromQL)."""
    verdict: str = ""
    """The combined gate verdict that ended the step (``pass``, ``fail``, ...); "" for ``canary``."""

    def __post_init__(self) -> None:
        if self.step not in GATE_STEPS:
            raise ValueError(f"GateStep.step must be one of {GATE_STEPS}, got {self.step!r}")


def _frozen(value: Mapping[str, _V]) -> Mapping[str, _V]:
    if not value:
        return _EMPTY  # type: ignore[return-value]  # empty: no value of any type
    return value if isinstance(value, MappingProxyType) else MappingProxyType(dict(value))


@dataclass(frozen=True)
class Decision:
    """One policy's answer at one reconcile. See the module docstring for the invariants."""

    t_s: float
    """Policy time of the reconcile (s): virtual seconds in the simulator, monotonic in the live loop."""
    action: Action
    from_replicas: int
    """The target the policy saw (``Observation.spec_replicas``)."""
    to_replicas: int
    """The target it wants."""
    policy: str = ""
    """The policy spec that decided (``ebb:profile=cautious``, ``hpa:target=0.5``)."""
    victims: tuple[ReplicaId, ...] = ()
    """Replicas to remove first (scale-down only); the engine or actuator picks any others."""
    reasons: tuple[str, ...] = ()
    vetoes: tuple[str, ...] = ()
    """What blocked or shrank a scale-down (L2 vetoes, L3 limits, the controller's data lock)."""
    signals: Mapping[str, float] = field(default_factory=_empty, hash=False)
    """Inputs the policy saw, units in the names (``ttft_p99_ms``, ``demand_mean_replicas``); NaN = none."""
    weights: Mapping[str, float] = field(default_factory=_empty, hash=False)
    plan: Mapping[str, str | float] = field(default_factory=_empty, hash=False)
    """The execution plan's scalars (``profile``, ``target_util``)."""
    gate: GateStep | None = None
    """The canary gate step this decision is, if any."""

    def __post_init__(self) -> None:
        frm, to = self.from_replicas, self.to_replicas
        if type(frm) is not int or type(to) is not int or frm < 0 or to < 0:  # noqa: E721 - bool/np ints refused
            raise ValueError(f"Decision replica counts must be ints >= 0, got from={frm!r} to={to!r}")
        a = self.action
        if a not in ACTIONS:
            raise ValueError(f"Decision.action must be one of {ACTIONS}, got {a!r}")
        want = action_between(frm, to)
        if (a in ("hold", "veto") and want != "hold") or (a in ("scale_up", "scale_down") and a != want):
            raise ValueError(f"Decision action {a!r} contradicts {frm} -> {to} replicas")
        if self.victims:
            if a != "scale_down" or len(self.victims) > frm - to or len(set(self.victims)) != len(self.victims):
                raise ValueError(f"Decision victims {self.victims!r} need a scale_down removing at least that many "
                                 f"distinct replicas ({a} {frm} -> {to})")
        s = object.__setattr__
        s(self, "signals", _frozen(self.signals))
        s(self, "weights", _frozen(self.weights))
        s(self, "plan", _frozen(self.plan))

    @classmethod
    def change(cls, t_s: float, from_replicas: int, to_replicas: int, *, policy: str = "",
               reasons: tuple[str, ...] = (), victims: tuple[ReplicaId, ...] = ()) -> Decision:
        """The decision that moves ``from`` to ``to`` (``hold`` when equal): what a policy without its
        own explanation (HPA, KEDA, static, oracle) answers."""
        to = max(0, to_replicas)  # clamped before the action is chosen: 0 -> -1 is a hold
        return cls(t_s, action_between(from_replicas, to), from_replicas, to,
                   policy=policy, reasons=reasons, victims=victims)

    @property
    def changes(self) -> bool:
        """True when it moves the target (``scale_up`` or ``scale_down``)."""
        return self.action in ("scale_up", "scale_down")

    @property
    def noteworthy(self) -> bool:
        """True when it belongs in the ledger: a change, a veto, or a canary gate step. Holds are not
        recorded (a policy answers one every reconcile; a repeated veto is returned as a hold)."""
        return self.action != "hold" or self.gate is not None

    def retarget(self, to_replicas: int, *, reason: str = "", veto: str = "") -> Decision:
        """The same decision moved to ``to_replicas`` (the action follows the counts; a ``veto`` keeps
        ``from``), with ``reason`` appended to the reasons and ``veto`` to the vetoes. Victims are kept
        only as far as the new count still removes them."""
        action: Action = "veto" if veto else action_between(self.from_replicas, to_replicas)
        to = self.from_replicas if veto else to_replicas
        victims = self.victims[:max(0, self.from_replicas - to)] if action == "scale_down" else ()
        return replace(self, action=action, to_replicas=to, victims=victims,
                       reasons=(*self.reasons, reason) if reason else self.reasons,
                       vetoes=(*self.vetoes, veto) if veto else self.vetoes)
