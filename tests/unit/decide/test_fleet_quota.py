"""Vectorised elastic quota (ebb.decide.fleet_quota): scale-ups within max, borrowers above min —
equal to the rules written pod by pod and workload by workload."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.decide.fleet_quota import borrowed_replicas, cap_scale_ups
from ebb.decide.quota import QoSClass, Quota, QuotaPod, borrowed

GPU = "nvidia.com/gpu"


def reference_cap(spec: list[int], target: list[int], ns: list[int], each: list[int],
                  cap: list[int]) -> tuple[list[int], list[int]]:
    """The rule in plain Python, workload by workload (what the live controller did before the step)."""
    out, used_before = list(target), [0] * len(spec)
    used = [sum(s * e for s, e, k in zip(spec, each, ns) if k == q) for q in range(len(cap))]
    for i in range(len(spec)):
        q = ns[i]
        if cap[q] < 0 or target[i] <= spec[i]:
            continue
        room = target[i] - spec[i] if each[i] == 0 else max(0, (cap[q] - used[q]) // each[i])
        used_before[i] = used[q]
        out[i] = min(target[i], spec[i] + room)
        used[q] += (out[i] - spec[i]) * each[i]
    return out, used_before


def test_scale_ups_share_their_namespaces_max_in_workload_order_and_downs_pass() -> None:
    got = cap_scale_ups(spec=[2, 2, 4, 1], target=[6, 4, 1, 5], namespace=[0, 0, 0, 1], gpu_milli=[1000] * 4,
                        quota_max_milli=[11000, -1])
    assert got.target.tolist() == [5, 2, 1, 5]  # 8 used of 11: the first gets 3, the second none
    assert got.capped.tolist() == [True, True, False, False]
    assert got.used_before_milli.tolist()[:2] == [8000, 11000]


def test_a_namespace_already_past_its_max_gets_nothing_more() -> None:
    got = cap_scale_ups(spec=[5], target=[7], namespace=[0], gpu_milli=[2000], quota_max_milli=[8000])
    assert got.target.tolist() == [5] and got.capped.tolist() == [True]


@pytest.mark.parametrize("change", [{"namespace": [3]}, {"gpu_milli": [-1]}, {"target": [1, 2]}])
def test_bad_arguments_raise_value_error(change: dict[str, object]) -> None:
    kw: dict[str, object] = {"spec": [1], "target": [2], "namespace": [0], "gpu_milli": [1000],
                             "quota_max_milli": [5000], **change}
    with pytest.raises(ValueError):
        cap_scale_ups(**kw)  # type: ignore[arg-type]


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    n = draw(st.integers(1, 10))
    k = draw(st.integers(1, 3))
    spec = [draw(st.integers(0, 6)) for _ in range(n)]
    target = [draw(st.integers(0, 12)) for _ in range(n)]
    ns = [draw(st.integers(0, k - 1)) for _ in range(n)]
    if draw(st.booleans()):  # equal pods per namespace (the prefix-sum path), else mixed sizes
        size = [draw(st.sampled_from([500, 1000, 2000])) for _ in range(k)]
        each = [size[q] for q in ns]
    else:
        each = [draw(st.sampled_from([0, 500, 1000, 2000, 4000])) for _ in range(n)]
    cap = [draw(st.one_of(st.just(-1), st.integers(0, 40_000))) for _ in range(k)]
    return spec, target, ns, each, cap


@settings(max_examples=300, deadline=None)
@given(f=fleets())
def test_cap_scale_ups_equals_the_rule_workload_by_workload(f: tuple[list[int], ...]) -> None:
    spec, target, ns, each, cap = f
    got = cap_scale_ups(spec=spec, target=target, namespace=ns, gpu_milli=each, quota_max_milli=cap)
    want, used_before = reference_cap(spec, target, ns, each, cap)
    assert got.target.tolist() == want
    assert [bool(c) for c in got.capped] == [w < t and t > s for w, t, s in zip(want, target, spec)]
    for i in np.flatnonzero(got.capped):
        assert got.used_before_milli[i] == used_before[i]
    after = np.bincount(ns, weights=np.asarray(got.target) * np.asarray(each), minlength=len(cap))
    before = np.bincount(ns, weights=np.asarray(spec) * np.asarray(each), minlength=len(cap))
    downs = np.bincount(ns, weights=np.minimum(np.asarray(target) - np.asarray(spec), 0) * np.asarray(each),
                        minlength=len(cap))
    for q, c in enumerate(cap):
        if c >= 0:
            assert after[q] - downs[q] <= max(c, before[q])


# ---- borrowers: equal to ebb.decide.quota.borrowed on materialised pods ---------------------------

@st.composite
def namespaces(draw: st.DrawFn) -> tuple[list[int], list[int], list[int], list[int], list[int], list[bool], bool]:
    n = draw(st.integers(1, 8))
    k = draw(st.integers(1, 3))
    uniform = draw(st.booleans())
    size = [draw(st.sampled_from([1000, 2000])) for _ in range(k)]
    ns = [draw(st.integers(0, k - 1)) for _ in range(n)]
    each = [size[q] if uniform else draw(st.sampled_from([0, 1000, 2000, 4000])) for q in ns]
    reps = [draw(st.integers(0, 5)) for _ in range(n)]
    prio = [draw(st.sampled_from([0, 100, 1000])) for _ in range(n)]
    qmin = [draw(st.integers(0, 12)) * 1000 for _ in range(k)]
    governed = [draw(st.booleans()) for _ in range(k)]
    return reps, ns, prio, each, qmin, governed, uniform


@settings(max_examples=300, deadline=None)
@given(f=namespaces())
def test_borrowed_replicas_equal_first_fit_with_equal_pods_and_never_fewer_with_mixed(f: tuple) -> None:
    reps, ns, prio, each, qmin, governed, uniform = f
    got = borrowed_replicas(replicas=reps, namespace=ns, priority=prio, gpu_milli=each, quota_min_milli=qmin,
                            governed=governed)
    # pods of equal age, named so that name order is workload order (the per-pod rule's tie-break)
    pods = [QuotaPod(f"w{i:02d}-{k:02d}", f"ns{ns[i]}", QoSClass.GUARANTEED, priority=prio[i],
                     requests={GPU: each[i]}) for i in range(len(reps)) for k in range(reps[i])]
    quotas = [Quota(f"ns{q}", min={GPU: m}) for q, m in enumerate(qmin) if governed[q]]
    names = {p.name for q in quotas for p in borrowed(q, pods)}
    want = [sum(1 for k in range(reps[i]) if f"w{i:02d}-{k:02d}" in names) for i in range(len(reps))]
    if uniform:
        assert got.tolist() == want
    else:
        assert all(g >= w for g, w in zip(got.tolist(), want))
    assert all(0 <= g <= r for g, r in zip(got.tolist(), reps))
