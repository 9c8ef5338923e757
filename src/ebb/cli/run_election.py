"""``ebb run --elect``: which election, checked before anything starts, and the elector it starts.

* **Which.** ``--election auto`` is ``etcd`` with an etcd ledger (its fencing token is the election
  key's create revision, compared in the ledger's own transaction) and ``kubernetes`` otherwise (a
  ``coordination.k8s.io`` Lease, :class:`~ebb.ledger.kube_lease.KubeLeaseElector`; a SQLite ledger
  refuses writes under a fence whose Lease ran out or that a newer token superseded).
* **Refused** with one line naming the fix: ``etcd`` without an etcd ledger; ``kubernetes`` with an
  etcd ledger (that ledger compares tokens with its own etcd election key, which a Lease fence does
  not have: every write would be refused) or with ``memory:`` (nothing the replicas share);
  ``--lease-*`` flags with the etcd election; a Lease namespace or Kubernetes credentials that
  cannot be used (the kubeconfig is read now, not once a worker is up).
* **The Lease**: ``--lease-namespace``, else ``$POD_NAMESPACE`` (the downward API), else
  ``ebb-system``; named from the run target (:func:`~ebb.ledger.kube_lease_store.lease_name`), so every
  replica of one controller campaigns for the same Lease; the actuator's ``--kubeconfig`` /
  ``--in-cluster`` credentials. A SQLite ledger is then opened without the one-controller lock: the
  replicas share the file, and the fence keeps one writer.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any, Final

from ebb.config.run_settings import DNS_LABEL, LEASE_DEFAULTS, RunSettings
from ebb.errors import ConfigError

__all__ = ["DEFAULT_LEASE_NAMESPACE", "ElectionPlan", "plan_election", "start_elector"]

log = logging.getLogger(__name__)

DEFAULT_LEASE_NAMESPACE: Final = "ebb-system"
"""The Lease's namespace without --lease-namespace or $POD_NAMESPACE: the manifests' controller namespace."""


@dataclass(frozen=True)
class ElectionPlan:
    """A checked ``--elect``: ``kind`` etcd or kubernetes, ``key`` the run target it elects for, and
    for a Lease its ``lease_namespace`` and ``lease_name``."""

    kind: str
    key: str
    lease_namespace: str = ""
    lease_name: str = ""

    @property
    def shares_sqlite(self) -> bool:
        """Whether the replicas share a SQLite ledger (opened without the one-controller lock)."""
        return self.kind == "kubernetes"


def plan_election(s: RunSettings, loc: Any, *, key: str) -> ElectionPlan | None:
    """The election ``s`` asks for (None without --elect), refused as the module docstring says."""
    led = s.ledger
    if not led.elect:
        return None
    kind = led.election if led.election != "auto" else ("etcd" if loc.kind == "etcd" else "kubernetes")
    if kind == "etcd":
        if loc.kind != "etcd":
            raise ConfigError("--election etcd needs an etcd ledger (--ledger etcd://HOST:PORT/PREFIX): the fencing "
                              "token is checked by the ledger's own transactions (fix: an etcd ledger, or "
                              "--election kubernetes for a Lease with a SQLite ledger)")
        if led.lease_namespace is not None or \
                (led.lease_duration_s, led.lease_renew_deadline_s, led.lease_retry_s) != LEASE_DEFAULTS:
            raise ConfigError("--lease-namespace and --lease-*-s set the Kubernetes Lease election, and this one runs "
                              "on etcd (fix: drop them, or --election kubernetes with a SQLite ledger)")
        return ElectionPlan("etcd", key)
    if loc.kind == "etcd":
        raise ConfigError("--election kubernetes does not go with an etcd ledger: it checks every write's fencing "
                          "token against its own etcd election key (fix: --election etcd, or leave --election out)")
    if loc.kind == "memory":
        raise ConfigError("--elect needs a ledger the replicas share, and memory: is this process's own (fix: "
                          "--ledger PATH, one SQLite file on the replicas' node, or an etcd ledger)")
    from ebb.ledger.kube_lease_store import lease_name, load_kube_client
    namespace = led.lease_namespace or os.environ.get("POD_NAMESPACE") or DEFAULT_LEASE_NAMESPACE
    if not DNS_LABEL.fullmatch(namespace):
        raise ConfigError(f"$POD_NAMESPACE {namespace!r} is not a namespace name (fix: --lease-namespace NAME)")
    load_kube_client(s.actuator.kubeconfig, s.actuator.in_cluster).close()  # ConfigError now, not mid-start
    return ElectionPlan("kubernetes", key, namespace, lease_name(key))


def start_elector(plan: ElectionPlan | None, s: RunSettings, *, loc: Any, ledger_auth: Any,
                  closers: list[Any]) -> Any:
    """Start campaigning as ``plan`` says (None: no election, returns None); the elector's and its
    client's close join ``closers``."""
    if plan is None:
        return None
    led = s.ledger
    candidate = led.candidate_id or f"{socket.gethostname()}-{os.getpid()}"
    if plan.kind == "etcd":
        from ebb.ledger.election import LeaderElector
        elector: Any = LeaderElector(loc.target, f"{loc.prefix or 'ebb'}/leader/{plan.key}", candidate,
                                     auth=ledger_auth)
    else:
        from ebb.ledger.kube_lease import KubeLeaseElector
        elector = KubeLeaseElector(plan.lease_namespace, plan.lease_name, candidate,
                                   lease_duration_s=led.lease_duration_s, renew_deadline_s=led.lease_renew_deadline_s,
                                   retry_period_s=led.lease_retry_s, kubeconfig=s.actuator.kubeconfig,
                                   in_cluster=s.actuator.in_cluster)
        log.info("%s campaigns for Lease %s/%s", candidate, plan.lease_namespace, plan.lease_name)
    elector.start()
    closers.append(elector.close)
    return elector
