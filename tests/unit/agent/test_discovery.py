"""Which URLs the agent polls: one rule for --endpoint, --endpoints-from and a router's /workers list."""

from __future__ import annotations

import json

import pytest

from ebb.agent.discovery import MAX_ENDPOINTS, check_endpoint, parse_workers, plan
from ebb.errors import InputError

SRC = "http://10.0.0.1:8000/workers"


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:", "http://127.0.0.1:0", "ftp://10.0.0.1:21", "file:///etc/passwd", "gopher://127.0.0.1:1/x",
    "http://user:pw@10.0.0.1:8000", "http://10.0.0.1:8000/internal/admin/delete?confirm=yes",
    "http://10.0.0.1:8000/p3#", "http://10.0.0.1:8000/#x", "http://10.0.0.1:99999", "http:///stats", "",
    "http://10.0.0.1:8000/\nx", "http://" + "a" * 3000 + ":1",
])
def test_urls_that_would_steer_or_break_the_poll_are_refused(url: str) -> None:
    with pytest.raises(InputError) as err:
        check_endpoint(url)
    assert len(str(err.value)) < 500 and "fix:" in str(err.value)


@pytest.mark.parametrize(("url", "clean"), [
    ("http://10.0.0.1:8000/", "http://10.0.0.1:8000"), ("https://w0.serving.svc", "https://w0.serving.svc"),
    ("http://[::1]:8001/p0/", "http://[::1]:8001/p0"),
])
def test_usable_urls_come_back_without_a_trailing_slash(url: str, clean: str) -> None:
    assert check_endpoint(url) == clean


def test_a_worker_list_keeps_the_good_entries_and_says_why_each_other_was_refused() -> None:
    # discovery_ssrf.py: file:, gopher: and an "internal" admin path were all polled
    listed = [{"url": "http://10.0.0.2:8001"}, {"url": "file:///etc/passwd"}, {"url": "gopher://127.0.0.1:1/x"},
              {"url": "http://10.0.0.3:9/internal/admin/delete?confirm=yes#"}, {"url": 7}, "http://10.0.0.4:1",
              {"name": "w5"}, {"url": "http://10.0.0.2:8001/"}, {"url": "https://10.0.0.6:8443"}]
    got = parse_workers(json.dumps(listed).encode(), SRC)
    assert got.urls == ("http://10.0.0.2:8001", "https://10.0.0.6:8443")
    assert len(got.refused) == 6
    assert [r.split(":")[0] for r in got.refused] == [f"entry {i}" for i in (1, 2, 3, 4, 5, 6)]


@pytest.mark.parametrize("raw", [b"{}", b"null", b"[" * 100_000 + b"]" * 100_000, b"nope", b"\xff"],
                         ids=["object", "null", "deep", "not-json", "not-utf8"])
def test_a_malformed_worker_list_as_a_whole_is_an_input_error_naming_the_source(raw: bytes) -> None:
    with pytest.raises(InputError) as err:
        parse_workers(raw, SRC)
    assert SRC in str(err.value)


def test_the_cap_keeps_fixed_then_already_polled_then_new_endpoints_in_listed_order() -> None:
    fixed = ["http://r:1"]
    listed = [f"http://w{i}:1" for i in range(6)]
    want, over = plan(fixed, ["http://r:1", "http://w4:1", "http://gone:1"], listed, max_endpoints=4)
    assert want == ["http://r:1", "http://w4:1", "http://w0:1", "http://w1:1"]
    assert over == ["http://w2:1", "http://w3:1", "http://w5:1"]


def test_thousands_of_listed_workers_are_capped_at_the_documented_limit() -> None:
    listed = [f"http://10.1.{i // 250}.{i % 250}:8000" for i in range(2000)]
    want, over = plan(["http://r:1"], [], parse_workers(json.dumps([{"url": u} for u in listed]), SRC).urls)
    assert len(want) == MAX_ENDPOINTS == 256 and len(over) == 2000 - (MAX_ENDPOINTS - 1)
