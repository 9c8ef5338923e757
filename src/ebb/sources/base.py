"""The one contract every metric source honours (its fake: :class:`ebb.testing.fakes.StaticSource`).

Guarantees of :class:`MetricSource` (every adapter in :mod:`ebb.sources` keeps them):

* ``read()`` is synchronous: it returns when the samples are in hand (or raises).
* Every sample carries its own timestamp (``SampleBatch.ts_ns``), taken when the value was observed,
  not when the caller asked. Staleness is measured from ``ts_ns`` by the consumer, never assumed.
* ``read()`` has no effect on the observed system and may be called again at any time; it returns
  what is current then. (A source may keep private bookkeeping, e.g. the previous counter sample a
  rate is computed against; that never changes what it observes.)
* Failures are raised as :mod:`ebb.errors` types: :class:`~ebb.errors.SourceUnavailable` when the
  outside world did not answer, :class:`~ebb.errors.InputError` for malformed data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ebb.model.samples import SampleBatch

__all__ = ["MetricSource", "batch_from_columns"]


@runtime_checkable
class MetricSource(Protocol):
    """A source of metric samples: one method, ``read() -> SampleBatch``.

    ``read`` is synchronous; each sample carries its own timestamp (staleness is measured from
    ``ts_ns``); calling it is idempotent in the sense that it never alters what is observed and
    has no side effects visible outside the source.
    """

    def read(self) -> SampleBatch:
        """Return the samples current now, each stamped with its own observation time."""
        ...


def batch_from_columns(
    ts_ns: Sequence[int] | np.ndarray,
    columns: Mapping[str, Sequence[float] | np.ndarray],
) -> SampleBatch:
    """Build a batch where every series shares one timestamp column (a wide table).

    Samples are laid out row-major (all series of row 0, then row 1...) so that the batch stays in
    time order when ``ts_ns`` is sorted.
    """
    ts = np.asarray(ts_ns, dtype=np.int64)
    names = tuple(columns)
    n_rows, n_cols = len(ts), len(names)
    values = np.empty((n_rows, n_cols), dtype=np.float64)
    for j, name in enumerate(names):
        col = np.asarray(columns[name], dtype=np.float64)
        if len(col) != n_rows:
            raise ValueError(f"column {name!r} has {len(col)} values, timestamps have {n_rows}")
        values[:, j] = col
    return SampleBatch(
        series=names,
        series_idx=np.tile(np.arange(n_cols, dtype=np.int64), n_rows),
        value=values.reshape(-1),
        ts_ns=np.repeat(ts, n_cols),
    )
