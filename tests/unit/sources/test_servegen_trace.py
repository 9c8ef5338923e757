"""ServeGen folders: per-client rate windows become arrivals per second, as ServeGen generates them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ebb.errors import InputError, TraceFormatError
from ebb.sources.traces import load_trace
from ebb.sources.traces.servegen import load_servegen

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces" / "servegen"


def _folder(tmp: Path, clients: dict[int, str]) -> Path:
    d = tmp / "m-test"
    d.mkdir(exist_ok=True)
    for cid, text in clients.items():
        (d / f"chunk-{cid}-trace.csv").write_text(text, encoding="utf-8")
    return d


def test_each_active_window_yields_about_rate_times_width_arrivals_inside_it(tmp_path: Path) -> None:
    d = _folder(tmp_path, {0: "0,2.0,1.0,Gamma,1.0,0.5\n600,0,0,,0,0\n1200,1.0,2.0,Weibull,0.5,0.3\n",
                           1: "0,0.5,1.0,Gamma,2.0,1.0\n600,0.5,1.0,Gamma,2.0,1.0\n1200,0,0,,0,0\n"})
    c = load_servegen(d)
    assert len(c.counts) == 1800 and c.bin_s == 1.0
    first, second, third = (int(c.counts[k * 600:(k + 1) * 600].sum()) for k in range(3))
    # ServeGen draws ceil(rate × window) gaps rescaled to the window and keeps those inside it: n − 1 or n.
    assert first in (1200 + 300 - 1, 1200 + 300 - 2, 1200 + 300)
    assert second in (299, 300)
    assert third in (599, 600)


def test_the_same_folder_and_seed_give_the_same_counts_and_a_scale_multiplies_the_rate(tmp_path: Path) -> None:
    d = _folder(tmp_path, {3: "0,4.0,1.5,Gamma,0.4,0.6\n600,4.0,1.5,Weibull,0.6,0.2\n"})
    a, b = load_servegen(d), load_servegen(d)
    assert np.array_equal(a.counts, b.counts)
    assert not np.array_equal(a.counts, load_servegen(d, seed=1).counts)
    assert load_servegen(d, rate_scale=0.5).requests == pytest.approx(a.requests / 2, abs=3)
    assert load_trace(d).requests == a.requests  # a folder is detected as ServeGen


def test_a_span_cuts_windows_and_counts_from_its_start(tmp_path: Path) -> None:
    d = _folder(tmp_path, {0: "0,1.0,1.0,Gamma,1.0,1.0\n600,3.0,1.0,Gamma,1.0,1.0\n"})
    c = load_servegen(d, start_s=600.0, end_s=900.0)
    assert len(c.counts) == 300 and c.requests in (899, 900)


@pytest.mark.parametrize(("text", "what"), [
    ("0,1.0,1.0,Gamma,1.0\n", "6 comma-separated"),
    ("0,abc,1.0,Gamma,1.0,1.0\n", "not a number"),
    ("0,1.0,1.0,Poisson,1.0,1.0\n", "unknown inter-arrival pattern"),
    ("0,-1.0,1.0,Gamma,1.0,1.0\n", "finite and >= 0"),
    ("0,1.0,1.0,Gamma,0,1.0\n", "shape > 0"),
    ("600,1.0,1.0,Gamma,1,1\n0,1.0,1.0,Gamma,1,1\n", "does not follow"),
])
def test_a_malformed_row_names_the_file_and_line(tmp_path: Path, text: str, what: str) -> None:
    d = _folder(tmp_path, {7: text})
    with pytest.raises(TraceFormatError, match=what) as err:
        load_servegen(d)
    assert "chunk-7-trace.csv:" in str(err.value) and "fix" in str(err.value)  # path:line: what (fix: ...)


def test_a_folder_without_chunks_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no chunk"):
        load_servegen(tmp_path)
    with pytest.raises(InputError, match="rate_scale"):
        load_servegen(_folder(tmp_path, {0: "0,1,1,Gamma,1,1\n"}), rate_scale=0.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_bytes_end_in_a_trace_format_error_or_a_series(tmp_path: Path, data: bytes) -> None:
    d = tmp_path / "fuzz"
    d.mkdir(exist_ok=True)
    (d / "chunk-0-trace.csv").write_bytes(data)
    try:
        c = load_servegen(d)
    except (TraceFormatError, InputError):
        return
    assert np.all(c.counts >= 0)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/data/traces/servegen is absent (tests may read it when present)")
def test_day_one_of_m_large_follows_the_published_total_rate() -> None:
    c = load_servegen(SHARED / "language" / "m-large", end_s=86_400.0, rate_scale=0.05)
    per_window = c.counts.reshape(-1, 600).sum(axis=1) / 600.0 / 0.05
    # The README's characterisation: total rate over all clients up to 583 req/s, mean 196 over 14 days.
    assert 50.0 < per_window.mean() < 583.0 and per_window.max() <= 583.0 * 1.02
