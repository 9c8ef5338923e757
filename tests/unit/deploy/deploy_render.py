"""Render deploy/'s kustomizations the way ``kubectl kustomize`` does, for the subset they use.

* ``render(root)``: a kustomization's ``resources`` (files, and folders rendered in turn) then its
  ``patches`` (files with a ``target`` kind and name, each hitting exactly one document): an RFC 6902
  list, or a strategic-merge ``$patch: delete`` naming its target (the document is dropped).
* ``generate(base, patches_dir)``: the generated ``ebb.yaml`` of an overlay or example inside deploy/
  (kustomize refuses a base that contains its overlay): ``base``'s documents with ``patches_dir``'s
  ``KIND.NAME.yaml`` files applied: an RFC 6902 list, or ``{$patch: delete}`` to drop the document
  (kustomize's own spelling of a deletion); every patch must hit a document.
* ``apply_patch``: RFC 6902 ``add``, ``replace``, ``remove`` and ``test`` (a ``test`` that fails raises,
  so an index-based patch cannot silently edit the wrong argument after the base moves).

The tests compare every render with ``kubectl kustomize`` when kubectl is installed.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.30"
KEYS = {"apiVersion", "kind", "resources", "patches"}


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _pointer(doc: Any, path: str) -> tuple[Any, str | int]:
    *parents, leaf = [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]
    node = doc
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    return node, (leaf if not isinstance(node, list) or leaf == "-" else int(leaf))


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 add / replace / remove / test on a copy of ``doc``; a missing path or failed test raises."""
    out = copy.deepcopy(doc)
    for op in ops:
        node, leaf = _pointer(out, op["path"])
        exists = (leaf in node) if isinstance(node, dict) else (leaf != "-" and 0 <= int(leaf) < len(node))
        if op["op"] == "test":
            assert exists and node[leaf] == op["value"], f"test {op['path']}: {node[leaf] if exists else None!r}"
        elif op["op"] == "replace":
            assert exists, op["path"]
            node[leaf] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            assert exists, op["path"]
            del node[leaf]
        elif op["op"] == "add":
            if isinstance(node, list):
                node.insert(len(node) if leaf == "-" else int(leaf), copy.deepcopy(op["value"]))
            else:
                node[leaf] = copy.deepcopy(op["value"])
        else:
            raise AssertionError(f"patch op {op['op']!r}: teach apply_patch() or use add/replace/remove/test")
    return out


def name_of(d: dict[str, Any]) -> tuple[str, str]:
    return d["kind"], d["metadata"]["name"]


def key(d: dict[str, Any]) -> tuple[str, str, str]:
    return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]


def render(root: Path) -> list[dict[str, Any]]:
    """The documents ``kubectl kustomize root`` prints (order aside)."""
    kust = yaml.safe_load((root / "kustomization.yaml").read_text(encoding="utf-8"))
    assert set(kust) <= KEYS, f"{root}: teach render() {set(kust) - KEYS}"
    docs: list[dict[str, Any]] = []
    for res in kust["resources"]:
        path = root / res
        docs += render(path) if path.is_dir() else load_all(path)
    for p in kust.get("patches", []):
        target = (p["target"]["kind"], p["target"]["name"])
        hits = [i for i, d in enumerate(docs) if name_of(d) == target]
        assert len(hits) == 1, f"{root}: patch {p['path']} hits {len(hits)} documents {target}"
        patch = yaml.safe_load((root / p["path"]).read_text(encoding="utf-8"))
        if isinstance(patch, dict):  # a strategic-merge patch: only kustomize's deletion is used here
            assert patch.get("$patch") == "delete" and name_of(patch) == target, f"{root}: {p['path']}"
            del docs[hits[0]]
        else:
            docs[hits[0]] = apply_patch(docs[hits[0]], patch)
    return docs


def generate(base: Path, patches_dir: Path) -> list[dict[str, Any]]:
    """``base``'s render with ``patches_dir``'s ``KIND.NAME.yaml`` files applied (module docstring)."""
    patches = {tuple(p.name.removesuffix(".yaml").split(".", 1)): yaml.safe_load(p.read_text(encoding="utf-8"))
               for p in sorted(patches_dir.glob("*.yaml"))}
    out, used = [], set()
    for d in render(base):
        target = name_of(d)
        if target in patches:
            used.add(target)
            patch = patches[target]
            if isinstance(patch, dict):
                assert patch == {"$patch": "delete"}, f"{patches_dir}: a mapping patch must be {{$patch: delete}}"
                continue
            d = apply_patch(d, patch)
        out.append(d)
    assert used == set(patches), f"patches without a target in the base: {set(patches) - used}"
    return out


def dump(header: str, docs: list[dict[str, Any]]) -> str:
    return header + yaml.safe_dump_all(docs, sort_keys=False, width=120)


def kubectl_render(root: Path) -> list[dict[str, Any]] | None:
    """``kubectl kustomize root``'s documents, or None when kubectl is not installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    out = subprocess.run([kubectl, "kustomize", str(root)], capture_output=True, text=True, timeout=60, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if name_of(d) == (kind, name)]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def flags(args: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").split("=", 1) for a in args if a.startswith("--") and "=" in a)


def controller_args(docs: list[dict[str, Any]]) -> list[str]:
    args: list[str] = one(docs, "Deployment", "ebb-controller")["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def parse_with_the_cli(args: list[str]) -> dict[str, Any]:
    """``ebb ARGS`` parsed by the real CLI (click raises on an unknown or malformed option)."""
    from typer.main import get_command

    import ebb.cli.main  # noqa: F401  (registers every command)
    from ebb.cli.app import app

    group: Any = get_command(app)
    params: dict[str, Any] = group.commands[args[0]].make_context(args[0], list(args[1:]),
                                                                  resilient_parsing=False).params
    return params
