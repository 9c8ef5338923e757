"""Test support around the demo's Prometheus launcher (:mod:`ebb.demo.local_prometheus`).

:func:`local_prometheus` runs one server for the length of a ``with`` block, configured from scrape
configs or a file-SD job, and stops it cleanly at the end (the fixtures' way of using it).
:func:`write_file_sd_config` writes a config whose job discovers targets from a JSON file refreshed
every 1 s; :func:`write_targets` replaces that file atomically, so a test can add and remove targets
while Prometheus runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ebb.demo.local_prometheus import LocalPrometheus, write_config

__all__ = ["local_prometheus", "write_file_sd_config", "write_targets"]


def write_file_sd_config(path: Path, targets_file: Path, *, job: str = "ebb",
                         scrape_interval_s: float = 1.0) -> Path:
    """Write a config with one job reading its targets from ``targets_file`` (refreshed every 1 s).

    The targets file is created empty when missing; fill it with :func:`write_targets`."""
    if not targets_file.exists():
        write_targets(targets_file, [])
    return write_config(path, [{"job_name": job, "file_sd_configs": [
        {"files": [str(targets_file.resolve())], "refresh_interval": "1s"}]}], scrape_interval_s=scrape_interval_s)


def write_targets(targets_file: Path, targets: Sequence[str],
                  labels: Mapping[str, str] | None = None) -> None:
    """Replace the file-SD targets (``host:port`` strings) atomically (write, then rename)."""
    tmp = targets_file.with_name(targets_file.name + ".tmp")
    tmp.write_text(json.dumps([{"targets": list(targets), "labels": dict(labels or {})}]))
    os.replace(tmp, targets_file)


@contextmanager
def local_prometheus(binary: str, data_dir: Path, *, config_path: Path | None = None,
                     scrape_configs: Sequence[Mapping[str, Any]] | None = None,
                     file_sd_path: Path | None = None, scrape_interval_s: float = 1.0,
                     port: int | None = None, log_path: Path | None = None) -> Iterator[LocalPrometheus]:
    """Run Prometheus until the block ends; yields the started :class:`LocalPrometheus`.

    The config is ``config_path`` as given, else one written to ``data_dir/prometheus.yml`` from
    ``scrape_configs``, else a file-SD job (``ebb``) reading ``file_sd_path`` (default
    ``data_dir/targets.json``)."""
    if config_path is None:
        config_path = data_dir / "prometheus.yml"
        if scrape_configs is not None:
            write_config(config_path, scrape_configs, scrape_interval_s=scrape_interval_s)
        else:
            write_file_sd_config(config_path, file_sd_path or data_dir / "targets.json",
                                 scrape_interval_s=scrape_interval_s)
    server = LocalPrometheus(binary, data_dir, config_path, port=port, log_path=log_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()
