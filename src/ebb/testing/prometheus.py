"""Test support around the demo's Prometheus launcher (:mod:`ebb.live.local_prometheus`).

:func:`local_prometheus` runs one server for the length of a ``with`` block, configured from scrape
configs or a file-SD job, and stops it cleanly at the end (the fixtures' way of using it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ebb.live.local_prometheus import LocalPrometheus, write_config, write_file_sd_config

__all__ = ["local_prometheus"]


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
