"""The agent's ``/v1/buckets`` page as a JSON-ready dict, for the round-trip and fuzz tests.

:func:`encode_page` runs the agent's own encoder (:func:`~ebb.sources.agent_wire.encode_bucket_json`
per bucket, joined by :func:`~ebb.sources.agent_wire.page_json`, exactly the bytes ``ebb agent``
serves) and parses the result, so a test can mutate the dict before re-serialising it. Guarantee the
tests check: ``decode_page(json.loads(json.dumps(encode_page(p))), url) == p`` for every valid page.
"""

from __future__ import annotations

import json
from typing import Any, cast

from ebb.sources.agent_wire import BucketPage, encode_bucket_json, page_json

__all__ = ["encode_page"]


def encode_page(page: BucketPage) -> dict[str, Any]:
    """The JSON-ready dict of a page (``json.dumps`` it)."""
    raw = page_json(page.agent, page.bucket_ms, page.newest_ns, [encode_bucket_json(b) for b in page.buckets],
                    page.now_ns)
    return cast(dict[str, Any], json.loads(raw))
