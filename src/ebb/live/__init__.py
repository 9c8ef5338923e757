"""The live loop on the wall clock: worker, router, load generator, controller and ``ebb demo --live``."""
