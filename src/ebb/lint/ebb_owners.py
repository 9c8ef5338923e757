"""The Deployments an Ebb controller of a lint run scales itself (EBB207's third kind of owner).

Read from the parsed files, never from a cluster:

* A container (any mapping with ``command``/``args``) or a bare list of strings (a JSON-patch
  ``value`` replacing a container's args) that runs ``ebb run``: its words (each item split on
  spaces, so ``sh -c "ebb run ..."`` counts) and, for a container, its ``EBB_RUN_*`` environment
  (a flag wins over its variable, as in the CLI). It is Ebb's when ``run`` is a word and the words
  name ``--actuator``, an ``ebb`` executable, or the container's image is ``…/ebb:…``.
* An ``ebb run --config`` settings file (``loop:``/``actuator:`` sections), alone or as a string in
  a ConfigMap's ``data``.
* A fleet file (``workloads:`` entries with ``deployment:``), alone or in a ConfigMap's ``data``.

A controller scales a Deployment itself when it runs ``--mode act`` with ``--actuator kubernetes
--deployment NAME`` (``--namespace``, default ``default``) and neither ``--serve-keda`` nor
``--hand-off`` (those let an HPA or KEDA apply Ebb's number: one writer). A fleet file's entries
count when an act-mode controller of the run reads ``--workloads`` without ``--deployment`` (a
fleet; with ``--deployment`` the file holds workload classes, and a fleet always uses the Kubernetes
actuator), or when the run holds no Ebb controller at all (the file says what Ebb is to
scale; its controller lives elsewhere). Strings in a ConfigMap are parsed with the bounded loader
only when they mention ``workloads:`` or both ``loop:`` and ``actuator:``; one that does not parse
is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ebb.config.yamlio import load_yaml
from ebb.errors import ConfigError
from ebb.lint.core import Document, Path_

__all__ = ["EbbTarget", "ebb_targets", "namespaces_meet"]

_EBB_IMAGE = re.compile(r"(?:^|[/_.-])ebb(?:$|[:@/_.-])", re.IGNORECASE)
_FALSE = {"", "false", "0", "no", "off"}


@dataclass(frozen=True)
class EbbTarget:
    """A Deployment Ebb scales itself, and where the run says so."""

    namespace: str
    deployment: str
    where: str  # file:line
    how: str  # "--deployment", "config file" or "fleet file"


def namespaces_meet(a: str | None, b: str | None) -> bool:
    """Two namespaces may be the same one: equal, or either unset in its file (applied anywhere)."""
    return a is None or b is None or a == b


@dataclass(frozen=True)
class _Controller:
    """One ``ebb run`` found in the run: what it scales, and whether it writes /scale itself."""

    acts: bool  # --mode act and no --serve-keda/--hand-off
    kubernetes: bool
    deployment: str | None
    namespace: str
    fleet: bool  # reads a fleet file: --workloads without --deployment (with it, --workloads is a classes file)
    where: str


def _words(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value] if isinstance(value, str) else []
    return [w for item in items if isinstance(item, (str, int, float)) for w in str(item).split()]


def _flag(words: list[str], name: str) -> str | None:
    for i, w in enumerate(words):
        if w.startswith(name + "="):
            return w.partition("=")[2]
        if w == name:
            nxt = words[i + 1] if i + 1 < len(words) else ""
            return "" if nxt.startswith("--") else nxt  # a bare boolean flag: present, no value
    return None


def _setting(words: list[str], env: dict[str, str], flag: str) -> str | None:
    value = _flag(words, flag)
    return value if value is not None else env.get("EBB_RUN_" + flag[2:].upper().replace("-", "_"))


def _on(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in _FALSE - {""}  # a bare flag ("") is on


def _controller(words: list[str], env: dict[str, str], image: str, where: str) -> _Controller | None:
    if "run" not in words:
        return None
    named = (_flag(words, "--actuator") is not None or any(w.rsplit("/", 1)[-1] == "ebb" for w in words)
             or _EBB_IMAGE.search(image) is not None)
    if not named:
        return None
    mode, actuator = _setting(words, env, "--mode"), _setting(words, env, "--actuator")
    handed = _on(_setting(words, env, "--serve-keda")) or _on(_setting(words, env, "--hand-off"))
    deployment = _setting(words, env, "--deployment")
    fleet = bool(_setting(words, env, "--workloads")) and not deployment  # with --deployment it is a classes file
    return _Controller(mode == "act" and not handed, actuator == "kubernetes", deployment,
                       _setting(words, env, "--namespace") or "default", fleet, where)


def _env(value: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in value if isinstance(value, list) else []:
        if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("value"), (str, int)):
            out[item["name"]] = str(item["value"])
    return out


def _walk(data: Any) -> Iterator[tuple[Path_, Any]]:
    """Every (path, value) of ``data`` in document order, with an explicit stack (no recursion whatever the depth)."""
    stack: list[tuple[Path_, Any]] = [((), data)]
    while stack:
        here, value = stack.pop()
        yield here, value
        if isinstance(value, dict):
            stack.extend((here + (k,), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((here + (i,), value[i]) for i in range(len(value) - 1, -1, -1))


def _where(doc: Document, path: Path_) -> str:
    return f"{Path(doc.path).name}:{doc.line_of(path)}"


def _settings_controller(data: dict[str, Any], where: str) -> _Controller | None:
    """An ``ebb run --config`` file: sections ``loop``, ``actuator``, ``policy`` (keys as the flags)."""
    loop, actuator, policy = data.get("loop"), data.get("actuator"), data.get("policy")
    if not isinstance(loop, dict) or not isinstance(actuator, dict):
        return None
    handed = bool(actuator.get("serve_keda")) or actuator.get("hand_off") is True
    deployment = actuator.get("deployment") if isinstance(actuator.get("deployment"), str) else None
    namespace = actuator.get("namespace")
    return _Controller(loop.get("mode") == "act" and not handed, actuator.get("actuator") == "kubernetes", deployment,
                       namespace if isinstance(namespace, str) and namespace else "default",
                       isinstance(policy, dict) and bool(policy.get("workloads")) and not deployment, where)


def _fleet(data: dict[str, Any], where: str) -> list[EbbTarget]:
    out = []
    entries = data.get("workloads")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("deployment"), str):
            ns = entry.get("namespace")
            out.append(EbbTarget(ns if isinstance(ns, str) and ns else "default", entry["deployment"], where,
                                 "fleet file"))
    return out


def _embedded(doc: Document) -> Iterator[tuple[dict[str, Any], str]]:
    """YAML files held as strings in a ConfigMap's ``data`` that may be a fleet or settings file."""
    data = doc.get("data") if doc.get("kind") == "ConfigMap" else None
    for key, text in data.items() if isinstance(data, dict) else []:
        if not isinstance(text, str) or not ("workloads:" in text or ("loop:" in text and "actuator:" in text)):
            continue
        try:
            parsed = load_yaml(text, f"{doc.path} data.{key}")
        except ConfigError:
            continue
        if isinstance(parsed, dict):
            yield parsed, _where(doc, ("data", key))


def _scan(doc: Document, controllers: list[_Controller], fleets: list[EbbTarget]) -> None:
    if isinstance(doc.data, dict) and doc.kind in ("yaml", "k8s"):
        for mapping, where in [(doc.data, _where(doc, ()))] + list(_embedded(doc)):
            found = _settings_controller(mapping, where)
            if found:
                controllers.append(found)
            fleets.extend(_fleet(mapping, where))
    for path, value in _walk(doc.data):
        if isinstance(value, dict) and ("args" in value or "command" in value):
            words = _words(value.get("command")) + _words(value.get("args"))
            image = str(value.get("image") or "")
            found = _controller(words, _env(value.get("env")), image, _where(doc, path))
        elif (isinstance(value, list) and "run" in value and (not path or path[-1] not in ("args", "command"))
              and all(isinstance(v, str) for v in value)):
            found = _controller(_words(value), {}, "", _where(doc, path))
        else:
            continue
        if found:
            controllers.append(found)


def ebb_targets(documents: list[Document]) -> tuple[EbbTarget, ...]:
    """Every Deployment an Ebb controller of the run scales itself (module docstring), in file order."""
    controllers: list[_Controller] = []
    fleets: list[EbbTarget] = []
    for doc in documents:
        if doc.kind in ("k8s", "yaml"):
            _scan(doc, controllers, fleets)
    out = [EbbTarget(c.namespace, c.deployment, c.where, "--deployment") for c in controllers
           if c.acts and c.kubernetes and c.deployment]
    if not controllers or any(c.acts and c.fleet for c in controllers):
        out += fleets
    return tuple(out)
