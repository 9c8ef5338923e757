"""Which models an engine page serves, and the page cut to one of them (see :mod:`ebb.sources.engines.reading`).

A profile's ``model_labels`` (vLLM and SGLang ``model_name``, SGLang before 0.4 ``name``, Triton ``model``)
say which model a series belongs to; a sample's model is its first such label with a non-empty value.

Guarantees:

* :func:`page_models`: the distinct models of the samples of every running name of the profile, sorted
  (``()`` for a profile without model labels, or a page whose running series carry none); a negative
  running sample — a bad series, which reading drops alone — names no model.
* :func:`only_model`: the page without the samples of other models; samples carrying no model label
  (``process_start_time_seconds``, a pod-wide gauge) stay. Families left empty disappear.
* :func:`one_model`: what :func:`~ebb.sources.engines.reading.read_engine` reads — the page as it is when
  no model is asked and it serves at most one; the page cut to ``model`` when asked; an
  :class:`~ebb.errors.InputError` naming the models (at most 8, then how many more) for several models
  and none asked, or for a model the page does not serve.
* :func:`check_model`: :class:`~ebb.errors.ConfigError` for an empty or over-long (> 1,024 characters)
  model, or a model asked of a profile without model labels.
"""

from __future__ import annotations

from ebb.errors import ConfigError, InputError
from ebb.sources.engines.exposition import Exposition, Sample
from ebb.sources.engines.profiles import EngineProfile, parse_selector

__all__ = ["check_model", "one_model", "only_model", "page_models"]

MAX_MODEL_CHARS = 1024
"""Longest model name accepted from a flag (Hugging Face ids are under 100)."""


def _running(expo: Exposition, profile: EngineProfile) -> list[Sample]:
    """The samples of every running name of the profile (label matchers applied)."""
    out: list[Sample] = []
    for text in profile.running:
        sel = parse_selector(text)
        out.extend(s for s in expo.series(sel.name) if sel.matches(s.labels))
    return out


def _model_of(s: Sample, labels: tuple[str, ...]) -> str | None:
    """The model sample ``s`` belongs to: its first model label present (an empty value is no label)."""
    return next((v for k in labels if (v := s.label(k))), None)


def page_models(expo: Exposition, profile: EngineProfile) -> tuple[str, ...]:
    """The models the page's running series carry (every running name of the profile), sorted; () for a
    profile without model labels or a page whose running series carry none."""
    if not profile.model_labels:
        return ()
    # A running gauge below zero is a bad series, dropped alone when the page is read: it names no model
    # (a hostile or broken series must not turn a one-model page into a refused two-model one).
    found = {m for s in _running(expo, profile)
             if s.value >= 0 and (m := _model_of(s, profile.model_labels)) is not None}
    return tuple(sorted(found))


def check_model(profile: EngineProfile, model: str | None) -> None:
    """ConfigError when ``model`` is given for a profile that labels no model, or is empty."""
    if model is None:
        return
    if not model or len(model) > MAX_MODEL_CHARS:
        raise ConfigError(f"--model must name a model (1-{MAX_MODEL_CHARS:,} characters), got {model[:80]!r}")
    if not profile.model_labels:
        raise ConfigError(f"engine {profile.name!r} labels no model on its series, so --model cannot select one "
                          "(fix: drop --model, or add model_labels to the engine in the engines file)")


def only_model(expo: Exposition, profile: EngineProfile, model: str) -> Exposition:
    """``expo`` without the samples of other models (those carrying no model label stay)."""
    labels = profile.model_labels
    samples = {name: kept for name, got in expo.samples.items()
               if (kept := tuple(s for s in got if _model_of(s, labels) in (None, model)))}
    return Exposition(samples=samples, types=expo.types, dropped=expo.dropped, source=expo.source)


def one_model(expo: Exposition, profile: EngineProfile, model: str | None, source: str) -> Exposition:
    """The exposition :func:`~ebb.sources.engines.reading.read_engine` reads for ``model`` (module docstring)."""
    check_model(profile, model)
    models = page_models(expo, profile)
    label = profile.model_labels[0] if profile.model_labels else ""
    if model is None:
        if len(models) > 1:
            shown = ", ".join(repr(m[:120]) for m in models[:8]) + (f" and {len(models) - 8} more" if len(models) > 8
                                                                   else "")
            raise InputError(f"the page serves {len(models)} models ({label}: {shown}); a pod serving several models "
                             "is several workloads and Ebb reads one, never their sum", path=source,
                             fix="name the model: --model NAME (ebb probe, ebb agent), or a "
                                 f'{label}="NAME" matcher in the Prometheus selector')
        return expo
    if model not in models:
        shown = ", ".join(repr(m[:120]) for m in models[:8]) or "none"
        raise InputError(f"no running series of model {model[:120]!r} on the page (models there: {shown})",
                         path=source, fix="give --model one of the models the page serves")
    return only_model(expo, profile, model)
