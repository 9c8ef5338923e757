"""The serving stack ``ebb demo --live`` runs on one machine — what a user would otherwise run themselves.

* :mod:`ebb.demo.worker` — an emulated inference worker (``python -m ebb.demo.worker``) whose service
  times follow the calibrated H200 latency model; :mod:`ebb.demo.llamacpp` — real ``llama-server``
  workers instead (the binary, a tiny model, the launcher);
* :mod:`ebb.demo.router` — the least-loaded router with a FIFO queue in front of them (also the
  router ``ebb run --actuator local`` scales behind); :mod:`ebb.demo.stats` — the wire helpers worker
  and router share (the ``/stats`` completion ring, ``/v1/generate`` validation);
* :mod:`ebb.demo.loadgen` — the open-loop load generator replaying a trace;
* :mod:`ebb.demo.local_prometheus` — a throwaway Prometheus server on loopback;
* :mod:`ebb.demo.stack` — ``ebb demo --live`` itself, wiring the above to the agent, the local
  actuator and the controller; :mod:`ebb.demo.report` — what really happened, as a scorecard.

The controller side (what Ebb ships to run against a real fleet) is :mod:`ebb.live`; this package
drives it and sits above it (``.importlinter``: ``cli > demo > live``), so no package below
``ebb.cli`` imports it; :mod:`ebb.actuate.local` only names the worker by its module path to launch it.
"""
