"""Baseline autoscalers the simulator compares against (e.g. a faithful Kubernetes HPA emulator)."""
