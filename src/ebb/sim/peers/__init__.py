"""Peer autoscalers emulated in the simulator: the LLM-serving autoscalers users pick instead of Ebb.

Each module follows one upstream controller's decision code and defaults (named in its docstring)
and exposes ``KEYS`` (its inline knobs), ``HELP`` (one line for ``ebb simulate --help``) and
``build(item, ctx)``; :mod:`ebb.sim.policies` registers them.
"""
