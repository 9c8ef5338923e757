"""Fuzz the Alibaba GPU 2023 readers (issue 17): the pod list, and the series built from what it accepts,
and the node list.

Inputs are valid seed files (built here, so the fuzz pass needs no outside files) with one to six
byte-level mutations from the shared engine (hostile tokens — NaN/inf, integers past int64 and past
4,300 digits, huge exponents, NUL, BOMs, CRLF, quotes, long text — inserted, bytes flipped, ranges
deleted or duplicated, truncation, gzip wrapping and cutting), plus random bytes. The property: the
reader returns columns that keep :mod:`ebb.sources.traces.alibaba_gpu`'s rules (times in range and in
order, GPUs within bounds) and the demand and job series built from them are finite and non-negative —
or an :class:`~ebb.errors.EbbError` of one line is raised; never anything else. Budgets are fixed
(``max_examples``), inputs derandomized, and each input has a 2 s deadline.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebb.errors import EbbError
from ebb.sources.traces.alibaba_gpu import (
    MAX_GPUS_PER_POD,
    MAX_TIME_S,
    gpu_demand_series,
    gpus_per_model,
    job_arrivals,
    load_alibaba_gpu_pods,
)

from mutations import append, byte, delete_run, duplicate, insert, mutate, overwrite, replace, truncate

FUZZ = settings(max_examples=400, deadline=timedelta(seconds=2), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])
NODES = settings(FUZZ, max_examples=150)


def _seed_pods() -> bytes:
    r = random.Random(17)
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
            "scheduled_time"]
    t = 0
    for i in range(30):
        t += r.randint(0, 5000)
        n = r.choice([0, 1, 1, 1, 2, 8])
        milli = 0 if n == 0 else (r.choice([230, 460, 810, 1000]) if n == 1 else 1000)
        phase = r.choice(["Running", "Failed", "Pending", "Succeeded"])
        sched = "" if phase == "Pending" else str(t + r.randint(0, 30))
        dele = str(t + 40 + r.randint(0, 90_000)) if i % 11 else ""
        rows.append(f"openb-pod-{i:04d},{r.choice([4000, 6000, 88000])},{r.choice([12288, 327680])},{n},{milli},"
                    f"{r.choice(['', 'V100M16|V100M32'])},{r.choice(['LS', 'BE', 'BE', 'Burstable'])},{phase},"
                    f"{t},{dele},{sched}")
    return ("\n".join(rows) + "\n").encode()


def _seed_nodes() -> bytes:
    r = random.Random(18)
    rows = ["sn,cpu_milli,memory_mib,gpu,model"]
    for i in range(30):
        g = r.choice([0, 2, 4, 8])
        model = r.choice(["G2", "T4", "V100M32"]) if g else ""
        rows.append(f"openb-node-{i:04d},{r.choice([32000, 96000])},262144,{g},{model}")
    return ("\n".join(rows) + "\n").encode()


TOKENS = [b",", b"\n", b"\r\n", b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b'"', b"-1", b"NaN", b"inf", b"-inf",
          b"1e309", b"1e11", b"99999999999999999999999", str(2**63).encode(), b"9" * 5000, b"0x1F", b"1_000",
          b" ", b"\t", b"", b"1.5", b"BE", b"LS", b"X" * 300, b"nan"]
OPS = [overwrite(byte, 255), insert(TOKENS), delete_run(), duplicate(), truncate(),
       insert([str(n).encode() for n in (0, 10**9, 10**10, 10**10 + 1, 10**18, -5, 1001, 1025, 2**31)]),
       replace(b"\n", b"\r\n", 3), replace(b",", b",,", 2), append(TOKENS)]


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    header, _, body = seed.partition(b"\n")
    if draw(st.integers(0, 3)):  # mostly the rows (the values' rules), keeping the header whole
        data = header + b"\n" + mutate(draw, body, OPS)
    else:
        data = mutate(draw, seed, OPS)
    if draw(st.integers(0, 9)) == 0:  # gzip, sometimes cut short
        packed = gzip.compress(data, mtime=0)
        data = packed[: draw(st.sampled_from([len(packed), 40, 12]))]
    return data


@st.composite
def hostile_field(draw: st.DrawFn, seed: bytes) -> bytes:
    """One to three cells of the seed's rows replaced by hostile values (each value rule, not the CSV shape)."""
    lines = seed.split(b"\n")
    for _ in range(draw(st.integers(1, 3))):
        row = draw(st.integers(1, len(lines) - 2))
        cells = lines[row].split(b",")
        cells[draw(st.integers(0, len(cells) - 1))] = draw(st.sampled_from(TOKENS[7:] + [b"12.5", b"0", b"-0"]))
        lines[row] = b",".join(cells)
    return b"\n".join(lines)


def _one_line(exc: EbbError) -> None:
    assert "\n" not in str(exc) and len(str(exc)) < 1000


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    return tmp_path / "pods.in"


@FUZZ
@given(data=st.one_of(mutated(_seed_pods()), hostile_field(_seed_pods()), st.binary(max_size=400)))
def test_the_pod_reader_returns_valid_columns_or_raises_one_ebb_error_line(
        data: bytes, trace_file: Path, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("alibaba-pods")
    trace_file.write_bytes(data)
    try:
        pods = load_alibaba_gpu_pods(trace_file)
    except EbbError as exc:
        _one_line(exc)
        return
    c, d, s = pods.creation_s, pods.deletion_s, pods.scheduled_s
    assert np.all((c >= 0) & (c <= MAX_TIME_S))
    assert not np.any(d < c) and not np.any(s < c) and not np.any(s > d)  # NaN (missing) compares False
    assert np.all((pods.num_gpu >= 0) & (pods.num_gpu <= MAX_GPUS_PER_POD))
    assert np.all((pods.gpus >= 0) & (pods.gpus <= pods.num_gpu)) and np.all(pods.qos != "")
    bin_s = max(1.0, pods.last_time_s / 500)  # a few hundred bins whatever the span
    try:
        demand = gpu_demand_series(pods, qos=None, bin_s=bin_s)
        jobs = job_arrivals(pods, qos=None, bin_s=bin_s, time_scale=7.0)
    except EbbError as exc:  # e.g. a span of 0 s (every time is 0)
        _one_line(exc)
        return
    assert np.all(np.isfinite(demand.gpus)) and np.all(demand.gpus >= 0)
    assert int(jobs.counts.sum()) == jobs.jobs and np.all(jobs.duration_s >= 0) and np.all(np.diff(jobs.arrival_s) >= 0)


@NODES
@given(data=st.one_of(mutated(_seed_nodes()), hostile_field(_seed_nodes()), st.binary(max_size=300)))
def test_the_node_reader_returns_gpu_totals_or_raises_one_ebb_error_line(
        data: bytes, trace_file: Path, fuzz_tried: Callable[[str], None]) -> None:
    fuzz_tried("alibaba-nodes")
    trace_file.write_bytes(data)
    try:
        totals = gpus_per_model(trace_file)
    except EbbError as exc:
        _one_line(exc)
        return
    assert all(m and 0 < n for m, n in totals.items())
