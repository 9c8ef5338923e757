"""A Service's clients for the Kubernetes tier tests: requests round-robin over the ready endpoints the
fake API server lists, as kube-proxy follows EndpointSlices."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from ebb.testing.fake_kube import FakeKubeApiServer


@dataclass
class Router:
    """Sends completions round-robin to one Service's ready endpoints; counts answers by status."""

    fake: FakeKubeApiServer
    port: int
    namespace: str = "default"
    service: str = "vllm"
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def endpoints(self) -> list[str]:
        """The Service's ready endpoints, listed from the API server as kube-proxy follows them."""
        url = (f"{self.fake.url}/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices"
               f"?labelSelector=kubernetes.io/service-name%3D{self.service}")
        with urllib.request.urlopen(url, timeout=5) as resp:
            slices = json.loads(resp.read())["items"]
        return sorted(ep["addresses"][0] for s in slices for ep in s["endpoints"] if ep["conditions"]["ready"])

    def run(self) -> None:
        k = 0
        while not self.stop.is_set():
            eps = self.endpoints()
            if not eps:
                time.sleep(0.02)
                continue
            ip = eps[k % len(eps)]
            k += 1
            req = urllib.request.Request(f"http://{ip}:{self.port}/v1/completions", data=b'{"prompt":"x"}',
                                         method="POST")
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    resp.read()
                self.ok += 1
            except (urllib.error.URLError, OSError) as exc:
                if isinstance(exc, urllib.error.HTTPError):
                    exc.close()
                self.failed.append(f"{ip}: {exc}")
            time.sleep(0.02)


def free_port(ips: list[str]) -> int:
    """A port free on every address in ``ips`` (bound on the first, then tried on the rest)."""
    for _ in range(20):
        s = socket.socket()
        s.bind((ips[0], 0))
        port = int(s.getsockname()[1])
        s.close()
        try:
            for ip in ips:
                t = socket.socket()
                t.bind((ip, port))
                t.close()
            return port
        except OSError:
            continue
    raise RuntimeError("no port free on every loopback address")


def wait_until(ok: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``ok`` every 20 ms until it is truthy; AssertionError naming ``what`` after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if ok():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
