"""Safety gates (SPEC §3.5, note ch.4): pure logic that decides whether a scale-down may continue.

* :mod:`ebb.gates.metrics_gate` — a metrics gate with Argo Rollouts AnalysisRun semantics
  (measurements Successful / Failed / Inconclusive / Error; ``failureLimit``,
  ``inconclusiveLimit``, ``consecutiveErrorLimit``, ``count``).
* :mod:`ebb.gates.canary` — the canary scale-down decision table (:func:`~ebb.gates.canary.decide`),
  which :mod:`ebb.gates.guard` applies after every step.

Everything here is pure: frozen dataclasses in, frozen dataclasses out; stdlib only, no I/O, no
clocks (time is always passed in as seconds). Querying the metric source and applying replica
changes belong to the layers above. See ``docs/gates.md``.
"""
