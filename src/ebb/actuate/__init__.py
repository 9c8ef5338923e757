"""Actuators: the only code that changes the serving fleet (adapters; see :mod:`ebb.actuate.base`)."""
