"""Which built-in engine a metrics page comes from, told by its metric names alone.

Each engine names its series with its own prefix (read from the saved sources of
``../shared/data/engine-metrics``): vLLM ``vllm:``, SGLang ``sglang:``, Hugging Face TGI ``tgi_``,
llama.cpp ``llamacpp:``, Triton ``nv_inference_`` and its TensorRT-LLM backend ``nv_trt_llm_``. No two
prefixes overlap, so one page matches one engine unless a federation mixed several.

Guarantees:

* :func:`detect_engine` is the engine with the most distinct metric names (families, so a histogram's
  ``_bucket``/``_sum``/``_count`` count once) under its prefixes; None when no name has an engine
  prefix, or when two engines tie (a mixed page: the caller asks for ``--engine``). Custom engines of an
  engines file are never guessed: they are named with ``--engine``.
* :func:`looks_like` is ``""`` when the page matches the engine whose names ``profile`` reads (or no
  engine at all), else one clause
  naming the engine it does match and how many of its metrics the page has, for the error a wrong
  ``--engine`` meets.
* Cost: one pass over the page's sample names (a vLLM V1 page has about 100).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from ebb.sources.engines.exposition import Exposition
from ebb.sources.engines.profiles import PROFILES, EngineProfile, parse_selector

__all__ = ["ENGINE_PREFIXES", "detect_engine", "engine_names", "looks_like"]

ENGINE_PREFIXES: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType({
    "vllm": ("vllm:",), "sglang": ("sglang:",), "tgi": ("tgi_",), "llamacpp": ("llamacpp:",),
    "triton": ("nv_inference_", "nv_trt_llm_")})
"""Built-in engine -> the prefixes of its metric names."""
_SUFFIXES: Final = ("_bucket", "_sum", "_count", "_created", "_total")


def _family(name: str) -> str:
    return next((name.removesuffix(x) for x in _SUFFIXES if name.endswith(x)), name)


def engine_names(expo: Exposition) -> dict[str, int]:
    """Built-in engine -> how many distinct metric families of the page carry its prefixes (only engines with one)."""
    families: dict[str, set[str]] = {}
    for name in expo.samples:
        for engine, prefixes in ENGINE_PREFIXES.items():
            if name.startswith(prefixes):
                families.setdefault(engine, set()).add(_family(name))
                break
    return {engine: len(names) for engine, names in families.items()}


def detect_engine(expo: Exposition) -> str | None:
    """The built-in engine whose metric names the page carries most; None when none, or a tie."""
    counts = sorted(engine_names(expo).items(), key=lambda kv: -kv[1])
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


def looks_like(expo: Exposition, profile: EngineProfile) -> str:
    """``"; the page looks like vLLM (52 metrics named vllm:...), not SGLang"`` when it matches another
    built-in engine than ``profile``; ``""`` otherwise."""
    found = detect_engine(expo)
    # a profile reading that engine's own names (the built-in, or a custom one extending it) matches
    if found is None or any(parse_selector(n).name.startswith(ENGINE_PREFIXES[found]) for n in profile.running):
        return ""
    n = engine_names(expo)[found]
    prefixes = " / ".join(f"{x}..." for x in ENGINE_PREFIXES[found])
    return f"; the page looks like {PROFILES[found].title} ({n} metric(s) named {prefixes}), not {profile.title}"
