"""Shared fixtures. ``etcd_endpoint``: a real, throwaway etcd server for the whole test session;
``prometheus_binary_path``: the real Prometheus binary (tests start their own servers with it)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ebb.testing.etcd import ETCD_INSTALL, etcd_binary, local_etcd
from ebb.testing.prometheus import PROMETHEUS_INSTALL, prometheus_binary


@pytest.fixture(scope="session")
def etcd_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a fresh single-node etcd; skipped (failed under CI=true) without the binary."""
    binary = etcd_binary()
    if binary is None:
        msg = f"etcd binary not found; install it with: {ETCD_INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide etcd: {msg}")
        pytest.skip(msg)
    data_dir = tmp_path_factory.mktemp("etcd")
    try:
        server = local_etcd(binary, data_dir, log_path=data_dir.parent / "etcd.log", name="ebb-test")
        url = server.__enter__()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield url
    finally:
        server.__exit__(None, None, None)


@pytest.fixture(scope="session")
def prometheus_binary_path() -> str:
    """Path of the prometheus binary; skipped (failed under CI=true) when it is not installed."""
    binary = prometheus_binary()
    if binary is None:
        msg = f"prometheus binary not found; install it with: {PROMETHEUS_INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide prometheus: {msg}")
        pytest.skip(msg)
    return binary
