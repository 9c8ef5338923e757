"""Metrics gate with Argo Rollouts AnalysisRun semantics (ebb.gates.metrics_gate)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebb.errors import ConfigError
from ebb.gates.metrics_gate import (
    GateSpec,
    GateState,
    Measurement,
    classify,
    evaluate,
    gate_spec_from_mapping,
    parse_condition,
    step,
    stop,
    verdict,
)

Q = "histogram_quantile(0.99, rate(latency_ms_bucket[1m]))"


def ms(*values: float | None | str) -> list[Measurement]:
    """Measurements 60 s apart; a str is a query error."""
    return [Measurement(60.0 * i, None, v) if isinstance(v, str) else Measurement(60.0 * i, v)
            for i, v in enumerate(values)]


# --- measurement phase -------------------------------------------------------------------------

BOTH = GateSpec(Q, success_condition="result < 800", failure_condition="result >= 1000")
SUCC_ONLY = GateSpec(Q, success_condition="result < 800")
FAIL_ONLY = GateSpec(Q, failure_condition="result >= 1000")


@pytest.mark.parametrize(("spec", "m", "phase"), [
    (BOTH, Measurement(0, 500.0), "Successful"),
    (BOTH, Measurement(0, 1200.0), "Failed"),
    (BOTH, Measurement(0, 900.0), "Inconclusive"),          # matches neither condition
    (BOTH, Measurement(0, None), "Inconclusive"),           # no data
    (BOTH, Measurement(0, math.nan), "Inconclusive"),       # NaN is no data
    (BOTH, Measurement(0, 500.0, "timeout"), "Error"),      # error wins over a value
    (SUCC_ONLY, Measurement(0, 500.0), "Successful"),
    (SUCC_ONLY, Measurement(0, 900.0), "Failed"),           # Argo: not success → failed
    (SUCC_ONLY, Measurement(0, None), "Inconclusive"),
    (FAIL_ONLY, Measurement(0, 900.0), "Successful"),       # Argo: not failure → successful
    (FAIL_ONLY, Measurement(0, 1000.0), "Failed"),
    (FAIL_ONLY, Measurement(0, math.nan), "Inconclusive"),  # no data is never Successful
])
def test_each_measurement_is_classified_as_argo_evaluates_it(spec: GateSpec, m: Measurement,
                                                              phase: str) -> None:
    assert classify(spec, m) == phase


def test_the_failure_condition_wins_when_both_conditions_hold() -> None:
    spec = GateSpec(Q, success_condition="result > 0", failure_condition="result > 10")
    assert classify(spec, Measurement(0, 50.0)) == "Failed"


# --- condition parsing ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "op", "threshold"), [
    ("result < 800", "<", 800.0),
    ("result >= 0.9995", ">=", 0.9995),
    ("  result<=1e3 ", "<=", 1000.0),
    ("result[0] > -2.5", ">", -2.5),
    ("result == 0", "==", 0.0),
    ("result != .5", "!=", 0.5),
])
def test_conditions_parse_into_an_operator_and_a_threshold(text: str, op: str, threshold: float) -> None:
    c = parse_condition(text)
    assert (c.op, c.threshold) == (op, threshold)


@pytest.mark.parametrize("text", [
    "result < 800 and result > 1", "__import__('os').system('true')", "800 > result",
    "result <", "value < 800", "result < nan", "result < inf", "result =< 3", "",
])
def test_a_condition_that_does_not_parse_raises_config_error_naming_it(text: str) -> None:
    with pytest.raises(ConfigError) as exc:
        GateSpec(Q, success_condition=text)
    assert "success_condition" in str(exc.value) and repr(text) in str(exc.value)


def test_a_bad_failure_condition_is_named_as_the_failure_condition() -> None:
    with pytest.raises(ConfigError, match=r"failure_condition: cannot parse condition 'result ~ 3'"):
        GateSpec(Q, success_condition="result < 1", failure_condition="result ~ 3")


@pytest.mark.parametrize(("kwargs", "key"), [
    ({}, "neither given"),
    ({"success_condition": "result < 1", "interval_s": 0}, "interval_s"),
    ({"success_condition": "result < 1", "failure_limit": -1}, "failure_limit"),
    ({"success_condition": "result < 1", "consecutive_error_limit": True}, "consecutive_error_limit"),
    ({"success_condition": "result < 1", "count": 0}, "count"),
    ({"success_condition": "result < 1", "count": 2, "failure_limit": 3}, "count: 2 < failure_limit 3"),
])
def test_invalid_gate_specs_raise_config_error_naming_the_field(kwargs: dict[str, object],
                                                                 key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        GateSpec(Q, **kwargs)  # type: ignore[arg-type]


def test_a_gate_spec_is_frozen_and_has_argo_defaults() -> None:
    spec = GateSpec(Q, success_condition="result < 800")
    assert (spec.interval_s, spec.count, spec.failure_limit, spec.inconclusive_limit,
            spec.consecutive_error_limit) == (60.0, None, 0, 0, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.count = 3  # type: ignore[misc]


def test_a_mapping_builds_a_spec_and_unknown_keys_are_named() -> None:
    spec = gate_spec_from_mapping({"query": Q, "success_condition": "result < 800", "failure_limit": 2})
    assert spec.failure_limit == 2 and spec.success is not None and spec.success.threshold == 800
    with pytest.raises(ConfigError, match=r"gates.yaml: failureLimit: unknown key"):
        gate_spec_from_mapping({"query": Q, "failureLimit": 2}, "gates.yaml")
    with pytest.raises(ConfigError, match=r"g: success_condition: cannot parse"):
        gate_spec_from_mapping({"query": Q, "success_condition": "x"}, "g")


# --- metric phase: the limits -------------------------------------------------------------------

NOTE = GateSpec(Q, success_condition="result < 800", failure_limit=2)  # "every 60 s, 3 failures block"


@pytest.mark.parametrize(("spec", "values", "expected", "message"), [
    # failureLimit: failed > limit
    (SUCC_ONLY, [900.0], "fail", "failed (1) > failureLimit (0)"),
    (NOTE, [900.0, 900.0], "running", ""),
    (NOTE, [900.0, 500.0, 900.0, 500.0, 900.0], "fail", "failed (3) > failureLimit (2)"),
    # failures count in total, not in a row
    (NOTE, [900.0, 500.0, 500.0, 900.0, 500.0], "running", ""),
    # inconclusiveLimit: inconclusive > limit (default 0: the first one ends the gate)
    (BOTH, [500.0, 900.0], "inconclusive", "inconclusive (1) > inconclusiveLimit (0)"),
    (BOTH, [None], "inconclusive", "inconclusive (1) > inconclusiveLimit (0)"),
    (dataclasses.replace(BOTH, inconclusive_limit=1), [900.0, 500.0], "running", ""),
    (dataclasses.replace(BOTH, inconclusive_limit=1), [900.0, None], "inconclusive",
     "inconclusive (2) > inconclusiveLimit (1)"),
    # consecutiveErrorLimit: default 4, the 5th error in a row ends the gate in Error
    (SUCC_ONLY, ["e"] * 4, "running", ""),
    (SUCC_ONLY, ["e"] * 5, "error", "consecutiveErrors (5) > consecutiveErrorLimit (4)"),
    (dataclasses.replace(SUCC_ONLY, consecutive_error_limit=0), ["e"], "error",
     "consecutiveErrors (1) > consecutiveErrorLimit (0)"),
    # count completion: count non-error measurements, none over a limit
    (dataclasses.replace(SUCC_ONLY, count=3), [1.0, 2.0, 3.0], "pass", "count (3) reached"),
    (dataclasses.replace(NOTE, count=3), [1.0, 900.0, 3.0], "pass", "count (3) reached"),
    (dataclasses.replace(NOTE, count=3), [1.0, "e", "e", 2.0], "running", ""),  # errors don't count
    (dataclasses.replace(SUCC_ONLY, count=3), [1.0, 2.0, 900.0], "fail", "failed (1) > failureLimit (0)"),
    # no count: runs until a limit is exceeded or stopped
    (SUCC_ONLY, [1.0] * 50, "running", ""),
    # nothing measured yet
    (SUCC_ONLY, [], "running", ""),
])
def test_the_gate_verdict_follows_argo_limits(spec: GateSpec, values: list[float | None | str],
                                              expected: str, message: str) -> None:
    res = evaluate(spec, ms(*values))
    assert res.verdict == expected
    assert res.state.message == message


def test_consecutive_errors_reset_on_any_non_error_measurement() -> None:
    spec = GateSpec(Q, success_condition="result < 800", failure_limit=10, inconclusive_limit=10)
    for middle in (500.0, 900.0, None):  # Successful, Failed and Inconclusive all reset
        res = evaluate(spec, ms("e", "e", "e", "e", middle, "e", "e", "e", "e"))
        assert res.verdict == "running"
        assert (res.state.error, res.state.consecutive_error) == (8, 4)
    assert evaluate(spec, ms("e", "e", "e", "e", 500.0, *["e"] * 5)).verdict == "error"


def test_measurements_after_completion_are_ignored() -> None:
    res = evaluate(SUCC_ONLY, ms(900.0, 500.0, 500.0))
    assert res.verdict == "fail"
    assert res.phases == ("Failed",)
    assert res.state.ignored == 2 and res.state.count == 1


def test_the_result_lists_one_reason_per_measurement_then_the_completion_message() -> None:
    res = evaluate(BOTH, ms(500.0, "connection refused", 900.0))
    assert res.phases == ("Successful", "Error", "Inconclusive")
    assert res.reasons == (
        "t=0s Successful: value 500 vs result < 800 / result >= 1000",
        "t=60s Error: connection refused",
        "t=120s Inconclusive: value 900 vs result < 800 / result >= 1000",
        "inconclusive (1) > inconclusiveLimit (0)",
    )
    assert (res.state.count, res.state.successful, res.state.inconclusive, res.state.error) == (2, 1, 1, 1)


def test_stopping_a_gate_with_no_limit_exceeded_passes_it() -> None:
    res = evaluate(NOTE, ms(500.0, 900.0, 500.0), stopped=True)
    assert res.verdict == "pass"
    assert res.state.message == "stopped with no limit exceeded"


def test_stopping_a_gate_that_saw_no_data_is_inconclusive_not_a_pass() -> None:
    assert evaluate(NOTE, [], stopped=True).verdict == "inconclusive"
    assert evaluate(NOTE, ms("e", "e"), stopped=True).verdict == "inconclusive"


def test_stopping_a_completed_gate_keeps_its_verdict() -> None:
    failed = evaluate(SUCC_ONLY, ms(900.0)).state
    assert stop(failed) == failed and verdict(stop(failed)) == "fail"


def test_step_refuses_measurements_that_go_back_in_time() -> None:
    s = step(SUCC_ONLY, GateState(), Measurement(100.0, 1.0))
    with pytest.raises(ValueError, match="before the last one"):
        step(SUCC_ONLY, s, Measurement(99.0, 1.0))
    with pytest.raises(ValueError, match="finite"):
        step(SUCC_ONLY, s, Measurement(math.inf, 1.0))


# --- property ---------------------------------------------------------------------------------------

_value = st.one_of(st.none(), st.floats(min_value=0, max_value=2000, allow_nan=False),
                   st.just(math.nan), st.just("err"))


@given(values=st.lists(_value, max_size=12),
       extra=st.lists(st.floats(min_value=1000, max_value=5000), min_size=1, max_size=5),
       positions=st.lists(st.integers(min_value=0, max_value=20), min_size=5, max_size=5),
       failure_limit=st.integers(0, 3), count=st.one_of(st.none(), st.integers(3, 15)))
def test_adding_failing_measurements_never_turns_a_fail_into_a_pass(
        values: list[float | None | str], extra: list[float], positions: list[int],
        failure_limit: int, count: int | None) -> None:
    spec = GateSpec(Q, success_condition="result < 800", failure_condition="result >= 1000",
                    failure_limit=failure_limit, inconclusive_limit=3, count=count)
    base = evaluate(spec, ms(*values))
    if base.verdict != "fail":
        return
    more: list[float | None | str] = list(values)
    for v, p in zip(extra, positions, strict=False):
        more.insert(min(p, len(more)), v)
    assert evaluate(spec, ms(*more)).verdict != "pass"
