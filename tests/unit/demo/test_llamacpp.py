"""ebb.demo.llamacpp: finding llama-server, the tiny model, and real llama-server workers under the
local actuator behind the router (scale up, a request through /completion, a drain that fails nothing)."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from ebb.actuate.local import LocalActuator
from ebb.errors import InputError, MissingExtraError
from ebb.demo.llamacpp import LlamaServerLauncher, TinyModel, llama_server_binary, tiny_model, write_tiny_model
from ebb.demo.router import Router
from ebb.model.ids import DecisionId
from ebb.model.observation import ScaleRequest

gguf = pytest.importorskip("gguf")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _field(reader: object, key: str) -> object:
    return reader.fields[key].contents()  # type: ignore[attr-defined]


# ---- finding the binary ------------------------------------------------------------------------

def test_the_binary_comes_from_the_env_then_path_then_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "cache" / "build-llama" / "bin" / "llama-server"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.delenv("EBB_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("EBB_CACHE", str(tmp_path / "cache"))
    assert llama_server_binary() == str(fake)
    on_path = tmp_path / "empty" / "llama-server"
    on_path.parent.mkdir()
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert llama_server_binary() == str(on_path)
    monkeypatch.setenv("EBB_LLAMA_SERVER", str(fake))
    assert llama_server_binary() == str(fake)


def test_a_missing_binary_names_the_build_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EBB_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("EBB_CACHE", str(tmp_path / "nothing"))
    with pytest.raises(MissingExtraError, match="scripts/build-llama-server.sh"):
        llama_server_binary()
    monkeypatch.setenv("EBB_LLAMA_SERVER", str(tmp_path / "no-such-file"))
    with pytest.raises(InputError, match="not an executable file"):
        llama_server_binary()


def test_a_missing_vocab_names_the_build_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EBB_CACHE", str(tmp_path))
    with pytest.raises(MissingExtraError, match="build-llama-server.sh"):
        tiny_model()


# ---- the tiny model ----------------------------------------------------------------------------

def test_the_tiny_model_is_a_llama_gguf_with_the_vocab_s_tokenizer_and_the_same_bytes_each_time(
        llama_model: Path, tmp_path: Path) -> None:
    from ebb.demo.llamacpp import vocab_path
    vocab = gguf.GGUFReader(str(vocab_path()))
    model = gguf.GGUFReader(str(llama_model))
    assert _field(model, "general.architecture") == "llama"
    assert (_field(model, "llama.block_count"), _field(model, "llama.embedding_length"),
            _field(model, "llama.attention.head_count"), _field(model, "llama.feed_forward_length"),
            _field(model, "llama.context_length")) == (2, 64, 4, 128, 512)
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        assert _field(model, key) == _field(vocab, key), key
    names = {t.name: tuple(int(x) for x in t.shape) for t in model.tensors}
    assert names["token_embd.weight"] == (64, 32000) and names["blk.1.ffn_down.weight"] == (128, 64)
    assert len(names) == 3 + 2 * 9
    again = write_tiny_model(tmp_path / "again.gguf", vocab_path(), TinyModel())
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (llama_model, again)]
    assert digest[0] == digest[1]


def test_a_file_that_is_not_a_vocab_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "vocab.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(InputError, match="not a GGUF vocabulary"):
        write_tiny_model(tmp_path / "m.gguf", bad)
    assert not (tmp_path / "m.gguf").exists()


# ---- the launcher ------------------------------------------------------------------------------

def test_the_launcher_asks_for_metrics_slots_one_thread_and_its_own_port(tmp_path: Path) -> None:
    la = LlamaServerLauncher("/bin/llama-server", tmp_path / "m.gguf", tmp_path, slots=3, context_tokens=256)
    launch = la.launch("worker-7", 3)
    args = list(launch.args)
    assert args[0] == "/bin/llama-server" and "--metrics" in args
    opt = {args[i]: args[i + 1] for i in range(1, len(args) - 1) if args[i].startswith("-") and args[i] != "--metrics"}
    assert (opt["-np"], opt["-c"], opt["-t"], opt["--host"], opt["-m"]) == ("3", "768", "1", "127.0.0.1",
                                                                               str(tmp_path / "m.gguf"))
    assert launch.url == f"http://127.0.0.1:{opt['--port']}"
    assert launch.log_path == tmp_path / "worker-7.log"
    assert (la.api, la.health_path) == ("llamacpp", "/health")
    with pytest.raises(ValueError, match="must equal slots"):
        la.launch("worker-8", 4)


# ---- real servers ------------------------------------------------------------------------------

def _complete(url: str, tokens_in: int, tokens_out: int) -> tuple[int, dict[str, object]]:
    body = json.dumps({"input_tokens": tokens_in, "output_tokens": tokens_out}).encode()
    with OPENER.open(urllib.request.Request(url + "/v1/generate", data=body, method="POST"), timeout=120) as r:
        return int(r.status), json.loads(r.read())


def test_real_llama_servers_serve_through_the_router_and_a_drain_fails_nothing(
        llama_server_binary: str, llama_model: Path, tmp_path: Path) -> None:
    launcher = LlamaServerLauncher(llama_server_binary, llama_model, tmp_path, slots=2)
    with Router(queue_timeout_s=60.0) as router, \
            LocalActuator(router, initial=2, max_batch=2, launcher=launcher) as act:
        st = act.wait_ready(timeout_s=30.0)
        assert st.ready_replicas == 2
        workers = router.workers()
        assert [w["api"] for w in workers] == ["llamacpp", "llamacpp"]
        status, answer = _complete(router.url, 40, 8)
        assert status == 200 and answer["input_tokens"] == 40 and answer["output_tokens"] == 8
        assert 0 < float(answer["ttft_ms"]) <= float(answer["e2e_ms"])  # type: ignore[arg-type]
        with OPENER.open(workers[0]["url"] + "/metrics", timeout=10) as r:
            assert b"llamacpp:requests_processing" in r.read()
        # A long request on the newest server, then scale to 1: it is drained, not cut.
        pids = act.pids()
        results: list[tuple[int, dict[str, object]]] = []
        long = [threading.Thread(target=lambda: results.append(_complete(router.url, 20, 400))) for _ in range(4)]
        for t in long:
            t.start()
        deadline = time.monotonic() + 10
        while sum(w["inflight"] for w in router.workers()) < 4:
            assert time.monotonic() < deadline, router.workers()
            time.sleep(0.01)
        res = act.apply(DecisionId("d-1"), ScaleRequest(1))
        assert res.removed == ("worker-1",) and act.state().draining == 1
        for t in long:
            t.join(120)
        assert [s for s, _ in results] == [200] * 4
        assert all(a["output_tokens"] == 400 for _, a in results)
        act.wait_idle(timeout_s=30.0)
        assert not psutil.pid_exists(pids[1]) or psutil.Process(pids[1]).status() == psutil.STATUS_ZOMBIE
        assert [w["name"] for w in router.workers()] == ["worker-0"]
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert os.path.getsize(tmp_path / "worker-0.log") > 0


# ---- the CLI flag --------------------------------------------------------------------------------

def test_demo_engine_must_be_known_and_a_missing_llama_server_says_how_to_build_it(tmp_path: Path) -> None:
    import subprocess
    import sys
    env = {**os.environ, "PATH": str(tmp_path), "EBB_CACHE": str(tmp_path / "cache")}
    env.pop("EBB_LLAMA_SERVER", None)
    for engine, expect in (("vllm", "--engine must be one of ebb, llamacpp"),
                           ("llamacpp", "scripts/build-llama-server.sh")):
        proc = subprocess.run([sys.executable, "-m", "ebb.cli.main", "demo", "--live", "--engine", engine,
                               "--workdir", str(tmp_path / "w"), "--minutes", "0.1"],
                              capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert expect in proc.stderr + proc.stdout and "Traceback" not in proc.stderr


def test_llamacpp_demo_settings_refuse_prometheus_and_requests_that_do_not_fit_a_slot() -> None:
    from ebb.errors import ConfigError
    from ebb.demo.stack import llamacpp_settings
    s = llamacpp_settings()
    assert s.engine == "llamacpp" and s.max_tokens_in is not None and s.max_tokens_out is not None
    assert s.max_tokens_in + s.max_tokens_out <= s.context_tokens
    with pytest.raises(ConfigError, match="reads the agent"):
        llamacpp_settings(source="prometheus")
    with pytest.raises(ConfigError, match="must be one of"):
        llamacpp_settings(engine="tgi")
    with pytest.raises(ConfigError, match="context_tokens"):
        llamacpp_settings(max_tokens_in=500)


def test_the_load_generator_scales_token_counts_up_to_whole_tokens_then_caps_them() -> None:
    import numpy as np

    from ebb.errors import ConfigError
    from ebb.demo.loadgen import LoadGenerator
    from ebb.model.ids import TraceName
    from ebb.model.trace import RequestTrace
    tr = RequestTrace(TraceName("t"), np.array([0.0, 1.0, 2.0]), np.array([0, 17, 5000], dtype=np.int64),
                      np.array([0, 3, 900], dtype=np.int64))
    gen = LoadGenerator("http://127.0.0.1:1", tr, tokens_in_scale=1 / 16, max_tokens_in=256, max_tokens_out=128)
    assert list(gen._tin) == [1, 2, 256] and list(gen._tout) == [1, 3, 128]
    plain = LoadGenerator("http://127.0.0.1:1", tr)
    assert list(plain._tin) == [1, 17, 5000] and list(plain._tout) == [1, 3, 900]
    with pytest.raises(ConfigError, match="token scales"):
        LoadGenerator("http://127.0.0.1:1", tr, tokens_out_scale=0.0)
    with pytest.raises(ConfigError, match="token caps"):
        LoadGenerator("http://127.0.0.1:1", tr, max_tokens_in=0)
