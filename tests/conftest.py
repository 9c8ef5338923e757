"""Shared fixtures. ``etcd_endpoint``: a real, throwaway etcd server for the whole test session;
``prometheus_binary_path``: the real Prometheus binary (tests start their own servers with it);
``ledger_url``: a fresh ledger location, once an SQLite file and once a key prefix on the real etcd;
``llama_server_binary``: llama.cpp's real ``llama-server`` (``scripts/build-llama-server.sh``);
``llama_model``: the tiny random-weight llama GGUF it serves (written once into the cache)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from ebb.testing.etcd import ETCD_INSTALL, etcd_binary, local_etcd
from ebb.errors import MissingExtraError
from ebb.demo.local_prometheus import PROMETHEUS_INSTALL, prometheus_binary

# Hypothesis' 200 ms per-example deadline is a timed test: on a loaded 2-core CI machine it fails
# examples that are merely slow. Speed is measured by bench/, never by a unit test (developers' guide).
settings.register_profile("ebb", deadline=None)
settings.load_profile("ebb")


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


def _missing(msg: str) -> None:
    """Skip with ``msg`` — but fail under CI=true, which must provide it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI must provide it: {msg}")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def chromium_binary_path() -> str:
    """Path of a headless-capable Chromium (Debian's ``chromium``); skipped (failed under CI=true) without it."""
    found = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    return _binary_or_skip(found, "chromium", "apt-get install -y chromium")


@pytest.fixture(scope="session")
def llama_server_binary() -> str:
    """Path of llama-server ($EBB_LLAMA_SERVER, PATH, the build cache); skipped (failed under CI=true) without it."""
    from ebb.demo.llamacpp import llama_server_binary as find
    try:
        return find()
    except MissingExtraError as exc:
        _missing(str(exc))
        raise  # unreachable: skip/fail raise


@pytest.fixture(scope="session")
def llama_model() -> Path:
    """The cached tiny llama GGUF; skipped (failed under CI=true) without gguf or the vocab file."""
    from ebb.demo.llamacpp import tiny_model
    try:
        return tiny_model()
    except MissingExtraError as exc:
        _missing(str(exc))
        raise


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
