"""Vectorised L2 (ebb.decide.fleet_rank) equals the scalar rules of ebb.decide.semantics."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ebb.config.workloads import WorkloadClass, default_workload_classes
from ebb.decide.fleet_rank import (
    VETO_BITS,
    VETO_BURST,
    VETO_MIN_REPLICAS,
    VETO_P95_HIGH,
    VETO_P95_UNKNOWN,
    VETO_P99_HIGH,
    VETO_P99_UNKNOWN,
    VETO_STALE,
    VETO_SUCCESS_LOW,
    VETO_SUCCESS_UNKNOWN,
    FleetClasses,
    rank_fleet,
    recalibrate_fleet,
    veto_reasons,
)
from ebb.decide.semantics import WorkloadSignals, headroom, rank_candidates, recalibrate_weight, veto

ORDER, RECO, TRAIN = default_workload_classes()


def scalar_code(reasons: tuple[str, ...]) -> int:
    """The bits of ``veto``'s reason strings (their prefixes are fixed by semantics.py)."""
    code = 0
    for r in reasons:
        if r.startswith("stale data"):
            code |= VETO_STALE
        elif r.startswith(("p99 latency unknown", "p95 latency unknown")):
            code |= VETO_P99_UNKNOWN if r.startswith("p99") else VETO_P95_UNKNOWN
        elif r.startswith(("p99 latency", "p95 latency")):
            code |= VETO_P99_HIGH if r.startswith("p99") else VETO_P95_HIGH
        elif r.startswith("success rate unknown"):
            code |= VETO_SUCCESS_UNKNOWN
        elif r.startswith("success rate"):
            code |= VETO_SUCCESS_LOW
        elif r.startswith("burst active"):
            code |= VETO_BURST
        elif r.startswith("replicas "):
            code |= VETO_MIN_REPLICAS
        else:
            raise AssertionError(f"unmapped veto reason {r!r}")
    return code


def test_the_notes_classes_rank_as_the_scalar_example() -> None:
    classes = FleetClasses.of((ORDER, RECO, TRAIN), [0, 1, 1, 2])
    got = rank_fleet(classes, weight=[0.65, 0.25, 0.25, 0.10], latency_p99_ms=[200.0, math.nan, math.nan, math.nan],
                     latency_p95_ms=[100.0, 150.0, 60.0, math.nan],
                     utilisation_ratio=[0.3, 0.3, 0.3, 0.4], staleness_s=0.5, success_ratio=0.9999,
                     burst_active=False, replicas=4)
    assert got.order.tolist() == [3, 2, 1, 0]  # train, reco-b, reco-a, orders
    assert got.headroom[2] == pytest.approx(0.8) and not got.vetoed.any()


def test_veto_codes_name_every_reason_in_check_order() -> None:
    classes = FleetClasses.of((ORDER,), [0, 0, 0])
    got = rank_fleet(classes, weight=0.65, latency_p99_ms=[640.0, math.nan, 100.0], staleness_s=[0.5, 30.0, 0.5],
                     success_ratio=[0.9999, math.nan, 0.999],
                     burst_active=[False, True, False], replicas=[4, 1, 4])
    assert got.veto_code.tolist() == [VETO_P99_HIGH,
                                      VETO_STALE | VETO_P99_UNKNOWN | VETO_SUCCESS_UNKNOWN | VETO_BURST
                                      | VETO_MIN_REPLICAS,
                                      VETO_SUCCESS_LOW]
    assert got.reasons(1) == ("stale data", "p99 latency unknown (fail safe)",
                              "success rate unknown (fail safe)", "burst active (L1)",
                              "replicas <= min_replicas")
    assert veto_reasons(0) == () and len({b for b, _ in VETO_BITS}) == len(VETO_BITS)


def test_an_infinite_latency_counts_as_ten_times_the_slo_and_nan_keeps_the_weight() -> None:
    classes = FleetClasses.of((ORDER,), [0, 0])
    got = recalibrate_fleet(classes, prev_weight=[0.65, 0.7], latency_ms=[math.inf, math.nan], latency_slo_ms=800.0)
    assert got[0] == recalibrate_weight(ORDER, 0.65, 8000.0, 800.0)
    assert got[1] == 0.7


@pytest.mark.parametrize(("column", "value"), [("prev_weight", -0.1), ("prev_weight", math.inf),
                                               ("latency_ms", -1.0), ("latency_slo_ms", 0.0)])
def test_bad_arguments_raise_where_the_scalar_function_would(column: str, value: float) -> None:
    kw: dict[str, object] = {"prev_weight": 0.5, "latency_ms": 1.0, "latency_slo_ms": 1.0}
    kw[column] = [0.5, value] if column == "prev_weight" else [1.0, value]
    with pytest.raises(ValueError, match=f"{column}.*workload 1"):
        recalibrate_fleet(FleetClasses.of((ORDER,), [0, 0]), **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weight.*workload 1"):
        rank_fleet(FleetClasses.of((ORDER,), [0, 0]), weight=[0.5, math.nan], latency_p99_ms=1.0, staleness_s=0.5,
                   success_ratio=1.0, burst_active=False, replicas=4)


def test_shapes_and_names_are_checked() -> None:
    classes = FleetClasses.of((ORDER,), [0, 0])
    base = {"weight": 0.5, "latency_p99_ms": 1.0, "staleness_s": 0.5, "success_ratio": 1.0, "burst_active": False,
            "replicas": 4}
    with pytest.raises(ValueError, match="shape"):
        rank_fleet(classes, **{**base, "replicas": [1, 2, 3]})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unique"):
        rank_fleet(classes, names=["a", "a"], **base)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="index"):
        FleetClasses.of((ORDER,), [1])


# ---- property: element by element equal to the scalar functions ---------------------------------

maybe = st.one_of(st.none(), st.floats(1.0, 1000.0))
classes_st = st.lists(st.builds(
    lambda b, a, p99, p95, succ, margin, mn: WorkloadClass(
        name="c", base_weight=b, alpha=a, p99_latency_ms=p99, p95_latency_ms=p95,
        success_rate_min=succ, veto_margin=margin, min_replicas=mn),
    st.sampled_from([0.1, 0.25, 0.65, 1.0]), st.floats(0.0, 5.0), maybe, maybe,
    st.one_of(st.none(), st.floats(0.5, 1.0)), st.floats(0.1, 1.0), st.integers(0, 3)),
    min_size=1, max_size=3)
latency_st = st.one_of(st.just(math.nan), st.just(math.inf), st.sampled_from([0.0, 100.0, 800.0]),
                       st.floats(0.0, 10_000.0))
workload_st = st.tuples(
    st.integers(0, 2),                                       # class index (mod #classes)
    st.sampled_from([0.1, 0.25, 0.5, 0.65]) | st.floats(0.0, 3.0),  # prev weight (ties likely)
    latency_st, st.sampled_from([100.0, 300.0, 800.0]) | st.floats(0.01, 5000.0),  # latency, its SLO
    latency_st, latency_st,                                  # p99, p95
    st.one_of(st.just(math.nan), st.floats(0.0, 1.0)),       # success ratio
    st.booleans(), st.integers(0, 6),                        # burst, replicas
    st.one_of(st.just(math.nan), st.floats(-1.0, 2.0)),      # utilisation
    st.one_of(st.just(math.nan), st.floats(0.0, 5.0)),       # staleness
)


@settings(max_examples=300, deadline=None)
@given(classes=classes_st, rows=st.lists(workload_st, min_size=1, max_size=12),
       names=st.one_of(st.none(), st.permutations(list("abcdefghijkl"))))
def test_recalibrate_and_rank_fleet_equal_the_scalar_functions_element_by_element(
        classes: list[WorkloadClass], rows: list[tuple[object, ...]], names: list[str] | None) -> None:
    classes = [dataclasses.replace(c, name=f"c{i}") for i, c in enumerate(classes)]
    n = len(rows)
    labels = [f"w{i:03d}" for i in range(n)] if names is None else names[:n]
    cols = list(zip(*rows))
    idx = [int(i) % len(classes) for i in cols[0]]  # type: ignore[call-overload]
    prev, lat, slo, p99, p95, succ, burst, reps, util, stale = (list(c) for c in cols[1:])
    cols_ = FleetClasses.of(classes, idx)
    new = recalibrate_fleet(cols_, prev_weight=prev, latency_ms=lat, latency_slo_ms=slo)
    got = rank_fleet(cols_, weight=new, latency_p99_ms=p99, latency_p95_ms=p95, success_ratio=succ,
                     burst_active=burst, replicas=reps, utilisation_ratio=util, staleness_s=stale,
                     names=None if names is None else labels)
    sigs, weights = [], {}
    for i in range(n):
        cls = classes[idx[i]]
        s = WorkloadSignals(labels[i], cls.name, int(reps[i]), int(reps[i]),  # type: ignore[call-overload]
                            p99[i], p95[i], succ[i], bool(burst[i]), util[i], stale[i])  # type: ignore[arg-type]
        w = recalibrate_weight(cls, prev[i], lat[i], slo[i])  # type: ignore[arg-type]
        assert new[i] == w and got.weight[i] == w  # bit for bit; rank_fleet takes the weight as given
        weights[labels[i]] = w
        assert scalar_code(veto(cls, s)) == got.veto_code[i]
        h = headroom(cls, s)
        assert (math.isnan(h) and math.isnan(got.headroom[i])) or h == got.headroom[i]
        sigs.append(s)
    ranked = rank_candidates(classes, sigs, weights)
    assert [labels[i] for i in got.order] == [c.workload for c in ranked]
    assert [c.vetoed for c in ranked] == got.vetoed[got.order].tolist()
    assert np.array_equal(np.sort(got.order), np.arange(n))


def test_guarding_columns_are_what_the_live_loop_ranks_on_and_read_back_as_a_class() -> None:
    cols = FleetClasses.guarding(base_weight=[0.65, 0.1], alpha=[1.2, 0.3], veto_margin=0.8, slo_ms=[800.0, 1500.0],
                                 min_replicas=[2, 1])
    assert cols.p99_slo_ms.tolist() == [800.0, 1500.0] and np.isnan(cols.p95_slo_ms).all()
    assert np.isnan(cols.success_rate_min).all() and cols.min_replicas.tolist() == [2, 1]
    cls = cols.workload_class(1, "train")
    assert (cls.name, cls.base_weight, cls.p99_latency_ms, cls.p95_latency_ms, cls.success_rate_min,
            cls.min_replicas) == ("train", 0.1, 1500.0, None, None, 1)
