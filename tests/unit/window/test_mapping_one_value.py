"""LogMapping.bin_of: one value's bin without numpy's per-call costs, the same bin as bin_index."""

from __future__ import annotations

import numpy as np

from ebb.window.mapping import LogMapping


def test_one_value_lands_in_the_bin_the_array_path_gives_it_even_at_the_bin_edges() -> None:
    m = LogMapping()
    rng = np.random.default_rng(0)
    edges = m.gamma ** np.arange(m.key_min - 3, m.key_max + 3, dtype=np.float64)
    xs = np.concatenate([rng.exponential(5.0, 20_000), 10 ** rng.uniform(-9, 11, 20_000), edges,
                         np.nextafter(edges, 0.0), np.nextafter(edges, np.inf),
                         [0.0, -0.0, -1.0, -3.3, 1e-300, 1e300, 1e-6, 1e9]])
    want, _ = m.bin_index(xs)
    assert [m.bin_of(x) for x in xs.tolist()] == want.tolist()
