"""The external trace files a cluster scenario reads, and where each one comes from when it is missing.

The cluster examples read public traces that Ebb does not ship (their size, and the Alibaba GPU trace's
terms, which allow research or study use only): in the Ebb workspace they sit in ``../shared/data/traces``
(its ``README.md`` gives each file's commit and checksum). :func:`check_scenario_inputs` looks for every
file and folder a parsed scenario will read, before anything is loaded, and raises **one**
:class:`~ebb.errors.InputError` line naming the missing ones (relative to ``data_root``), with the public
repository, path and licence of each dataset in its fix, so a fresh clone learns in one run what to fetch.

Guarantees:

* Read, per service: ``{azure: code|conv}`` → both Azure LLM 2023 files under ``data_root/azure-llm-2023/``
  (the pair is read together, on one clock); ``{trace: F}``, ``{servegen: D}`` and
  ``{alibaba_gpu: F}`` → that path; ``generate:`` → its ServeGen folder. ``{bundled: ...}`` and
  ``{gpus: N}`` read no file. Each path is listed once, in scenario order.
* The datasets of :data:`DATASETS` are known by their folder names (``azure-llm-2023``, ``servegen``,
  ``alibaba-gpu-2023``, ``mooncake-fast25``, as in ``../shared/data/traces``); any other missing path
  is named with "check the path".
* At most :data:`MAX_LISTED` paths are named, then how many more; only existence is checked here (a
  stat per path): what a file holds is the loaders' to judge.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any, Final

from ebb.config.scenario import Scenario
from ebb.errors import InputError

__all__ = ["DATASETS", "MAX_LISTED", "check_scenario_inputs", "scenario_inputs"]

MAX_LISTED: Final = 8
"""Missing inputs named in the message; past that, how many more (the message stays one short line)."""

DATASETS: Final[Mapping[str, tuple[str, str, str]]] = {
    # folder: (repository, its path of the files (the part below the folder appended), licence)
    "azure-llm-2023": ("github.com/Azure/AzurePublicDataset", "data/", "CC-BY 4.0"),
    "servegen": ("github.com/alibaba/ServeGen", "data/", "Apache-2.0"),
    "alibaba-gpu-2023": ("github.com/alibaba/clusterdata", "cluster-trace-gpu-v2023/csv/",
                         "research or study use only, so not redistributed"),
    "mooncake-fast25": ("github.com/kvcache-ai/Mooncake", "FAST25-release/traces/", "Apache-2.0"),
}
"""The public datasets the examples use, by the folder name they have under ``data_root``."""


def scenario_inputs(sc: Scenario) -> tuple[str, ...]:
    """Every file or folder the scenario reads, in scenario order, each once (see the module)."""
    out: dict[str, None] = {}
    for s in sc.services:
        src: Mapping[str, Any] = s.arrivals if s.arrivals is not None else (s.demand or {})
        kind = src.get("kind")
        if kind == "azure":
            for which in ("code", "conv"):
                out[str(sc.data_root / "azure-llm-2023" / f"AzureLLMInferenceTrace_{which}.csv")] = None
        elif kind in ("trace", "servegen", "alibaba_gpu"):
            out[str(src["path"])] = None
    for g in sc.generate:
        out[str(g["path"])] = None
    return tuple(out)


def _shown(path: str, root: Path) -> str:
    """``path`` relative to ``root`` when it lies under it, else as given."""
    rel = os.path.relpath(path, root)
    return path if rel.startswith("..") else rel


def check_scenario_inputs(sc: Scenario) -> None:
    """InputError (one line, naming the scenario) listing every input of ``sc`` that does not exist (the
    first :data:`MAX_LISTED`, then how many more) and, in its fix, where each dataset comes from."""
    missing = [p for p in scenario_inputs(sc) if not os.path.exists(p)]
    if not missing:
        return
    root = Path(os.path.normpath(sc.data_root))
    shown = [_shown(p, root) for p in missing]
    listed = ", ".join(shown[:MAX_LISTED]) + (f" and {len(shown) - MAX_LISTED} more" if len(shown) > MAX_LISTED else "")
    origins: dict[str, None] = {}
    for rel in shown:
        folder = next((part for part in PurePath(rel).parts if part in DATASETS), None)
        if folder is not None:
            repo, prefix, licence = DATASETS[folder]
            origins[f"{folder}/ is {repo} {prefix} ({licence})"] = None
        else:
            origins[f"{rel} is no dataset Ebb knows: check the path"] = None
    raise InputError(f"{len(missing)} input(s) not found under data_root {root}: {listed}", path=sc.source,
                     fix="these traces are external data, not shipped with Ebb: " + "; ".join(origins)
                         + "; put them under data_root (Ebb's workspace keeps them in ../shared/data/traces), or point "
                           "the scenario's data_root: at your copy")
