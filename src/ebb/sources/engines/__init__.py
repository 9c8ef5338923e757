"""Inference-engine metrics: parse a server's Prometheus exposition and read Ebb's signals from it.

* :mod:`~ebb.sources.engines.exposition` — :func:`parse_exposition` (prometheus_client's parser,
  tolerant of real captures, strict on NaN / negative counts, bounded).
* :mod:`~ebb.sources.engines.profiles` — :data:`PROFILES` (vLLM, SGLang, TGI, llama.cpp, Triton),
  :func:`engine_profile`, custom engines from YAML (:func:`load_engines_file`).
* :mod:`~ebb.sources.engines.reading` — :func:`read_engine` per scrape, :func:`interval` between two.
* :mod:`~ebb.sources.engines.dcgm` — :func:`read_dcgm` and :class:`DcgmSource` for dcgm-exporter.

See docs/engines.md for the profile table, the rules and the YAML format.
"""

from ebb.sources.engines.dcgm import DcgmSource, GpuReading, read_dcgm
from ebb.sources.engines.exposition import MAX_EXPOSITION_BYTES, Exposition, Sample, parse_exposition
from ebb.sources.engines.profiles import (PROFILES, EngineProfile, HistogramSpec, engine_profile,
                                          load_engines_file)
from ebb.sources.engines.reading import (CumulativeHistogram, EngineInterval, EngineReading, LatencyDelta,
                                         interval, read_engine, read_engine_text)

__all__ = [
    "MAX_EXPOSITION_BYTES", "PROFILES", "CumulativeHistogram", "DcgmSource", "EngineInterval", "EngineProfile",
    "EngineReading", "Exposition", "GpuReading", "HistogramSpec", "LatencyDelta", "Sample", "engine_profile",
    "interval", "load_engines_file", "parse_exposition", "read_dcgm", "read_engine", "read_engine_text",
]
