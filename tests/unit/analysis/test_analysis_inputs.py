"""The samples ``ebb analyze`` reads: one file keeps its series names, several become nodes by file stem."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ebb.analysis.inputs import load_samples, merge_batches
from ebb.errors import ConfigError
from ebb.model.samples import SampleBatch


def _wide(tmp_path: Path, name: str) -> Path:
    f = tmp_path / name
    f.write_text("util,mem\n1,10\n2,20\n3,30\n")
    return f


def test_one_file_keeps_its_names_and_several_are_prefixed_with_their_stem(tmp_path: Path) -> None:
    one = load_samples([_wide(tmp_path, "a.csv")], None, 1.0, None)
    assert sorted(one.series) == ["mem", "util"] and len(one) == 6
    two = load_samples([_wide(tmp_path, "a.csv"), _wide(tmp_path, "b.csv")], None, 1.0, ["util"])
    assert sorted(two.series) == ["a/util", "b/util"] and len(two) == 6


def test_merging_renumbers_series_and_refuses_a_name_twice() -> None:
    def batch(name: str) -> SampleBatch:
        return SampleBatch(series=(name,), series_idx=np.zeros(2, dtype=np.int64), value=np.ones(2),
                           ts_ns=np.arange(2, dtype=np.int64))
    merged = merge_batches([batch("x"), batch("y")])
    assert merged.series == ("x", "y") and merged.series_idx.tolist() == [0, 0, 1, 1]
    with pytest.raises(ConfigError, match="same series name"):
        merge_batches([batch("x"), batch("x")])
