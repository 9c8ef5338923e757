"""The live controller on the wall clock (``ebb run``): single-workload and fleet controllers (a cycle
in two plain calls, ``propose`` and ``commit``), the rollback channel's execution, pacing, the policy from a
``--policy`` spec, resume after a crash, metrics-gate probes.

The serving stack the demo runs around it (worker, router, load generator, ``ebb demo --live``) is
:mod:`ebb.demo`, which imports this package and never the reverse.
"""
