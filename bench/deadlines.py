"""Live reads end at their deadlines: the timing half of the hostile-peer and etcd TLS tests.

The unit tests check that a deadline or a cap fired — the error names it, the peer's trickle was left
unsent, the read stopped asking — and never how long it took. This benchmark runs the same exchanges
against the same misbehaving loopback peers (:mod:`ebb.testing.hostile_http`) and times them against
the bounds those tests used to assert (issue #30 moved them here):

* ``http-*`` (tests/unit/sources/test_http_get.py): a body or headers trickled one byte per 0.1 s
  for 3 s end at the 0.5 s total deadline: under 1.5 s.
* ``prom-*`` (tests/unit/sources/test_prometheus_hardening.py): a 150 MB announced answer and a
  4 MiB streamed one are refused at the 1 MiB cap, both together under 2 s; a trickled answer ends
  at the client's 0.5 s deadline: under 1 s; a read whose every query takes 0.3 s ends at its 1 s
  read timeout: under 1.5 s.
* ``etcd-tls-*`` (tests/unit/ledger/test_etcd_tls_auth.py): a wrong CA, no CA, no client
  certificate or a key that does not match is one permanent error after one attempt, against a real
  mutual-TLS etcd with a 5 s timeout: under 3 s (no retry, no timeout waited out). Skipped without
  the etcd and openssl binaries.

Each case checks its outcome first (the same error as its unit test), then reports the median of
``--repeats`` runs, the bound and the ratio; exit 1 when a bound is broken or an outcome is wrong.

    python bench/deadlines.py [--repeats 5] [--only prom] [--json]
"""

from __future__ import annotations

import json
import socket
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from limits import Case, refused, run

from ebb.errors import ConfigError, InputError, SourceUnavailable
from ebb.sources.http_get import HttpLimits, get
from ebb.sources.prometheus import PrometheusClient, PrometheusSource
from ebb.testing.hostile_http import Handler, HostilePeer, answer, stream

EMPTY = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


def _peer(stack: ExitStack, handler: Handler) -> HostilePeer:
    p = HostilePeer(handler)
    stack.callback(p.close)
    return p


def http_cases(stack: ExitStack) -> list[Case]:
    body = _peer(stack, stream(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b" ", times=30, pause_s=0.1))
    heads = _peer(stack, stream(b"HTTP/1.1 200 OK\r\n", b"X-A: b\r\n", times=30, pause_s=0.1))
    return [Case(f"http-trickled-{what}", 1.5,
                 lambda p=p: refused(lambda: get(p.url, HttpLimits(deadline_s=0.5)), SourceUnavailable, "within 0.5 s"))
            for what, p in (("body", body), ("headers", heads))]


def prometheus_cases(stack: ExitStack) -> list[Case]:
    announced = _peer(stack, answer(b"", length=150 * 1024 * 1024))
    streamed = _peer(stack, stream(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
                                   b"0," * 32 * 1024, times=64))
    trickle = _peer(stack, stream(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000"
                                  b"\r\n\r\n", b" ", times=40, pause_s=0.1))

    def slow(conn: socket.socket, req: bytes) -> None:
        time.sleep(0.3)
        answer(EMPTY)(conn, req)
    slow_peer = _peer(stack, slow)

    def huge() -> None:
        refused(lambda: PrometheusClient(announced.url).instant("up"), InputError, "over the")
        refused(lambda: PrometheusClient(streamed.url, max_bytes=1024 * 1024).instant("up"), InputError,
                 "more than 1,048,576 bytes")
    return [
        Case("prom-huge-answers-refused", 2.0, huge),
        Case("prom-trickled-answer", 1.0, lambda: refused(
            lambda: PrometheusClient(trickle.url, timeout_s=0.5).range("up", 0, 10, 1), SourceUnavailable,
            "within 0.5 s")),
        Case("prom-slow-queries-read-timeout", 1.5, lambda: refused(
            lambda: PrometheusSource(PrometheusClient(slow_peer.url), read_timeout_s=1.0).read(time.time() - 30),
            SourceUnavailable, "read_timeout_s")),
    ]


def etcd_cases(tmp: Path, stack: ExitStack) -> list[Case]:
    flags = [("wrong-ca", {"ca_file": "other"}, "TLS verification of the server failed"),
             ("no-ca", {"ca_file": None}, "TLS verification of the server failed"),
             ("no-client-cert", {"cert_file": None, "key_file": None}, "ended the TLS handshake"),
             ("mismatched-key", {"key_file": "server_key"}, "do not match")]
    try:
        import etcd3gw  # noqa: F401  (the etcd ledger's client: pip install 'ebb[etcd]')

        from ebb.ledger import EtcdAuth, EtcdLedger
        from ebb.testing.etcd import etcd_binary, local_etcd, make_tls_files, openssl_binary
    except ImportError as exc:
        return [Case(f"etcd-tls-{name}", 3.0, lambda: None, absent=f"no etcd client ({exc.name})") for name, *_ in flags]
    binary, openssl = etcd_binary(), openssl_binary()
    if binary is None or openssl is None:
        why = "etcd binary not found" if binary is None else "openssl not found"
        return [Case(f"etcd-tls-{name}", 3.0, lambda: None, absent=why) for name, *_ in flags]
    tls = make_tls_files(tmp / "tls", openssl)
    url = stack.enter_context(local_etcd(binary, tmp / "etcd", log_path=tmp / "etcd.log", tls=tls,
                                         client_cert_auth=True))
    named = {"other": str(tls.other_ca), "server_key": str(tls.server_key)}

    def attempt(changes: dict[str, str | None], why: str) -> None:
        files: dict[str, str | None] = {"ca_file": str(tls.ca), "cert_file": str(tls.client_cert),
                                        "key_file": str(tls.client_key)}
        files.update({k: named.get(v, v) if v else None for k, v in changes.items()})
        led = EtcdLedger(url, prefix="bench/x", auth=EtcdAuth(**files), timeout_s=5.0)
        try:
            refused(led.cycles, ConfigError, why)
        finally:
            led.close()
    return [Case(f"etcd-tls-{name}", 3.0, lambda c=changes, w=why: attempt(c, w)) for name, changes, why in flags]


def all_cases(tmp: Path, stack: ExitStack) -> list[Case]:
    """Every case; the peers and the etcd server live on ``stack`` until the run ends."""
    return [*http_cases(stack), *prometheus_cases(stack), *etcd_cases(tmp, stack)]


if __name__ == "__main__":
    sys.exit(run(all_cases, __doc__ or ""))
