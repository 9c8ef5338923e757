"""L1: sliding-window quantile sketches (1 % relative error, exact forgetting, columnar over series)."""

from __future__ import annotations

from ebb.window.mapping import LogMapping
from ebb.window.sketch import ColumnarSketch
from ebb.window.sliding import SlidingWindow
from ebb.window.stream import windowed_quantiles

__all__ = ["ColumnarSketch", "LogMapping", "SlidingWindow", "windowed_quantiles"]
