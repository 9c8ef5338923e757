"""The verdict of a comparison, stated before any table: what to deploy and how Ebb did against the peers.

Roles, from a scorecard's ``policy`` text (its family is the part before ``:``):

* **oracle** — sees the future, so it is a lower bound and never *deployable*;
* **Ebb** — family ``ebb``;
* **peer** — every other family (hpa, keda, static, kpa, ray-serve, ...): what a team could run instead.

Guarantees (pure function of the scorecards, property-tested):

* :attr:`Verdict.pick` meets the SLO (≤ :data:`SLO_VIOLATION_LIMIT_PCT` % violations, finite GPU-hours)
  whenever any deployable policy does, is the cheapest such policy, and is never the oracle;
* the "best" of a group (one Ebb profile's variants, the peers) is its cheapest SLO-meeting member,
  else its member with the fewest violations (then fewer GPU-hours);
* ties go to the simpler policy: GPU-hours within :data:`TIE_REL` of each other are equal, and
  among equals ``static`` comes first, then the policy that scaled least (fewest scale-ups +
  scale-downs), then the first listed — so a peer that never scaled never beats the static fleet
  it equals;
* Ebb's comparison with the best peer is made for the **default profile** (``ebb`` or
  ``ebb:profile=balanced``, :class:`ebb.decide.profiles.EbbProfile`) and then for each other
  profile that ran, one line each (:attr:`Verdict.ebbs`), never for whichever profile came out
  cheapest;
* :attr:`Verdict.saved_pct` is ``100 · (peer − Ebb) / peer`` GPU-hours: positive when Ebb is cheaper.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ebb.decide.profiles import EbbProfile
from ebb.score.results import Scorecard

__all__ = ["SLO_VIOLATION_LIMIT_PCT", "TIE_REL", "Verdict", "ebb_profile", "meets_slo", "role", "verdict"]

SLO_VIOLATION_LIMIT_PCT = 0.1
"""A policy meets the SLO when at most this percentage of requests violated it."""
TIE_REL = 1e-6
"""GPU-hours within this fraction of each other are a tie (a millionth of the bill buys no autoscaler)."""
_DEFAULT_PROFILE = EbbProfile().name


def meets_slo(card: Scorecard) -> bool:
    """True when the run's violation percentage is known and at most the limit."""
    return math.isfinite(card.slo_violation_pct) and card.slo_violation_pct <= SLO_VIOLATION_LIMIT_PCT


def role(policy: str) -> str:
    """``oracle``, ``ebb`` or ``peer`` for a policy spec (``ebb:profile=lean`` → ``ebb``)."""
    fam = policy.split(":")[0].strip().lower()
    return fam if fam in ("oracle", "ebb") else "peer"


def ebb_profile(policy: str) -> str:
    """The profile an Ebb spec runs (``ebb:profile=lean,canary=on`` → ``lean``; ``ebb`` → the default)."""
    _, _, params = policy.partition(":")
    for token in params.split(","):
        key, _, value = token.partition("=")
        if key.strip() == "profile" and value.strip():
            return value.strip()
    return _DEFAULT_PROFILE


def _ok(card: Scorecard) -> bool:
    return meets_slo(card) and math.isfinite(card.gpu_hours)


def _simplicity(card: Scorecard) -> tuple[int, int]:
    """Smaller is simpler: the static fleet first, then the fewest scale-ups + scale-downs."""
    return (0 if card.policy.split(":")[0].strip().lower() == "static" else 1, card.scale_ups + card.scale_downs)


def _tied(cards: Sequence[Scorecard]) -> list[Scorecard]:
    """The cards within :data:`TIE_REL` of the lowest GPU-hours (``cards``: finite GPU-hours)."""
    low = min(c.gpu_hours for c in cards)
    return [c for c in cards if c.gpu_hours <= low + TIE_REL * abs(low)]


def _cheapest(cards: Sequence[Scorecard]) -> Scorecard:
    """The cheapest of ``cards`` (finite GPU-hours), ties within :data:`TIE_REL` to the simplest."""
    return min(_tied(cards), key=_simplicity)  # min keeps the first listed among equal keys


def _best(cards: Sequence[Scorecard]) -> Scorecard | None:
    """Cheapest SLO-meeting card, else the one with the fewest violations (NaN ranks last)."""
    ok = [c for c in cards if _ok(c)]
    if ok:
        return _cheapest(ok)
    if not cards:
        return None

    def worst_last(c: Scorecard) -> tuple[float, float, tuple[int, int]]:
        v = c.slo_violation_pct if math.isfinite(c.slo_violation_pct) else math.inf
        g = c.gpu_hours if math.isfinite(c.gpu_hours) else math.inf
        return v, g, _simplicity(c)
    return min(cards, key=worst_last)


@dataclass(frozen=True)
class Verdict:
    """What the comparison says, in the order a reader needs it. ``None`` where a group did not run."""

    pick: Scorecard | None
    """Cheapest deployable policy meeting the SLO; None when no deployable policy meets it."""
    closest: Scorecard | None
    """Without a pick: the deployable policy with the fewest violations (else None)."""
    ebb: Scorecard | None
    """Ebb's default profile (its best variant); without it, the first profile listed."""
    peer: Scorecard | None
    """The best peer."""
    limit_pct: float = SLO_VIOLATION_LIMIT_PCT
    ebbs: tuple[Scorecard, ...] = ()
    """The best variant of each Ebb profile that ran: the default profile first, then the others in
    the order listed; each gets its own comparison line."""
    tied: tuple[Scorecard, ...] = ()
    """Deployable SLO-meeting policies as cheap as the pick (within :data:`TIE_REL`), the pick left out."""

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
                    f"{self.pick.gpu_hours:,.2f} GPU-h at {self.pick.slo_violation_pct:.3f} % violations"
                    + (f" (as cheap: {', '.join(c.policy for c in self.tied)}; the simpler one is named)."
                       if self.tied else "."))]
        elif self.closest is not None:
            out = [(f"No deployable policy meets the SLO ({lim}); the closest is {self.closest.policy} "
                    f"at {self.closest.slo_violation_pct:.3f} % violations, {self.closest.gpu_hours:,.2f} GPU-h.")]
        else:
            out = ["No deployable policy ran (only the oracle, which sees the future)."]
        if self.ebb is not None and self.peer is not None:
            out += [_against(e, self.peer) for e in (self.ebbs or (self.ebb,))]
        elif self.ebb is None and self.peer is not None:
            out.append(f"Ebb did not run; the best peer is {self.peer.policy} ({self.peer.gpu_hours:,.2f} GPU-h, "
                       f"{self.peer.slo_violation_pct:.3f} % violations).")
        elif self.ebb is not None:
            out.append(f"No peer ran to compare Ebb ({self.ebb.policy}) with.")
        return out


def _against(e: Scorecard, p: Scorecard) -> str:
    """One Ebb variant against the best peer, as a sentence."""
    saved = p.gpu_hours - e.gpu_hours
    pct = 100.0 * saved / p.gpu_hours if p.gpu_hours > 0 else math.nan
    if math.isfinite(pct):
        word = "fewer" if saved >= 0 else "more"
        diff = (f"{abs(pct):.1f} % {word} GPU-h than the best peer "
                f"({abs(saved):,.2f} GPU-h {'saved' if word == 'fewer' else 'extra'})")
    else:
        diff = "no GPU-h comparison (the best peer used none)"
    return (f"Ebb ({e.policy}) uses {e.gpu_hours:,.2f} GPU-h vs {p.gpu_hours:,.2f} for the best peer "
            f"({p.policy}): {diff}; violations {e.slo_violation_pct:.3f} % vs "
            f"{p.slo_violation_pct:.3f} %{_slo_note(e, p)}.")


def _slo_note(ebb: Scorecard, peer: Scorecard) -> str:
    if _ok(ebb) == _ok(peer):
        return "" if _ok(ebb) else " (neither meets the SLO)"
    return " (only Ebb meets the SLO)" if _ok(ebb) else " (only the peer meets the SLO)"


def verdict(cards: Sequence[Scorecard]) -> Verdict:
    """The verdict over one comparison's scorecards (any order; the oracle is never picked)."""
    deployable = [c for c in cards if role(c.policy) != "oracle"]
    ok = [c for c in deployable if _ok(c)]
    pick = _cheapest(ok) if ok else None
    profiles: dict[str, list[Scorecard]] = {}
    for c in cards:
        if role(c.policy) == "ebb":
            profiles.setdefault(ebb_profile(c.policy), []).append(c)
    order = sorted(profiles, key=lambda name: name != _DEFAULT_PROFILE)  # stable: the others as listed
    ebbs = tuple(b for b in (_best(profiles[name]) for name in order) if b is not None)
    return Verdict(pick=pick, closest=None if pick is not None else _best(deployable),
                   ebb=ebbs[0] if ebbs else None,
                   peer=_best([c for c in cards if role(c.policy) == "peer"]), ebbs=ebbs,
                   tied=tuple(c for c in _tied(ok) if c is not pick) if ok else ())
