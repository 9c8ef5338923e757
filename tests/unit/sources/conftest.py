"""``peer``: start hostile HTTP peers on loopback (:class:`ebb.testing.hostile_http.HostilePeer`), closed
after the test."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from ebb.testing.hostile_http import Handler, HostilePeer


@pytest.fixture
def peer() -> Iterator[Callable[..., HostilePeer]]:
    """``peer(handler, wrap=None)``: a new :class:`HostilePeer` answering with ``handler``."""
    with ExitStack() as started:
        def start(handler: Handler, wrap: ssl.SSLContext | None = None) -> HostilePeer:
            p = HostilePeer(handler, wrap)
            started.callback(p.close)
            return p
        yield start
