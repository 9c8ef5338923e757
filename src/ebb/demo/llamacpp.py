"""Real llama.cpp inference servers on this machine: the binary, a tiny model, and a launcher.

* :func:`llama_server_binary` finds ``llama-server``: ``$EBB_LLAMA_SERVER``, then ``llama-server``
  on ``PATH``, then the cache ``${EBB_CACHE:-~/.cache/ebb}/build-llama/bin/llama-server`` that
  ``scripts/build-llama-server.sh`` fills (built from the llama.cpp sources vendored in the PyPI
  sdist ``llama-cpp-python`` 0.3.36: about 10 CPU-minutes, once). Absent:
  :class:`~ebb.errors.MissingExtraError` naming the script.
* :func:`write_tiny_model` writes a llama-architecture GGUF with random weights (seeded, so the same
  bytes every time) and the real 32,000-token SentencePiece vocabulary of
  ``ggml-vocab-llama-spm.gguf``; no download. :func:`tiny_model` writes it once into the cache and
  reuses it. It needs the ``gguf`` package (``pip install 'ebb[llamacpp]'``).
* :class:`LlamaServerLauncher` is the :class:`~ebb.actuate.local.WorkerLauncher` that makes
  :class:`~ebb.actuate.local.LocalActuator` scale ``llama-server`` processes:
  ``--metrics -np SLOTS -c SLOTS×CTX -t 1 --host 127.0.0.1 --port P -m MODEL``, each on a free
  port picked here (bound and released just before: if another process takes it first, the server
  exits, leaves the fleet and the controller starts another), ready when ``GET /health`` answers 200,
  stopped with one SIGTERM (llama-server finishes nothing on SIGTERM, so the actuator drains it
  through the router first; a second SIGTERM makes it exit without cleanup, which can deadlock it),
  SIGKILL after a bounded wait. On Linux a server never outlives the process that started it, even
  one killed with SIGKILL, from whichever thread it was started or scaled: the actuator starts every
  worker tethered (:func:`ebb.actuate.children.spawn`, ``PR_SET_PDEATHSIG`` = SIGKILL). With
  ``sleep_idle_s`` (an asleep tier) every server is started with ``--sleep-idle-seconds N``: it
  unloads its model after N idle seconds and reloads it on the next request that needs it, and the
  launcher's :attr:`~LlamaServerLauncher.sleep_mode` is :class:`~ebb.actuate.sleep_modes.LlamaIdleSleep`
  (docs/tiers.md: the source lines, the wake measured on this machine).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from ebb.actuate.local import Launch
from ebb.actuate.sleep_modes import LlamaIdleSleep
from ebb.errors import InputError, MissingExtraError
from ebb.demo.local_prometheus import free_port

__all__ = ["BUILD_SCRIPT", "LlamaServerLauncher", "TinyModel", "cache_dir", "llama_server_binary", "tiny_model",
           "vocab_path", "write_tiny_model"]

BUILD_SCRIPT: Final = "scripts/build-llama-server.sh"
VOCAB_FILE: Final = "ggml-vocab-llama-spm.gguf"


def cache_dir() -> Path:
    """``$EBB_CACHE``, else ``~/.cache/ebb`` (where the build script puts the binary and the vocab)."""
    env = os.environ.get("EBB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ebb"


def llama_server_binary() -> str:
    """Path of an executable ``llama-server``: ``$EBB_LLAMA_SERVER``, PATH, then the build cache.

    Raises MissingExtraError with the fix when none is found (and InputError when
    ``$EBB_LLAMA_SERVER`` names something that is not an executable file)."""
    env = os.environ.get("EBB_LLAMA_SERVER")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise InputError("$EBB_LLAMA_SERVER is not an executable file", path=env,
                             fix=f"unset it, or point it at a llama-server binary (bash {BUILD_SCRIPT} builds one)")
        return env
    found = shutil.which("llama-server")
    if found:
        return found
    cached = cache_dir() / "build-llama" / "bin" / "llama-server"
    if os.access(cached, os.X_OK):
        return str(cached)
    raise MissingExtraError(f"llama-server not found ($EBB_LLAMA_SERVER, PATH, {cached}); build it once with "
                            f"`bash {BUILD_SCRIPT}` (about 10 CPU-minutes, cached in {cache_dir()})")


def vocab_path() -> Path:
    """The cached ``ggml-vocab-llama-spm.gguf`` the build script copies out of the sdist."""
    path = cache_dir() / "llama" / VOCAB_FILE
    if not path.is_file():
        raise MissingExtraError(f"{path} is missing; `bash {BUILD_SCRIPT}` copies it from the llama-cpp-python "
                                "sdist (vendor/llama.cpp/models)")
    return path


@dataclass(frozen=True)
class TinyModel:
    """Shape of the random llama model. Defaults: 2 layers, 64 wide, 4 heads, FFN 128, context 512
    (4.3 M parameters, 17 MB in F32, almost all of it the 32,000 × 64 embedding and output)."""

    layers: int = 2
    width: int = 64
    heads: int = 4
    ffn: int = 128
    context_tokens: int = 512
    seed: int = 0


def _gguf() -> Any:
    try:
        import gguf
    except ImportError as exc:
        raise MissingExtraError("writing the tiny llama model needs the gguf package: "
                                "pip install 'ebb[llamacpp]'") from exc
    return gguf


def write_tiny_model(path: Path, vocab: Path, shape: TinyModel = TinyModel()) -> Path:
    """Write a random-weight llama GGUF with ``vocab``'s tokenizer to ``path`` (atomically); returns ``path``.

    Same ``shape`` → same bytes (seeded). The tokenizer fields (model, pre-tokenizer, tokens, scores,
    token types, BOS/EOS/UNK ids, add-BOS/EOS flags) are copied from ``vocab``; InputError when it is
    not a GGUF vocabulary."""
    gguf = _gguf()
    try:
        reader = gguf.GGUFReader(str(vocab))
        fields = reader.fields
        tokens = [bytes(fields["tokenizer.ggml.tokens"].parts[i]).decode("utf-8")
                  for i in fields["tokenizer.ggml.tokens"].data]
        scores = [float(fields["tokenizer.ggml.scores"].parts[i][0]) for i in fields["tokenizer.ggml.scores"].data]
        types = [int(fields["tokenizer.ggml.token_type"].parts[i][0])
                 for i in fields["tokenizer.ggml.token_type"].data]
        model_name = fields["tokenizer.ggml.model"].contents()
        pre = fields["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in fields else None
        ids = {k: int(fields[f"tokenizer.ggml.{k}_token_id"].contents())
               for k in ("bos", "eos", "unknown") if f"tokenizer.ggml.{k}_token_id" in fields}
        flags = {k: bool(fields[f"tokenizer.ggml.add_{k}_token"].contents())
                 for k in ("bos", "eos") if f"tokenizer.ggml.add_{k}_token" in fields}
    except (OSError, ValueError, KeyError, IndexError, UnicodeDecodeError) as exc:
        raise InputError(f"not a GGUF vocabulary: {exc}", path=str(vocab),
                         fix=f"re-run `bash {BUILD_SCRIPT}` to copy {VOCAB_FILE} again") from exc
    n_vocab, d, s = len(tokens), shape.width, shape
    rng = np.random.default_rng(s.seed)

    def w(*dims: int) -> Any:
        return (rng.standard_normal(dims) * 0.02).astype(np.float32)

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_name("ebb-tiny-llama")
    writer.add_context_length(s.context_tokens)
    writer.add_embedding_length(d)
    writer.add_block_count(s.layers)
    writer.add_feed_forward_length(s.ffn)
    writer.add_head_count(s.heads)
    writer.add_head_count_kv(s.heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(d // s.heads)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(0)  # all F32
    writer.add_tokenizer_model(model_name)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    for k, v in ids.items():
        getattr(writer, "add_unk_token_id" if k == "unknown" else f"add_{k}_token_id")(v)
    for k, flag in flags.items():
        getattr(writer, f"add_add_{k}_token")(flag)
    # numpy shapes are ggml's reversed: token_embd is ne = [width, vocab]
    writer.add_tensor("token_embd.weight", w(n_vocab, d))
    writer.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    writer.add_tensor("output.weight", w(n_vocab, d))
    for i in range(s.layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, dtype=np.float32))
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"blk.{i}.{t}.weight", w(d, d))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", w(s.ffn, d))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", w(s.ffn, d))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", w(d, s.ffn))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    os.replace(tmp, path)
    return path


def tiny_model(shape: TinyModel = TinyModel()) -> Path:
    """The cached tiny model for ``shape`` (``$CACHE/llama/tiny-llama-…gguf``), written on first use."""
    name = "tiny-llama.gguf" if shape == TinyModel() else \
        f"tiny-llama-{shape.layers}x{shape.width}-h{shape.heads}-f{shape.ffn}-c{shape.context_tokens}-s{shape.seed}.gguf"
    path = cache_dir() / "llama" / name
    if not path.is_file():
        write_tiny_model(path, vocab_path(), shape)
    return path


@dataclass(frozen=True)
class LlamaServerLauncher:
    """Starts ``llama-server`` workers for :class:`~ebb.actuate.local.LocalActuator` (see the module docstring).

    ``slots`` parallel sequences per server (``-np``; the actuator's ``max_batch`` must equal it so the
    router never sends more than the server runs at once), ``context_tokens`` of KV per slot (``-c`` is
    ``slots × context_tokens``: llama.cpp splits it evenly), ``threads`` CPU threads (``-t``).
    Server logs go to ``log_dir/<name>.log``."""

    binary: str
    model: Path
    log_dir: Path
    slots: int = 4
    context_tokens: int = 512
    threads: int = 1
    api: str = "llamacpp"
    health_path: str = "/health"
    sleep_idle_s: int | None = None
    """``--sleep-idle-seconds``: the server unloads its model after this many idle seconds (a whole
    number ≥ 1, llama.cpp's unit); None: never (no asleep tier)."""

    def __post_init__(self) -> None:
        if self.sleep_idle_s is not None:
            LlamaIdleSleep(self.sleep_idle_s)  # ConfigError naming the bad value

    @property
    def sleep_mode(self) -> LlamaIdleSleep | None:
        """How these servers sleep (an asleep tier's mechanism): by idleness, or not at all without ``sleep_idle_s``."""
        return None if self.sleep_idle_s is None else LlamaIdleSleep(self.sleep_idle_s)

    def launch(self, name: str, max_batch: int) -> Launch:
        if max_batch != self.slots:
            raise ValueError(f"llama-server {name}: max_batch={max_batch} must equal slots={self.slots}")
        port = free_port()
        args = [self.binary, "--metrics", "-np", str(self.slots), "-c", str(self.slots * self.context_tokens),
                "-t", str(self.threads), "--host", "127.0.0.1", "--port", str(port), "-m", str(self.model),
                "--no-webui"]
        if self.sleep_idle_s is not None:
            args += ["--sleep-idle-seconds", str(self.sleep_idle_s)]
        return Launch(tuple(args), url=f"http://127.0.0.1:{port}", log_path=self.log_dir / f"{name}.log")
