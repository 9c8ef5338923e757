"""The one bounded GET behind every live read: hostile peers end in an error of the tree, in time.

Written from the red-team reproductions H1 (truncated body, deep JSON) and M4 (150 MB answer,
trickled answer); the peers here are tiny socket servers on loopback that misbehave on purpose
(:mod:`ebb.testing.hostile_http`, started by the ``peer`` fixture). How long a refusal or a deadline
takes is ``bench/deadlines.py``'s; here a deadline shows in the error it raises and in the peer's
trickle left unsent.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from shutil import which

import pytest

from ebb.errors import InputError, SourceUnavailable
from ebb.sources.agents import AgentSource
from ebb.sources.http_get import HttpLimits, TlsOptions, check_url, get
from ebb.testing.hostile_http import Handler, HostilePeer, answer, self_signed, server_context, stream

def test_a_truncated_answer_is_a_transient_outage_not_an_incomplete_read(peer: Callable[..., HostilePeer]) -> None:
    p = peer(answer(b'{"version": 1', length=1000))
    with pytest.raises(SourceUnavailable, match="IncompleteRead"):
        get(p.url + "/v1/buckets")


def test_deeply_nested_json_from_an_agent_is_an_input_error_not_a_recursion_error(
        peer: Callable[..., HostilePeer]) -> None:
    p = peer(answer(b"[" * 200_000 + b"]" * 200_000))
    with pytest.raises(InputError, match="nested deeper than 64"):
        AgentSource([p.url]).read(0.0)


def test_an_answer_larger_than_the_cap_is_refused_without_reading_it(peer: Callable[..., HostilePeer]) -> None:
    announced = peer(answer(b"0", length=150 * 1024 * 1024))
    with pytest.raises(InputError, match="announced 157,286,400 bytes"):
        get(announced.url, HttpLimits(max_bytes=1024 * 1024))

    streamed = peer(stream(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", b"0," * 32 * 1024, times=64))
    with pytest.raises(InputError, match="more than 1,048,576 bytes"):
        get(streamed.url, HttpLimits(max_bytes=1024 * 1024))


def counted_trickle(head: bytes, chunk: bytes, times: int, sent: list[int], done: threading.Event) -> Handler:
    """:func:`stream` with ``pause_s=0.1`` that counts the chunks sent, and sets ``done`` when it stops:
    at the end, or when the client has hung up (the next send fails)."""
    def handle(conn: socket.socket, req: bytes) -> None:
        try:
            conn.sendall(head)
            for _ in range(times):
                conn.sendall(chunk)
                sent.append(1)
                time.sleep(0.1)
        finally:
            done.set()
    return handle


def _hung_up_early(sent: list[int], done: threading.Event, times: int) -> bool:
    assert done.wait(30), "the peer never stopped sending"  # guards a hang only
    return len(sent) < times


def test_a_trickled_answer_ends_at_the_total_deadline(peer: Callable[..., HostilePeer]) -> None:
    sent: list[int] = []
    done = threading.Event()
    p = peer(counted_trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", b" ", 30, sent, done))
    with pytest.raises(SourceUnavailable, match="within 0.5 s"):
        get(p.url, HttpLimits(deadline_s=0.5))
    assert _hung_up_early(sent, done, 30)  # 3 s of trickle: the client stopped reading at its deadline


def test_trickled_headers_also_end_at_the_deadline(peer: Callable[..., HostilePeer]) -> None:
    sent: list[int] = []
    done = threading.Event()
    p = peer(counted_trickle(b"HTTP/1.1 200 OK\r\n", b"X-A: b\r\n", 30, sent, done))
    with pytest.raises(SourceUnavailable, match="within 0.5 s"):
        get(p.url, HttpLimits(deadline_s=0.5))
    assert _hung_up_early(sent, done, 30)


def test_the_bearer_token_is_sent_and_a_refusal_names_the_flag(peer: Callable[..., HostilePeer]) -> None:
    p = peer(answer(b'{"error": "unauthorized"}', status="401 Unauthorized"))
    with pytest.raises(InputError, match="bearer token"):
        AgentSource([p.url], token="s3cret").read(0.0)
    assert b"Authorization: Bearer s3cret" in p.requests[0]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://127.0.0.1:70/", "http://127.0.0.1:",
                                 "http://127.0.0.1:0/", "http://user:pw@127.0.0.1:9/", "http:///path",
                                 "http://127.0.0.1:99999/"])
def test_only_http_urls_with_a_host_and_a_real_port_are_polled(url: str) -> None:
    with pytest.raises(InputError):
        check_url(url)
    with pytest.raises(InputError):
        get(url)


def test_nothing_listening_is_a_transient_outage() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(SourceUnavailable, match="ConnectionRefused"):
        get(f"http://127.0.0.1:{port}/")


@pytest.mark.skipif(which("openssl") is None, reason="needs the openssl command to make a throwaway certificate")
def test_tls_verifies_the_server_and_an_unknown_ca_is_a_permanent_error(
        peer: Callable[..., HostilePeer], tmp_path: Path) -> None:
    crt, key = self_signed(tmp_path, "server")
    other, _ = self_signed(tmp_path, "other")
    p = peer(answer(json.dumps({"ok": True}).encode()), wrap=server_context(crt, key))
    assert get(p.url, HttpLimits(tls=TlsOptions(ca_file=str(crt)))).body == b'{"ok": true}'
    with pytest.raises(InputError, match="certificate"):
        get(p.url, HttpLimits(tls=TlsOptions(ca_file=str(other))))
    with pytest.raises(InputError, match="cannot load TLS files"):
        get(p.url, HttpLimits(tls=TlsOptions(ca_file=str(tmp_path / "missing.pem"))))
