"""Ebb's own telemetry: OpenTelemetry traces per decision cycle, structured logs, Prometheus metrics.

Telemetry never changes behaviour: every function here swallows exporter failures and returns."""
