"""Shared fixtures. ``etcd_endpoint``: a real, throwaway etcd server for the whole test session;
``prometheus_binary_path``: the real Prometheus binary (tests start their own servers with it);
``ledger_url``: a fresh ledger location, once an SQLite file and once a key prefix on the real etcd."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ebb.testing.etcd import ETCD_INSTALL, etcd_binary, local_etcd
from ebb.live.local_prometheus import PROMETHEUS_INSTALL, prometheus_binary


def _binary_or_skip(binary: str | None, name: str, install: str) -> str:
    """The binary's path; skip without it — but fail under CI=true, which must provide it."""
    if binary is None:
        msg = f"{name} binary not found; install it with: {install}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide {name}: {msg}")
        pytest.skip(msg)
    return binary


@pytest.fixture(scope="session")
def etcd_binary_path() -> str:
    """Path of the etcd binary; skipped (failed under CI=true) when it is not installed."""
    return _binary_or_skip(etcd_binary(), "etcd", ETCD_INSTALL)


@pytest.fixture(scope="session")
def prometheus_binary_path() -> str:
    """Path of the prometheus binary; skipped (failed under CI=true) when it is not installed."""
    return _binary_or_skip(prometheus_binary(), "prometheus", PROMETHEUS_INSTALL)


@pytest.fixture(scope="session")
def etcd_endpoint(etcd_binary_path: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a fresh single-node etcd; skipped (failed under CI=true) without the binary."""
    data_dir = tmp_path_factory.mktemp("etcd")
    try:
        server = local_etcd(etcd_binary_path, data_dir, log_path=data_dir.parent / "etcd.log", name="ebb-test")
        url = server.__enter__()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield url
    finally:
        server.__exit__(None, None, None)


@pytest.fixture(params=["sqlite", "etcd"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh ledger for ``open_ledger``: an SQLite file, then a unique prefix on the session's etcd
    (skipped without etcd3gw or the binary; failed under CI=true without the binary)."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    pytest.importorskip("etcd3gw")
    endpoint: str = request.getfixturevalue("etcd_endpoint")
    return f"etcd://{endpoint.removeprefix('http://')}/ledger-{uuid.uuid4().hex}"
