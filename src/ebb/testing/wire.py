"""A reference encoder of the agent's ``/v1/buckets`` page, for the round-trip and fuzz tests.

:func:`encode_page` writes a :class:`~ebb.sources.agent_wire.BucketPage` as the JSON-ready dict that
:mod:`ebb.sources.agent_wire`'s docstring specifies, field by field and independently of the agent's own
encoder (:func:`~ebb.sources.agent_wire.encode_bucket_json` + :func:`~ebb.sources.agent_wire.page_json`, which
serve each bucket pre-encoded). Guarantees the tests check: ``decode_page(json.loads(json.dumps(
encode_page(p))), url) == p`` for every valid page, and the agent's bytes parse to the same dict.
"""

from __future__ import annotations

from typing import Any

from ebb.sources.agent_wire import Bucket, BucketPage, Sketch
from ebb.model.live import BUCKETS_VERSION

__all__ = ["encode_page"]


def _sketch(s: Sketch) -> dict[str, Any]:
    return {"alpha": s.alpha, "zero": s.zero, "bins": {str(k): c for k, c in s.bins}}


def _bucket(b: Bucket) -> dict[str, Any]:
    return {
        "ts_ns": b.ts_ns,
        "workers": {n: {"running": w.running, "waiting": w.waiting, "max_batch": w.max_batch,
                        "ready": w.ready, "slot_ratio": w.slot_ratio,
                        "prefill_busy_ratio": w.prefill_busy_ratio} for n, w in b.workers.items()},
        "routers": {n: {"queued": r.queued, "inflight": r.inflight} for n, r in b.routers.items()},
        "latency_from": b.latency_from, "latency_names": list(b.latency_names),
        "ttft_ms": _sketch(b.ttft_ms), "e2e_ms": _sketch(b.e2e_ms),
        "missing": list(b.missing), "gpu": dict(b.gpu), "host": dict(b.host),
    }


def encode_page(page: BucketPage) -> dict[str, Any]:
    """The JSON-ready dict of a page (``json.dumps`` it)."""
    return {"version": BUCKETS_VERSION, "agent": page.agent, "bucket_ms": page.bucket_ms,
            "newest_ns": page.newest_ns, "buckets": [_bucket(b) for b in page.buckets]}
