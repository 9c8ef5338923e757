"""The /v1/buckets wire format: exact round trips, strict validation, mergeable sketches."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.sources.agent_wire import (
    Bucket, BucketPage, RouterGauges, Sketch, WorkerGauges, decode_page, decode_page_json, encode_bucket_json,
    page_json,
)
from ebb.errors import InputError
from ebb.testing.wire import encode_page
from ebb.window.sketch import ColumnarSketch

URL = "http://10.0.0.7:9100"
TOL = 0.01 * (1 + 1e-9)  # alpha, plus float rounding exactly on a bin edge

finite = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)
ratio = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
latency = st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1e6))
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8)
workers = st.builds(WorkerGauges, finite, finite, st.integers(1, 512), st.booleans(), ratio,
                    st.one_of(st.none(), ratio), st.booleans())
sketches = st.lists(latency, max_size=40).map(Sketch.of)


@st.composite
def buckets(draw: st.DrawFn, ts_ns: int) -> Bucket:
    return Bucket(
        ts_ns=ts_ns,
        workers=draw(st.dictionaries(names, workers, max_size=3)),
        routers=draw(st.dictionaries(names, st.builds(RouterGauges, finite, finite), max_size=2)),
        latency_from=draw(st.sampled_from(["", "router", "workers"])),
        latency_names=tuple(draw(st.lists(names, max_size=3))),
        ttft_ms=draw(sketches), e2e_ms=draw(sketches),
        missing=tuple(draw(st.lists(names.map(lambda n: f"http://{n}:1"), max_size=2))),
        gpu=draw(st.dictionaries(names, finite, max_size=3)),
        host=draw(st.dictionaries(names, finite, max_size=3)),
    )


@st.composite
def pages(draw: st.DrawFn) -> BucketPage:
    start = draw(st.integers(0, 2**60))
    n = draw(st.integers(0, 4))
    bs = tuple(draw(buckets(start + k * 100_000_000)) for k in range(n))
    return BucketPage(draw(names), 100, bs[-1].ts_ns if bs else None, bs,
                      now_ns=draw(st.none() | st.integers(0, 2**63 - 1)))


def roundtrip(page: BucketPage) -> BucketPage:
    return decode_page(json.loads(json.dumps(encode_page(page))), URL)


@settings(max_examples=150, deadline=None)
@given(page=pages())
def test_decoding_an_encoded_page_gives_back_the_same_page(page: BucketPage) -> None:
    assert roundtrip(page) == page


@settings(max_examples=150, deadline=None)
@given(a=st.lists(latency, min_size=1, max_size=200), b=st.lists(latency, max_size=200),
       q=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]))
def test_merged_sketches_answer_quantiles_within_alpha_of_the_union(a: list[float], b: list[float],
                                                                   q: float) -> None:
    page = BucketPage("a", 100, 1, (Bucket(0, ttft_ms=Sketch.of(a)), Bucket(1, ttft_ms=Sketch.of(b))))
    back = roundtrip(page).buckets
    merged = back[0].ttft_ms.merge(back[1].ttft_ms)
    truth = float(np.quantile(np.asarray(a + b), q, method="lower"))
    est = merged.quantile(q)
    assert abs(est - truth) <= TOL * truth
    assert merged == Sketch.of(a + b)


def test_a_sketch_answers_like_the_l1_columnar_sketch() -> None:
    values = np.random.default_rng(7).lognormal(5.0, 1.5, 5000)
    col = ColumnarSketch(1)
    col.ingest(np.zeros(len(values), dtype=np.int64), values)
    sk = Sketch.of(values.tolist())
    for q in (0.0, 0.5, 0.99, 1.0):
        assert sk.quantile(q) == pytest.approx(float(col.quantile(q)[0]), rel=1e-12)


def test_sketch_rows_are_one_weighted_row_per_non_empty_bin() -> None:
    vals, wts = Sketch.of([0.0, 0.0, 100.0, 100.5, 5000.0]).rows()
    assert vals[0] == 0.0 and wts.tolist() == [2.0, 2.0, 1.0]
    assert vals[1] == pytest.approx(100.0, rel=0.01) and vals[2] == pytest.approx(5000.0, rel=0.01)


def good_page() -> dict[str, Any]:
    b = Bucket(1_000_000_000, workers={"w0": WorkerGauges(2.0, 0.0, 8, True, 0.25, 0.5)},
               routers={"r": RouterGauges(1.0, 3.0)}, ttft_ms=Sketch.of([10.0]))
    return encode_page(BucketPage("node-a", 100, b.ts_ns, (b,)))


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda p: p.update(version=2), "version"),
    (lambda p: p["buckets"][0]["workers"]["w0"].update(slot_ratio="1.5"), "buckets[0].workers.w0.slot_ratio"),
    (lambda p: p["buckets"][0]["routers"]["r"].pop("queued"), "buckets[0].routers.r: missing field(s) 'queued'"),
    (lambda p: p["buckets"][0].update(extra=1), "buckets[0]: unknown field(s) 'extra'"),
    (lambda p: p["buckets"][0]["ttft_ms"].update(alpha=0.02), "buckets[0].ttft_ms.alpha"),
    (lambda p: p["buckets"][0]["ttft_ms"]["bins"].update({"x": 1}), "buckets[0].ttft_ms.bins"),
    (lambda p: p["buckets"][0]["ttft_ms"]["bins"].update({"10": -3}), "buckets[0].ttft_ms.bins.10"),
    (lambda p: p["buckets"].append(dict(p["buckets"][0])), "buckets[1].ts_ns"),
    (lambda p: p.pop("agent"), "missing field(s) 'agent'"),
])
def test_a_malformed_page_raises_input_error_naming_the_url_and_field(mutate: Any, field: str) -> None:
    page = good_page()
    mutate(page)
    with pytest.raises(InputError) as err:
        decode_page(json.loads(json.dumps(page)), URL)
    assert URL in str(err.value) and field in str(err.value)


@pytest.mark.parametrize(("mutate", "entry", "field"), [
    (lambda p: p["buckets"][0]["workers"]["w0"].update(running=-50), "w0", "buckets[0].workers.w0.running"),
    (lambda p: p["buckets"][0]["workers"]["w0"].update(slot_ratio=1.5), "w0", "buckets[0].workers.w0.slot_ratio"),
    (lambda p: p["buckets"][0]["workers"]["w0"].update(max_batch=0), "w0", "buckets[0].workers.w0.max_batch"),
    (lambda p: p["buckets"][0]["workers"]["w0"].update(waiting=10**400), "w0", "buckets[0].workers.w0.waiting"),
    (lambda p: p["buckets"][0]["routers"]["r"].update(queued=-1), "r", "buckets[0].routers.r.queued"),
])
def test_a_value_out_of_range_drops_its_entry_alone_and_marks_it_missing(mutate: Any, entry: str, field: str) -> None:
    page = good_page()
    page["buckets"][0]["workers"]["w1"] = dict(page["buckets"][0]["workers"]["w0"])  # a good neighbour
    mutate(page)
    got = decode_page(json.loads(json.dumps(page)), URL)
    b = got.buckets[0]
    assert entry not in b.workers and entry not in b.routers and entry in b.missing
    assert "w1" in b.workers and b.ttft_ms.count == 1
    assert len(got.dropped) == 1 and URL in got.dropped[0] and field in got.dropped[0]
    assert "ebb probe" in got.dropped[0] and "out of range" in got.dropped[0]


def test_one_gpu_series_out_of_range_is_dropped_alone() -> None:
    page = good_page()
    page["buckets"][0]["gpu"].update(power_w=float("nan"), util_ratio=0.5)
    got = decode_page(json.loads(json.dumps(page)), URL)
    assert dict(got.buckets[0].gpu) == {"util_ratio": 0.5} and "buckets[0].gpu.power_w" in got.dropped[0]


def test_a_well_formed_page_decodes() -> None:
    page = decode_page(good_page(), URL)
    assert page.buckets[0].workers["w0"].prefill_busy_ratio == 0.5


def test_sketch_of_rejects_negative_and_non_finite_latencies() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite and >= 0"):
            Sketch.of([1.0, bad])


# -- hostile pages (issue 12: H1, M6 for the controller's reader) --------------------------------
def _set(path: list[Any], value: object) -> Any:
    def mutate(p: dict[str, Any]) -> None:
        node: Any = p
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return mutate


@pytest.mark.parametrize(("mutate", "field"), [
    (_set(["buckets", 0, "workers", "w0", "running"], [10**400]), "buckets[0].workers.w0.running"),
    (_set(["buckets", 0, "ts_ns", ], 2**63), "buckets[0].ts_ns"),
    (_set(["newest_ns"], 10**5000), "newest_ns"),
    (_set(["buckets", 0, "ttft_ms", "zero"], 2**70), "buckets[0].ttft_ms.zero"),
    (_set(["buckets", 0, "ttft_ms", "bins", "5"], 2**64), "buckets[0].ttft_ms.bins.5"),
    (_set(["buckets", 0, "ttft_ms", "bins", "0007"], 1), "buckets[0].ttft_ms.bins"),
    (_set(["buckets", 0, "ttft_ms", "bins", " 7"], 1), "buckets[0].ttft_ms.bins"),
    (_set(["buckets", 0, "ttft_ms", "bins", "9" * 5000], 1), "buckets[0].ttft_ms.bins"),
    (_set(["buckets", 0, "ttft_ms", "alpha"], [0.01]), "buckets[0].ttft_ms.alpha"),
    (_set(["buckets", 0, "gpu", "util"], [[[[1]]]]), "buckets[0].gpu.util"),
    (_set(["buckets", 0, "latency_names"], "w0"), "buckets[0].latency_names"),
    (_set(["version"], True), "version"),
    (_set(["bucket_ms"], 2**64), "bucket_ms"),
], ids=lambda v: v if isinstance(v, str) else "mutation")
def test_huge_integers_odd_keys_and_wrong_types_are_input_errors(mutate: Any, field: str) -> None:
    page = good_page()
    mutate(page)
    with pytest.raises(InputError) as err:
        decode_page(page, URL)
    assert URL in str(err.value) and field in str(err.value) and len(str(err.value)) < 600


def test_a_deeply_nested_value_inside_a_field_is_described_not_repr_ed() -> None:
    deep: Any = 0
    for _ in range(100_000):  # repr() of this raises RecursionError
        deep = [deep]
    page = good_page()
    page["buckets"][0]["gpu"]["util"] = deep
    with pytest.raises(InputError, match="a list of 1"):
        decode_page(page, URL)


@pytest.mark.parametrize("raw", [b"[" * 100_000 + b"]" * 100_000, b"{", b"\xff", b"null", b"NaN"],
                         ids=["deep", "truncated", "not-utf8", "null", "nan"])
def test_decode_page_json_turns_any_bad_text_into_an_input_error(raw: bytes) -> None:
    with pytest.raises(InputError) as err:
        decode_page_json(raw, URL)
    assert URL in str(err.value)


@settings(max_examples=60, deadline=None)
@given(page=pages())
def test_pages_joined_from_pre_encoded_buckets_decode_to_the_same_page(page: BucketPage) -> None:
    raw = page_json(page.agent, page.bucket_ms, page.newest_ns, [encode_bucket_json(b) for b in page.buckets],
                    page.now_ns)
    assert decode_page_json(raw, URL) == page


def test_asleep_travels_only_when_true_and_must_be_a_boolean() -> None:
    page = BucketPage("a", 100, 1, (Bucket(1, workers={"w0": WorkerGauges(0, 0, 1, False, 0.0, None, asleep=True),
                                                       "w1": WorkerGauges(1, 0, 1, True, 1.0, None)}),))
    wire = encode_page(page)
    assert wire["buckets"][0]["workers"]["w0"]["asleep"] is True and "asleep" not in wire["buckets"][0]["workers"]["w1"]
    wire["buckets"][0]["workers"]["w0"]["asleep"] = 1
    with pytest.raises(InputError, match=r"workers\.w0\.asleep"):
        decode_page(json.loads(json.dumps(wire)), URL)
