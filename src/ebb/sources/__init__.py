"""Adapters that read the outside world (trace files, Prometheus, NVML, host) into Ebb records."""
