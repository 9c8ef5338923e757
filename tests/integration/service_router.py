"""A Service's clients for the Kubernetes tier tests: requests round-robin over the ready endpoints the
fake API server lists, as kube-proxy follows EndpointSlices."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
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
