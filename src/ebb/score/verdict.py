"""The verdict of a comparison, stated before any table: what to deploy and how Ebb did against the peers.

Roles, from a scorecard's ``policy`` text (its family is the part before ``:``):

* **oracle** — sees the future, so it is a lower bound and never *deployable*;
* **Ebb** — family ``ebb``;
* **peer** — every other family (hpa, keda, static, kpa, ray-serve, ...): what a team could run instead.

Guarantees (pure function of the scorecards, property-tested):

* :attr:`Verdict.pick` meets the SLO (≤ :data:`SLO_VIOLATION_LIMIT_PCT` % violations, finite GPU-hours)
  whenever any deployable policy does, is the cheapest such policy, and is never the oracle;
* the "best" of a group (Ebb's variants, the peers) is its cheapest SLO-meeting member, else its
  member with the fewest violations (ties: fewer GPU-hours, then first listed);
* :attr:`Verdict.saved_pct` is ``100 · (peer − Ebb) / peer`` GPU-hours: positive when Ebb is cheaper.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ebb.score.results import Scorecard

__all__ = ["SLO_VIOLATION_LIMIT_PCT", "Verdict", "meets_slo", "role", "verdict"]

SLO_VIOLATION_LIMIT_PCT = 0.1
"""A policy meets the SLO when at most this percentage of requests violated it."""


def meets_slo(card: Scorecard) -> bool:
    """True when the run's violation percentage is known and at most the limit."""
    return math.isfinite(card.slo_violation_pct) and card.slo_violation_pct <= SLO_VIOLATION_LIMIT_PCT


def role(policy: str) -> str:
    """``oracle``, ``ebb`` or ``peer`` for a policy spec (``ebb:profile=lean`` → ``ebb``)."""
    fam = policy.split(":")[0].strip().lower()
    return fam if fam in ("oracle", "ebb") else "peer"


def _ok(card: Scorecard) -> bool:
    return meets_slo(card) and math.isfinite(card.gpu_hours)


def _best(cards: Sequence[Scorecard]) -> Scorecard | None:
    """Cheapest SLO-meeting card, else the one with the fewest violations (NaN ranks last)."""
    ok = [c for c in cards if _ok(c)]
    if ok:
        return min(ok, key=lambda c: c.gpu_hours)
    if not cards:
        return None

    def worst_last(c: Scorecard) -> tuple[float, float]:
        v = c.slo_violation_pct if math.isfinite(c.slo_violation_pct) else math.inf
        g = c.gpu_hours if math.isfinite(c.gpu_hours) else math.inf
        return v, g
    return min(cards, key=worst_last)


@dataclass(frozen=True)
class Verdict:
    """What the comparison says, in the order a reader needs it. ``None`` where a group did not run."""

    pick: Scorecard | None
    """Cheapest deployable policy meeting the SLO; None when no deployable policy meets it."""
    closest: Scorecard | None
    """Without a pick: the deployable policy with the fewest violations (else None)."""
    ebb: Scorecard | None
    """Ebb's best variant."""
    peer: Scorecard | None
    """The best peer."""
    limit_pct: float = SLO_VIOLATION_LIMIT_PCT

    @property
    def saved_gpu_hours(self) -> float:
        """Peer GPU-hours minus Ebb's (positive: Ebb is cheaper); NaN without both."""
        if self.ebb is None or self.peer is None:
            return math.nan
        return self.peer.gpu_hours - self.ebb.gpu_hours

    @property
    def saved_pct(self) -> float:
        """``100 · saved / peer`` GPU-hours; NaN without both or with a zero-cost peer."""
        if self.peer is None or not self.peer.gpu_hours > 0:
            return math.nan
        return 100.0 * self.saved_gpu_hours / self.peer.gpu_hours

    def lines(self) -> list[str]:
        """The verdict as plain sentences: the pick first, then Ebb against the best peer."""
        lim = f"≤ {self.limit_pct:g} % violations"
        if self.pick is not None:
            out = [(f"Deploy {self.pick.policy}: the cheapest deployable policy meeting the SLO ({lim}), "
                    f"{self.pick.gpu_hours:,.2f} GPU-h at {self.pick.slo_violation_pct:.3f} % violations.")]
        elif self.closest is not None:
            out = [(f"No deployable policy meets the SLO ({lim}); the closest is {self.closest.policy} "
                    f"at {self.closest.slo_violation_pct:.3f} % violations, {self.closest.gpu_hours:,.2f} GPU-h.")]
        else:
            out = ["No deployable policy ran (only the oracle, which sees the future)."]
        if self.ebb is not None and self.peer is not None:
            e, p = self.ebb, self.peer
            if math.isfinite(self.saved_pct):
                word = "fewer" if self.saved_gpu_hours >= 0 else "more"
                diff = (f"{abs(self.saved_pct):.1f} % {word} GPU-h than the best peer "
                        f"({abs(self.saved_gpu_hours):,.2f} GPU-h {'saved' if word == 'fewer' else 'extra'})")
            else:
                diff = "no GPU-h comparison (the best peer used none)"
            out.append(f"Ebb ({e.policy}) uses {e.gpu_hours:,.2f} GPU-h vs {p.gpu_hours:,.2f} for the best peer "
                       f"({p.policy}): {diff}; violations {e.slo_violation_pct:.3f} % vs "
                       f"{p.slo_violation_pct:.3f} %{_slo_note(e, p)}.")
        elif self.ebb is None and self.peer is not None:
            out.append(f"Ebb did not run; the best peer is {self.peer.policy} ({self.peer.gpu_hours:,.2f} GPU-h, "
                       f"{self.peer.slo_violation_pct:.3f} % violations).")
        elif self.ebb is not None:
            out.append(f"No peer ran to compare Ebb ({self.ebb.policy}) with.")
        return out


def _slo_note(ebb: Scorecard, peer: Scorecard) -> str:
    if _ok(ebb) == _ok(peer):
        return "" if _ok(ebb) else " (neither meets the SLO)"
    return " (only Ebb meets the SLO)" if _ok(ebb) else " (only the peer meets the SLO)"


def verdict(cards: Sequence[Scorecard]) -> Verdict:
    """The verdict over one comparison's scorecards (any order; the oracle is never picked)."""
    deployable = [c for c in cards if role(c.policy) != "oracle"]
    ok = [c for c in deployable if _ok(c)]
    pick = min(ok, key=lambda c: c.gpu_hours) if ok else None
    return Verdict(pick=pick, closest=None if pick is not None else _best(deployable),
                   ebb=_best([c for c in cards if role(c.policy) == "ebb"]),
                   peer=_best([c for c in cards if role(c.policy) == "peer"]))
