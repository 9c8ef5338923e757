"""Fuzz the agent's readers of outside input (issue 12): ``/stats`` answers, router ``/workers`` lists,
the ``/v1/buckets`` page the controller decodes, and the router's ``/v1/generate`` bodies.

Inputs are valid documents with one to three mutations (a value swapped for a hostile one — deep
nesting, integers past int64 and past 4,300 digits, NaN/inf, wrong types, huge strings — a key
dropped or added) and raw texts (deep brackets, huge literals, truncations, random bytes). The
property: the reader returns a value or raises its documented error — :class:`~ebb.errors.InputError`
(an :class:`~ebb.errors.EbbError`) for the agent's readers, :class:`~ebb.demo.stats.BadRequest` for
the router — never anything else; a ``/stats`` poll that parses also goes through the aggregator,
which must then never raise. Budgets are fixed (``max_examples``), the inputs derandomized, and
every input has a 2 s deadline, so a hang fails instead of stalling CI.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebb.agent.buckets import BucketAggregator, StatsPoll, decode_stats, parse_stats
from ebb.agent.discovery import WorkerList, parse_workers
from ebb.sources.agent_wire import Bucket, BucketPage, RouterGauges, Sketch, WorkerGauges, decode_page, decode_page_json
from ebb.errors import EbbError
from ebb.demo.stats import BadRequest, GenerateRequest, parse_generate
from ebb.testing.wire import encode_page

from mutations import mutate_tree, nested

URL = "http://10.0.0.7:8001"
T0 = 1_800_000_000.0
FUZZ = settings(max_examples=500, deadline=timedelta(seconds=2), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


hostile_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=2**63 - 2, max_value=2**64 + 2),
    st.just(-(2**63) - 1), st.sampled_from([400, 4400]).map(lambda n: 10**n),  # repr() refuses 10**4400
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e303, -0.0, 5e-324]),
    st.text(max_size=20), st.just(40_000).map(lambda n: "x" * n), st.just("w0@http://10.0.0.1:1"), st.just("\x00\n"),
)
json_values = st.recursive(hostile_scalars, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=12)
# past the 64-level cap but within what json.dumps can write (deeper ones come as raw text below)
hostile = st.one_of(hostile_scalars, json_values, st.integers(60, 900).map(nested))


@st.composite
def mutated(draw: st.DrawFn, make: Callable[[], Any]) -> Any:
    """A valid document with 1-3 mutations at random places (down to 8 levels, the first 6 items of a
    list: mutated documents may be 900 deep)."""
    return mutate_tree(draw, make(), hostile, st.text(max_size=12), depth=8, items=6, sort=False)


def stats_doc() -> dict[str, Any]:
    return {"version": 1, "kind": "worker", "name": "w0", "now_s": T0, "seq": 3, "ready": True,
            "completed_total": 3, "max_batch": 8, "running": 2, "waiting": 1, "prefill_busy_s_total": 1.5,
            "dropped": 0, "completions": [[1, T0 - 0.2, 120.0, 900.0], [2, T0 - 0.1, 80.0, 700.0],
                                          [3, T0, 0.0, 10.0]]}


def router_doc() -> dict[str, Any]:
    return {"version": 1, "kind": "router", "name": "router", "now_s": T0, "seq": 1, "ready": True,
            "completed_total": 1, "queued": 2, "inflight": 3, "failed_total": 0,
            "completions": [[1, T0 - 0.05, 300.0, 1200.0]]}


def page_doc() -> dict[str, Any]:
    b = Bucket(1_800_000_000_000_000_000, workers={"w0": WorkerGauges(2.0, 1.0, 8, True, 0.25, 0.5),
                                                   "w1": WorkerGauges(0.0, 0.0, 4, False, 0.0, None)},
               routers={"router": RouterGauges(1.0, 3.0)}, latency_from="router", latency_names=("router",),
               ttft_ms=Sketch.of([0.0, 10.0, 250.0, 9000.0]), e2e_ms=Sketch.of([500.0, 1e5]),
               missing=("http://10.0.0.9:8001",), gpu={"gpu0/util_gpu_pct": 42.0}, host={"mem_used_pct": 7.5})
    b2 = Bucket(b.ts_ns + 100_000_000)
    return encode_page(BucketPage("node-a", 100, b2.ts_ns, (b, b2)))


def workers_doc() -> list[Any]:
    return [{"name": "w0", "url": "http://10.0.0.2:8001", "max_batch": 8, "inflight": 0, "draining": False},
            {"name": "w1", "url": "https://10.0.0.3:8443/p1", "max_batch": 8, "inflight": 1, "draining": True}]


raw_texts = st.one_of(
    st.binary(max_size=200),
    # up to 30,000 levels: past the 64 cap and Python's recursion limit, and still under the 100 kB
    # Hypothesis prints (the 100,000-level repros are unit tests)
    st.integers(1, 30_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 12_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.integers(1, 6000).map(lambda n: b'{"version": ' + b"9" * n + b"}"),
    st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b'"\\ud800"', b"\xef\xbb\xbf{}", b""]),
)


def as_text(doc: Any) -> bytes:
    """JSON text of ``doc``, with integers of any length written out (the reader must refuse them)."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return json.dumps(doc).encode()
    finally:
        sys.set_int_max_str_digits(limit)


@st.composite
def truncated(draw: st.DrawFn, make: Callable[[], Any]) -> bytes:
    raw = as_text(make())
    return raw[: draw(st.integers(0, len(raw)))]


# -- /stats -----------------------------------------------------------------------------------
def _through_the_aggregator(poll: StatsPoll) -> None:
    agg = BucketAggregator()
    end = (int(T0 * 1e9) // 100_000_000 + 1) * 100_000_000
    agg.poll_ok(URL, poll, end - 50_000_000)
    agg.poll_ok("http://10.0.0.8:8001", poll, end - 40_000_000)  # the same name twice: a collision
    for k in range(3):
        agg.close(end + k * 100_000_000)


@FUZZ
@given(doc=st.one_of(mutated(stats_doc), mutated(router_doc)))
def test_parse_stats_returns_a_poll_or_raises_an_ebb_error(doc: Any, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("agent_stats")
    try:
        poll = parse_stats(doc, URL)
    except EbbError as exc:
        assert len(str(exc)) < 2000
        return
    assert isinstance(poll, StatsPoll)
    _through_the_aggregator(poll)


@FUZZ
@given(raw=st.one_of(raw_texts, truncated(stats_doc), mutated(stats_doc).map(lambda d: as_text(d))))
def test_decode_stats_returns_a_poll_or_raises_an_ebb_error(raw: bytes, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("agent_stats")
    try:
        poll = decode_stats(raw, URL)
    except EbbError:
        return
    _through_the_aggregator(poll)


@FUZZ
@given(raw=st.one_of(raw_texts, mutated(workers_doc).map(as_text)))
def test_parse_workers_returns_a_list_or_raises_an_ebb_error(raw: bytes, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("agent_stats")
    try:
        got = parse_workers(raw, URL + "/workers")
    except EbbError:
        return
    assert isinstance(got, WorkerList) and all(u.startswith(("http://", "https://")) for u in got.urls)


# -- /v1/buckets --------------------------------------------------------------------------------
@FUZZ
@given(doc=mutated(page_doc))
def test_decode_page_returns_a_page_or_raises_an_ebb_error(doc: Any, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("agent_wire")
    try:
        page = decode_page(doc, URL)
    except EbbError as exc:
        assert len(str(exc)) < 2000
        return
    assert isinstance(page, BucketPage)
    assert decode_page(json.loads(json.dumps(encode_page(page))), URL) == page


@FUZZ
@given(raw=st.one_of(raw_texts, truncated(page_doc), mutated(page_doc).map(as_text)))
def test_decode_page_json_returns_a_page_or_raises_an_ebb_error(raw: bytes, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("agent_wire")
    try:
        assert isinstance(decode_page_json(raw, URL), BucketPage)
    except EbbError:
        pass


# -- the router's request bodies ----------------------------------------------------------------
@FUZZ
@given(raw=st.one_of(raw_texts, mutated(lambda: {"input_tokens": 512, "output_tokens": 128}).map(as_text)))
def test_parse_generate_returns_a_request_or_raises_bad_request(raw: bytes, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("router_body")
    try:
        assert isinstance(parse_generate(raw), GenerateRequest)
    except BadRequest as exc:
        assert len(str(exc)) < 2000
