"""``ebb sweep`` on Ray: 12 configurations give byte-identical scorecards on the process pool and on Ray.

3 policies × 4 cold starts on the first 5 minutes of the bundled Azure conversation trace (load
calibrated to a 6-replica peak), once on :class:`~ebb.sim.sweep_backends.LocalPool` (2 workers) and once as
Ray tasks on a local Ray started here with ``ray.init(num_cpus=2)`` and shut down afterwards.
Measured on a 2-CPU machine: 12 s on the pool, 26 s on Ray plus 8 s to start it (Ray's own
processes share the 2 CPUs); under a minute in all.

No warning filter: Ray 2.60 emits no Python warning at import or start-up here (its start-up
notices are log lines). Should a later Ray warn, filter that one warning here, with the reason.

A second test starts the private Ray of ``--ray-address local`` (1 CPU, 2 jobs, 18 s on this 2-CPU machine)
and, while it runs, reads which addresses its processes listen on (``/proc/net/tcp{,6}`` mapped
to the pids through ``/proc/PID/fd``: Linux only) and connects to its GCS from fresh processes
with no token, a wrong token and the sweep's token: only the last gets in.

Without ``ray`` the tests skip, except under ``CI=true``, where they fail with the install hint.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ebb.cli.sweep import run_job
from ebb.sim.sweep import JobOutcome, canonical_json, expand_jobs, load_sweep_spec, results_json
from ebb.sim.sweep_backends import LocalPool, RayBackend, ray_token_auth, run_sweep

pytestmark = pytest.mark.slow

RAY_INSTALL = "pip install 'ebb[ray]'"
SPEC = """\
scenarios: [azure-conv]
policies: ["hpa:target=0.7", "keda:threshold=40", static]
knobs:
  cold_start_s: [10, 30, 60, 120]
  minutes: 5
  peak_replicas: 6
seed: 0
"""


@pytest.fixture(scope="module")
def ray_module() -> Iterator[Any]:
    """The ``ray`` module (skip or, under CI=true, fail without it); any Ray started is shut down after."""
    if importlib.util.find_spec("ray") is None:
        msg = f"ray is not installed; install it with: {RAY_INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide ray: {msg}")
        pytest.skip(msg)
    import ray

    try:
        yield ray
    finally:
        ray.shutdown()


def test_pool_and_ray_give_identical_scorecards(ray_module: Any, tmp_path: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text(SPEC)
    jobs = expand_jobs(load_sweep_spec(spec))
    assert len(jobs) == 12

    # The pool first: an idle local Ray keeps worker processes that would compete for the CPUs.
    t0 = time.perf_counter()
    pool = run_sweep(run_job, jobs, LocalPool(2))
    t_pool = time.perf_counter() - t0
    t0 = time.perf_counter()
    ray_module.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    t_init = time.perf_counter() - t0
    on_ray = run_sweep(run_job, jobs, RayBackend("local", 2))  # uses the Ray started above
    t_ray = time.perf_counter() - t0 - t_init
    print(f"\n12 jobs: process pool (2 workers) {t_pool:.1f} s; Ray (num_cpus=2) {t_ray:.1f} s "
          f"+ {t_init:.1f} s to start it", file=sys.stderr)

    assert ray_module.is_initialized(), "RayBackend must leave a Ray it did not start running"
    assert all(o.error is None for o in pool + on_ray), [o.error for o in pool + on_ray if o.error]
    assert [o.job.id for o in pool] == [o.job.id for o in on_ray] == [j.id for j in jobs]
    assert [canonical_json(o.result) for o in pool] == [canonical_json(o.result) for o in on_ray]
    assert results_json(pool) == results_json(on_ray)
    # Not a degenerate sweep: the cold start changes what the reactive policies cost.
    hpa = {o.job.knob("cold_start_s"): o.result["gpu_hours"] for o in pool
           if o.result is not None and o.job.policy == "hpa:target=0.7"}
    assert len(set(hpa.values())) > 1


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(entry.name))
    out, todo = {root}, [root]
    while todo:
        for kid in children.get(todo.pop(), []):
            if kid not in out:
                out.add(kid)
                todo.append(kid)
    return out


def _with_cmdline(text: str) -> set[int]:
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


def _listening(pids: set[int]) -> list[tuple[int, str, str, int]]:
    """(pid, name, address, port) of every listening TCP socket the processes ``pids`` hold."""
    sockets: dict[str, tuple[str, int]] = {}
    for fam in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{fam}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] != "0A":  # TCP_LISTEN
                continue
            hexip, hexport = f[1].split(":")
            raw = bytes.fromhex(hexip)
            # /proc writes each 32-bit word in host (little-endian) order
            ip = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
            sockets[f[9]] = (str(ip), int(hexport, 16))
    out = []
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in sockets:
                out.append((pid, name, *sockets[target[8:-1]]))
    return sorted(set(out))


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


PROBE = ("import sys; from ray._raylet import GcsClient; "
         "print('connected', GcsClient(address=sys.argv[1]).cluster_id)")


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from /proc (Linux)")
def test_local_ray_listens_on_loopback_only_and_refuses_clients_without_its_token(ray_module: Any,
                                                                                   tmp_path: Path) -> None:
    ray_module.shutdown()  # the test above leaves its Ray up; RayBackend starts its own only if none runs
    env_before = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    spec = tmp_path / "sweep.yaml"
    spec.write_text('scenarios: [azure-conv]\npolicies: ["hpa:target=0.7", static]\n'
                    "knobs: {minutes: 2, peak_replicas: 4}\nseed: 0\n")
    jobs = expand_jobs(load_sweep_spec(spec))
    assert len(jobs) == 2
    seen: dict[str, Any] = {}

    def probe(address: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        home = tempfile.mkdtemp(dir=tmp_path)  # no ~/.ray/auth_token to fall back on
        return subprocess.run([sys.executable, "-c", PROBE, address], env=clean | {"HOME": home} | env,
                              capture_output=True, text=True, timeout=120)

    def while_running(o: JobOutcome) -> None:
        if seen:
            return
        gcs = str(ray_module.get_runtime_context().gcs_address)
        session = ray_module._private.worker._global_node.session_name  # private: no public accessor
        pids = _descendants(os.getpid()) | _with_cmdline(session)
        seen.update(gcs=gcs, pids=pids, listen=_listening(pids), token=os.environ.get("RAY_AUTH_TOKEN"))
        seen["no token"] = probe(gcs, {"RAY_AUTH_MODE": "disabled"})
        seen["wrong token"] = probe(gcs, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64})
        seen["its token"] = probe(gcs, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": seen["token"] or ""})

    out = run_sweep(run_job, jobs, RayBackend("local", 1), on_done=while_running)
    assert all(o.error is None for o in out), [o.error for o in out if o.error]
    assert not ray_module.is_initialized(), "the private Ray is stopped after the sweep"
    assert {k: os.environ.get(k) for k in env_before} == env_before, "the environment is restored"

    host, port = seen["gcs"].rsplit(":", 1)
    assert _is_loopback(host.strip("[]")), seen["gcs"]
    listen = seen["listen"]
    names = {name for _, name, _, _ in listen}
    # The check sees Ray's servers (so it could see them on a wrong address): the GCS port, the raylet.
    assert int(port) in {p for _, _, _, p in listen} and {"gcs_server", "raylet"} <= names, listen
    exposed = [entry for entry in listen if not _is_loopback(entry[2])]
    assert not exposed, f"Ray processes listening beyond loopback: {exposed}"

    # Ray 2.60 (the dev extra's floor) has token auth: the sweep must have used it.
    assert ray_token_auth(ray_module) is not None and seen["token"] and len(seen["token"]) == 64
    for refused in ("no token", "wrong token"):
        res = seen[refused]
        assert res.returncode != 0 and "InvalidAuthToken" in res.stderr, (refused, res.stdout, res.stderr[-400:])
    ok = seen["its token"]
    assert ok.returncode == 0 and ok.stdout.startswith("connected"), ok.stderr[-400:]
