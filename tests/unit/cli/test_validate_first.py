"""Validate first (issue #18 item 2): every bad flag, path or input stops the command before any work
with exit 2 and one ``error:`` line naming the flag (never a traceback, never a hang).

The table runs the real console entry point in a subprocess with a timeout, so a case that hangs
(``--hpa-sync-s 0`` stepped time by zero; ``--bucket-ms 0.001`` looped 50 million times) fails
instead of stalling the suite. The property test throws invalid numbers at every numeric flag of
``ebb simulate`` in-process.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.errors import EbbError

ENTRY = "from ebb.cli.main import main; main()"
NO_ETCD = "import sys; sys.modules['etcd3gw'] = None; " + ENTRY  # as if 'ebb[etcd]' were not installed
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("validate-first")
    counts = d / "counts.txt"
    counts.write_text("# bin_s=1\n" + "\n".join(str(3 + i % 4) for i in range(120)) + "\n")
    huge_tokens = d / "azure.csv"
    huge_tokens.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                           "2023-11-16 18:15:46.6805900,12345678901234567890123,10\n"
                           "2023-11-16 18:15:47.6805900,100,10\n")
    binary = d / "image.csv"
    binary.write_bytes(bytes(range(256)) * 16)
    util = d / "util.csv"
    util.write_text("t,util_gpu\n" + "".join(f"{i},{i % 7 * 10}\n" for i in range(60)))
    month = d / "month.csv"  # 30 days of 300 s samples
    month.write_text("t,util_gpu\n" + "".join(f"{t},{t // 300 % 7 * 10}\n" for t in range(0, 30 * 86_400 + 1, 300)))
    return {"counts": str(counts), "huge_tokens": str(huge_tokens), "binary": str(binary), "util": str(util),
            "month": str(month), "dir": str(d)}


def _sim(f: dict[str, str], *extra: str) -> list[str]:
    return ["simulate", "--quiet", "--trace", f["counts"], "--policy", "hpa,static", "--peak-replicas", "2",
            "--ledger", "", *extra]


def _bursts(path: str, *extra: str) -> list[str]:
    return ["bursts", "--input", path, "--threshold", "55", "--min-duration-ms", "200", *extra]


# (id, argv builder, text the one line must contain, entry code)
Argv = Callable[[dict[str, str]], list[str]]
CASES: list[tuple[str, Argv, str, str]] = [
    ("slo-ttft-negative", lambda f: _sim(f, "--slo-ttft-ms", "-5"), "--slo-ttft-ms", ENTRY),
    ("slo-e2e-zero", lambda f: _sim(f, "--slo-e2e-ms", "0"), "--slo-e2e-ms", ENTRY),
    ("cold-start-negative", lambda f: _sim(f, "--cold-start-s", "-1"), "--cold-start-s", ENTRY),
    ("cold-start-nan", lambda f: _sim(f, "--cold-start-s", "nan"), "--cold-start-s", ENTRY),
    ("gpu-hour-negative", lambda f: _sim(f, "--gpu-hour-usd", "-1"), "--gpu-hour-usd", ENTRY),
    ("scrape-interval-zero", lambda f: _sim(f, "--scrape-interval-s", "0"), "--scrape-interval-s", ENTRY),
    ("hpa-sync-zero-hung", lambda f: _sim(f, "--hpa-sync-s", "0"), "--hpa-sync-s", ENTRY),
    ("metric-resolution-zero", lambda f: _sim(f, "--metric-resolution-s", "0"), "--metric-resolution-s", ENTRY),
    ("kubelet-resolution-zero", lambda f: _sim(f, "--kubelet-resolution-s", "0"), "--kubelet-resolution-s", ENTRY),
    ("fault-slowdown-zero", lambda f: _sim(f, "--fault-slowdown", "0"), "--fault-slowdown", ENTRY),
    # The bundled trace x1e9 is 10^13 requests (41.8 TiB): refused by the request cap, nothing allocated.
    ("load-scale-1e9", lambda f: ["simulate", "--quiet", "--ledger", "", "--policy", "static", "--load-scale", "1e9"],
     "--load-scale", ENTRY),
    # The tier is checked before the trace is read: the trace given here does not even exist.
    ("tier-reserve-below-1", lambda f: _sim(f, "--trace", "/nonexistent/t.csv", "--tier", "asleep:reserve=0.5"),
     "reserve must be in [1, 100]", ENTRY),
    ("trace-23-digit-tokens", lambda f: _sim(f, "--trace", f["huge_tokens"]), "ContextTokens", ENTRY),
    # Output paths are checked before the trace is read: the trace given here does not even exist.
    ("report-dir-missing", lambda f: _sim(f, "--trace", "/nonexistent/t.csv", "--report",
                                          f"{f['dir']}/does/not/exist.html"), "--report", ENTRY),
    ("json-dir-missing", lambda f: _sim(f, "--trace", "/nonexistent/t.csv", "--json",
                                        f"{f['dir']}/does/not/exist.json"), "--json", ENTRY),
    ("ledger-dir-missing", lambda f: _sim(f, "--trace", "/nonexistent/t.csv")[:-2] + [
        "--ledger", f"{f['dir']}/does/not/l.sqlite"], "--ledger", ENTRY),
    ("ledger-not-sqlite", lambda f: _sim(f, "--trace", "/nonexistent/t.csv")[:-2] + ["--ledger", f["util"]],
     "--ledger", ENTRY),
    ("etcd-ledger-unreachable", lambda f: _sim(f, "--trace", "/nonexistent/t.csv")[:-2] + [
        "--ledger", "etcd://127.0.0.1:1/ebb"], "--ledger", ENTRY),
    ("etcd-extra-missing", lambda f: _sim(f, "--trace", "/nonexistent/t.csv")[:-2] + [
        "--ledger", "etcd://127.0.0.1:2379"], "pip install 'ebb[etcd]'", NO_ETCD),
    ("bursts-binary-file", lambda f: _bursts(f["binary"]), "cannot read as CSV", ENTRY),
    ("bursts-bucket-zero", lambda f: _bursts(f["util"], "--bucket-ms", "0"), "--bucket-ms", ENTRY),
    ("bursts-bucket-tiny-hung", lambda f: _bursts(f["util"], "--bucket-ms", "0.001"), "--bucket-ms", ENTRY),
    ("bursts-30-days-at-100ms-hung", lambda f: _bursts(f["month"], "--bucket-ms", "100"), "--bucket-ms", ENTRY),
    ("demo-live-negative-minutes", lambda f: ["demo", "--live", "--minutes", "-1", "--workdir",
                                              f"{f['dir']}/live", "--report", f"{f['dir']}/live.html"],
     "--minutes", ENTRY),
    ("demo-live-bad-tier-key", lambda f: ["demo", "--live", "--tier", "asleep:wake=2", "--workdir",
                                          f"{f['dir']}/live", "--report", f"{f['dir']}/live.html"],
     "'wake=2' is not one of wake_s, max, ttl_s", ENTRY),
    ("demo-live-negative-warmup", lambda f: ["demo", "--live", "--warmup-s", "-1", "--workdir",
                                             f"{f['dir']}/live", "--report", f"{f['dir']}/live.html"],
     "--warmup-s", ENTRY),
    ("demo-live-snapshot-tier-on-llamacpp", lambda f: ["demo", "--live", "--tier", "snapshot", "--engine", "llamacpp",
                                              "--workdir", f"{f['dir']}/live", "--report", f"{f['dir']}/live.html"],
     "--tier", ENTRY),
]


def _run(code: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *argv], check=False, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env=env)


@pytest.mark.parametrize(("build", "needle", "code"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_flag_or_input_exits_2_with_one_line_naming_it(files: dict[str, str], build: Argv, needle: str,
                                                             code: str) -> None:
    res = _run(code, build(files))
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr
    assert needle in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    if lines[0].startswith("error:"):  # an Ebb error: exactly one line
        assert len(lines) == 1, res.stderr


def test_the_live_demo_refuses_before_creating_its_workdir(tmp_path: Path) -> None:
    res = _run(ENTRY, ["demo", "--live", "--minutes", "nan", "--workdir", str(tmp_path / "live"),
                       "--report", str(tmp_path / "r.html")])
    assert res.returncode == 2 and "--minutes" in res.stderr, res.stderr
    assert not (tmp_path / "live").exists()


_BOOM = ("import ebb.cli.simulate as s\n"
         "def boom(*a, **k):\n    raise {exc}\n"
         "s.compare = boom\n" + ENTRY)


def test_an_unexpected_exception_is_one_internal_error_line(files: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "EBB_DEBUG"}
    res = _run(_BOOM.format(exc='RuntimeError("boom\\nsecond line")'), _sim(files), env)
    assert res.returncode == 2
    assert res.stderr.strip() == ("error: internal error: RuntimeError: boom second line "
                                  "(set EBB_DEBUG=1 for the traceback; please report it)")


def test_ebb_debug_shows_the_traceback_of_an_internal_error(files: dict[str, str]) -> None:
    res = _run(_BOOM.format(exc='RuntimeError("boom")'), _sim(files), {**os.environ, "EBB_DEBUG": "1"})
    assert res.returncode == 2
    assert "Traceback" in res.stderr and "error: internal error: RuntimeError: boom" in res.stderr


def test_ctrl_c_exits_130_quietly(files: dict[str, str]) -> None:
    res = _run(_BOOM.format(exc="KeyboardInterrupt"), _sim(files))
    assert res.returncode == 130
    assert "Traceback" not in res.stderr and "error" not in res.stderr


# ---- property: any invalid number for a numeric flag of ebb simulate is refused before any work ----

_BAD_FLOAT = st.sampled_from([math.nan, math.inf, -math.inf]) | st.floats(max_value=0.0, allow_nan=False,
                                                                            allow_infinity=False)
_FLOAT_FLAGS = {
    "--slo-ttft-ms": _BAD_FLOAT,
    "--slo-e2e-ms": _BAD_FLOAT,
    "--cold-start-s": st.sampled_from([math.nan, math.inf]) | st.floats(max_value=-1e-9, allow_nan=False),
    "--gpu-hour-usd": st.sampled_from([math.nan, math.inf]) | st.floats(max_value=-1e-9, allow_nan=False),
    "--load-scale": _BAD_FLOAT,
    "--fault-slowdown": _BAD_FLOAT | st.floats(min_value=-1e6, max_value=0.999),
    "--fault-after-s": st.sampled_from([math.nan, math.inf]) | st.floats(max_value=-1e-9, allow_nan=False),
    "--fluid-bin-ms": st.sampled_from([math.nan, math.inf]) | st.floats(max_value=99.9, allow_nan=False)
    | st.floats(min_value=1000.1, allow_nan=False),
}
_INT_FLAGS = {
    "--metric-resolution-s": st.integers(max_value=0) | st.integers(min_value=86_401, max_value=10**30),
    "--scrape-interval-s": st.integers(max_value=0) | st.integers(min_value=86_401, max_value=10**30),
    "--hpa-sync-s": st.integers(max_value=0) | st.integers(min_value=86_401, max_value=10**30),
    "--kubelet-resolution-s": st.integers(max_value=0) | st.integers(min_value=86_401, max_value=10**30),
    "--peak-replicas": st.integers(max_value=0),
    "--seed": st.integers(max_value=-1),
}
_CASE = st.one_of(
    *(st.tuples(st.just(flag), strat.map(repr)) for flag, strat in _FLOAT_FLAGS.items()),
    *(st.tuples(st.just(flag), strat.map(str)) for flag, strat in _INT_FLAGS.items()),
)


@settings(max_examples=40, deadline=None)
@given(case=_CASE)
def test_invalid_numbers_for_simulate_are_refused_first_naming_the_flag(case: tuple[str, str]) -> None:
    flag, value = case
    # The trace does not exist: had the flag not been checked first, the error would name the trace.
    res = CliRunner().invoke(app, ["simulate", "--quiet", "--ledger", "", "--trace", "/nonexistent/t.csv",
                                   f"{flag}={value}"])
    if res.exit_code == 2:  # typer's own usage error (a value it could not parse)
        assert flag in res.output
        return
    # An Ebb error: main() prints it as one line and exits 2.
    assert isinstance(res.exception, EbbError), (res.exit_code, res.output, res.exception)
    message = str(res.exception)
    assert "\n" not in message and flag in message, message
    assert "/nonexistent/t.csv" not in message
