"""The simulator: real traces replayed on a virtual clock through the same decision code as the live loop.

Request-level and fluid engines over one replica lifecycle, the peer autoscalers (each faithful to
its upstream code), the oracle, scorecards and judgement, cluster scenarios (many services on one
GPU pool, :mod:`ebb.sim.cluster`) and sweeps. It never imports an adapter, the live loop or the demo.
"""
