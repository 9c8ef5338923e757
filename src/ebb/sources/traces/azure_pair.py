"""The Azure LLM inference 2023 pair — the ``code`` and ``conv`` services — on one shared clock.

Both published files (``AzureLLMInferenceTrace_code.csv`` and ``AzureLLMInferenceTrace_conv.csv``,
Azure/AzurePublicDataset, CC-BY 4.0) were recorded on 2023-11-16 over the same hour (code from 18:17:03.98,
conv from 18:15:46.68, both to about 19:14 — although the upstream description says November 11th), so
they can serve as two services of one cluster at once. :func:`load_azure_services` reads each with
:func:`~ebb.sources.traces.azure.read_azure` and shifts both onto one clock.

Guarantees:

* The shared clock's 0 is the earlier file's first request: that trace starts at 0 s and the other one at
  its real offset (77.3 s for code in the published pair); both carry that instant as ``start_epoch_s``
  (UTC, as :func:`read_azure` takes the files' zoneless timestamps). Offsets are computed from the two
  UTC start times, so each arrival is within a microsecond of its place on the shared clock.
* The files are not required to overlap or to fall on 2023-11-16; the result's ``notes`` give each
  service's offset, so a pair from different days is visible rather than refused.
* Errors are :func:`read_azure`'s: a malformed file raises :class:`~ebb.errors.TraceFormatError` naming it,
  the 1-based line and the fix; a missing or unreadable file raises :class:`~ebb.errors.InputError`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ebb.model.trace import RequestTrace
from ebb.sources.traces.azure import read_azure

__all__ = ["SERVICES", "load_azure_services"]

SERVICES = ("code", "conv")
"""The keys of :func:`load_azure_services`' result, in argument order."""


def load_azure_services(code_path: str | Path, conv_path: str | Path) -> dict[str, RequestTrace]:
    """``{"code": ..., "conv": ...}``: the two Azure LLM 2023 traces with arrivals on one shared clock."""
    traces = {name: read_azure(Path(p)) for name, p in zip(SERVICES, (code_path, conv_path))}
    starts = {name: (t.start_epoch_s or 0.0) for name, t in traces.items()}  # read_azure always sets it
    t0 = min(starts.values())
    out: dict[str, RequestTrace] = {}
    for name, trace in traces.items():
        offset = starts[name] - t0
        out[name] = dataclasses.replace(
            trace, arrival_s=np.asarray(trace.arrival_s + offset, dtype=np.float64), start_epoch_s=t0,
            notes=trace.notes + (f"azure {name} on the pair's shared clock: starts {offset:.3f} s after "
                                 f"the earlier file's first request",))
    return out
