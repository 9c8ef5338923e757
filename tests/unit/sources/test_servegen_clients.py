"""ServeGen per client: each client's arrivals per second as one row of a matrix, from a generator of its
own, and the rate table alone for fluid scenarios."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from ebb.errors import InputError, TraceFormatError
from ebb.sources.traces.servegen import load_servegen, load_servegen_clients, servegen_client_rates

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "traces" / "servegen"

THREE = {10: "0,2.0,1.0,Gamma,1.0,0.5\n600,0,0,,0,0\n",
         2: "0,0.5,1.0,Gamma,2.0,1.0\n600,0.5,1.0,Weibull,0.7,1.0\n",
         3: "0,1.0,1.0,Gamma,1.0,1.0\n600,1.0,1.0,Gamma,1.0,1.0\n"}


def _folder(tmp: Path, clients: dict[int, str]) -> Path:
    d = tmp / "m-test"
    d.mkdir(exist_ok=True)
    for cid, text in clients.items():
        (d / f"chunk-{cid}-trace.csv").write_text(text, encoding="utf-8")
    return d


def _shared(sub: str) -> Path:
    path = SHARED / sub
    if not path.is_dir():
        msg = f"{path} is absent (the check on the published ServeGen files needs ../shared)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ../shared: {msg}")
        pytest.skip(msg)
    return path


def test_each_client_gets_a_row_of_arrivals_per_second_in_numeric_id_order(tmp_path: Path) -> None:
    c = load_servegen_clients(_folder(tmp_path, THREE))
    assert c.client_ids == (2, 3, 10) and c.counts.shape == (3, 1200) and c.counts.dtype == np.int32
    assert c.bin_s == 1 and c.start_s == 0.0 and c.end_s == 1200.0
    sums = c.counts.sum(axis=1)
    # ServeGen draws ceil(rate × window) gaps per window and keeps those inside it: n − 1 or n per window.
    assert 598 <= sums[0] <= 600 and 1198 <= sums[1] <= 1200 and 1199 <= sums[2] <= 1200
    assert int(c.counts[2, 600:].sum()) == 0  # client 10 is idle in its second window
    assert not c.counts.flags.writeable and c.series(3).requests == sums[1]


def test_client_c_draws_from_default_rng_of_seed_and_c(tmp_path: Path) -> None:
    d = _folder(tmp_path, {5: "0,0.8,1.0,Gamma,0.5,2.0\n"})
    got = load_servegen_clients(d, seed=7).counts[0]
    rng = np.random.default_rng([7, 5])
    iats = rng.gamma(0.5, 2.0, math.ceil(0.8 * 600))
    t = np.cumsum(iats * (600.0 / iats.sum()))
    want = np.bincount(t[t < 600.0].astype(np.int64), minlength=600)
    assert np.array_equal(got, want)


def test_a_clients_counts_do_not_depend_on_which_other_clients_are_selected(tmp_path: Path) -> None:
    d = _folder(tmp_path, THREE)
    everyone = load_servegen_clients(d, seed=4)
    alone = load_servegen_clients(d, clients=[3], seed=4)
    pair = load_servegen_clients(d, clients=[10, 3], seed=4)
    assert alone.client_ids == (3,) and pair.client_ids == (3, 10)
    assert np.array_equal(alone.counts[0], everyone.counts[everyone.row(3)])
    assert np.array_equal(pair.counts, everyone.counts[[1, 2]])
    assert not np.array_equal(load_servegen_clients(d, seed=5).counts, everyone.counts)


def test_the_k_busiest_clients_are_chosen_by_mean_rate_with_ties_to_the_lower_id(tmp_path: Path) -> None:
    d = _folder(tmp_path, {1: "0,1.0,1.0,Gamma,1,1\n", 4: "0,3.0,1.0,Gamma,1,1\n",
                           7: "0,1.0,1.0,Gamma,1,1\n", 9: "0,0.5,1.0,Gamma,1,1\n"})
    assert load_servegen_clients(d, clients=1).client_ids == (4,)
    assert load_servegen_clients(d, clients=2).client_ids == (1, 4)  # 1 and 7 tie: the lower id wins
    assert load_servegen_clients(d, clients=9).client_ids == (1, 4, 7, 9)  # more than there are: all
    assert servegen_client_rates(d, 3).client_ids == (1, 4, 7)


def test_the_busiest_are_ranked_over_the_asked_span_only(tmp_path: Path) -> None:
    d = _folder(tmp_path, {0: "0,5.0,1,Gamma,1,1\n600,0.1,1,Gamma,1,1\n",
                           1: "0,1.0,1,Gamma,1,1\n600,1.0,1,Gamma,1,1\n"})
    assert load_servegen_clients(d, clients=1).client_ids == (0,)
    assert load_servegen_clients(d, clients=1, start_s=600.0).client_ids == (1,)


def test_the_mean_rate_is_the_time_weighted_table_rate_over_the_span_times_the_scale(tmp_path: Path) -> None:
    d = _folder(tmp_path, {0: "0,2.0,1,Gamma,1,1\n600,0,0,,0,0\n1200,4.0,1,Weibull,1,1\n"})
    c = load_servegen_clients(d, start_s=300.0, end_s=1500.0, rate_scale=0.5)
    # 300 s at 2 req/s, 600 s idle, 300 s at 4 req/s, over 1,200 s, halved.
    assert c.mean_rate_rps[0] == pytest.approx((300 * 2.0 + 300 * 4.0) / 1200 * 0.5)
    assert c.counts.shape == (1, 1200) and c.counts.sum() == pytest.approx(c.mean_rate_rps[0] * 1200, abs=3)


def test_bin_s_sums_whole_seconds_and_the_last_bin_is_cut_by_the_span(tmp_path: Path) -> None:
    d = _folder(tmp_path, THREE)
    per_s = load_servegen_clients(d, seed=2)
    per_7 = load_servegen_clients(d, seed=2, bin_s=7)
    assert per_7.counts.shape == (3, math.ceil(1200 / 7)) and per_7.bin_s == 7
    padded = np.pad(per_s.counts, ((0, 0), (0, 7 * per_7.counts.shape[1] - 1200)))
    assert np.array_equal(per_7.counts, padded.reshape(3, -1, 7).sum(axis=2))
    assert per_7.series(2).bin_s == 7.0


@pytest.mark.parametrize(("kwargs", "what"), [
    ({"clients": [2, 99]}, "no chunk file for client"),
    ({"clients": []}, "selects nothing"),
    ({"clients": 0}, "asks for no client"),
    ({"clients": True}, "neither a count"),
    ({"clients": ["2"]}, "must be integers"),
    ({"bin_s": 0}, "bin_s"),
    ({"bin_s": 1.5}, "bin_s"),
    ({"seed": -1}, "seed"),
    ({"rate_scale": 0.0}, "rate_scale"),
    ({"start_s": 500.0, "end_s": 400.0}, "start_s < end_s"),
    ({"start_s": 5000.0}, "past the folder's last window"),
    ({"end_s": 1e12}, "larger bin_s"),
])
def test_a_bad_selection_or_argument_is_refused_naming_the_folder_and_fix(
        tmp_path: Path, kwargs: dict[str, object], what: str) -> None:
    d = _folder(tmp_path, THREE)
    with pytest.raises(InputError, match=what) as err:
        load_servegen_clients(d, **kwargs)  # type: ignore[arg-type]
    assert "m-test" in str(err.value) and "fix:" in str(err.value)


def test_a_malformed_row_in_any_client_file_names_the_file_and_line(tmp_path: Path) -> None:
    d = _folder(tmp_path, {**THREE, 8: "0,1.0,1.0,Gamma,1,1\n600,x,1,Gamma,1,1\n"})
    for call in (lambda: load_servegen_clients(d, clients=[2]), lambda: servegen_client_rates(d)):
        with pytest.raises(TraceFormatError, match="not a number") as err:
            call()
        assert "chunk-8-trace.csv:2:" in str(err.value)


def test_the_rate_table_is_read_on_every_clients_window_grid_without_sampling(tmp_path: Path) -> None:
    d = _folder(tmp_path, {1: "0,2.0,1,Gamma,1,1\n600,0.7,0,,0,0\n900,3.0,1,Weibull,1,1\n",
                           2: "300,1.0,1,Gamma,1,1\n"})
    r = servegen_client_rates(d)
    assert r.client_ids == (1, 2) and r.end_s == 1500.0
    assert r.window_start_s.tolist() == [0.0, 300.0, 600.0, 900.0]
    # Client 1's idle window (no pattern) is 0 whatever its rate cell says; client 2's one window is 300–900 s.
    assert r.rates.tolist() == [[2.0, 2.0, 0.0, 3.0], [0.0, 1.0, 1.0, 0.0]]
    ids, starts, rates, end = servegen_client_rates(d, [2])
    assert ids == (2,) and np.array_equal(starts, r.window_start_s) and rates.tolist() == [[0.0, 1.0, 1.0, 0.0]]


def test_the_published_clients_add_up_to_load_servegens_total() -> None:
    folder = _shared("language/m-large")
    c = load_servegen_clients(folder, end_s=86_400.0, rate_scale=0.05)
    whole = load_servegen(folder, end_s=86_400.0, rate_scale=0.05)
    assert c.counts.shape == (162, 86_400) and c.counts.nbytes == 162 * 86_400 * 4
    # Different generators, the same distribution: the totals agree closely (ServeGen's n per window is
    # ceil(rate × window), the draw only places them), and each client's sum is near its mean rate × span.
    assert c.counts.sum() == pytest.approx(whole.requests, rel=1e-3)
    assert np.allclose(c.counts.sum(axis=1), c.mean_rate_rps * 86_400, rtol=0.02, atol=150)


def test_the_published_rate_table_ranks_the_busiest_as_the_generator_does() -> None:
    folder = _shared("reason/deepseek-r1")
    r = servegen_client_rates(folder)
    assert len(r.client_ids) == 73 and r.rates.shape == (73, 144) and r.end_s == 86_400.0
    # README: deepseek-r1's total rate averages 16.0 req/s and peaks at 42.5 req/s over its 600 s windows.
    total = r.rates.sum(axis=0)
    assert total.mean() == pytest.approx(16.0, rel=0.01) and total.max() == pytest.approx(42.5, rel=0.01)
    top = load_servegen_clients(folder, clients=5, rate_scale=0.1)
    assert top.client_ids == servegen_client_rates(folder, 5).client_ids
    assert np.allclose(top.mean_rate_rps / 0.1, r.rates[[r.client_ids.index(c) for c in top.client_ids]].mean(axis=1))
