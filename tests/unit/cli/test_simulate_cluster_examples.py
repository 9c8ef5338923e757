"""The cluster examples from a fresh clone, with no ``../shared`` beside the repository: those on bundled traces
run; those on external traces stop with exit 2 and one line naming every missing file and where it comes from."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ebb.config.scenario import load_scenario
from ebb.sources.traces.external import check_scenario_inputs

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "cluster"
RUN = "from ebb.cli.main import main; main()"

# what each external example reads, and the repository each dataset comes from
EXTERNAL = {
    "three-classes.yaml": (["azure-llm-2023/AzureLLMInferenceTrace_code.csv", "azure-llm-2023/AzureLLMInferenceTrace_conv.csv",
                            "alibaba-gpu-2023/openb_pod_list_default.csv", "servegen/language/m-large",
                            "servegen/language/m-mid"],
                           ["github.com/Azure/AzurePublicDataset", "github.com/alibaba/clusterdata",
                            "github.com/alibaba/ServeGen"]),
    "servegen-422.yaml": (["servegen/language/m-large", "servegen/language/m-mid", "servegen/language/m-small",
                           "servegen/reason/deepseek-r1", "servegen/multimodal/mm-image"],
                          ["github.com/alibaba/ServeGen"]),
}


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A copy of examples/cluster two folders below ``tmp_path``: the examples' ``../../../shared`` is absent."""
    where = tmp_path / "clone" / "examples" / "cluster"
    shutil.copytree(EXAMPLES, where)
    assert not (tmp_path / "shared").exists()
    return where


def _simulate(scenario: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN, "simulate", "--cluster", str(scenario), "--quiet", "--ledger", "",
                           *extra], capture_output=True, text=True, timeout=300, cwd=scenario.parent, check=False)


def test_every_example_not_listed_here_as_external_reads_bundled_traces_alone(clone: Path) -> None:
    names = sorted(p.name for p in clone.glob("*.yaml"))
    assert set(EXTERNAL) <= set(names) and "lending.yaml" in names
    for name in names:
        if name not in EXTERNAL:
            check_scenario_inputs(load_scenario(clone / name))  # raises, naming the files, if one is external


@pytest.mark.parametrize("name", sorted(EXTERNAL))
def test_an_external_example_without_its_traces_names_each_missing_file_and_its_origin_in_one_line(
        clone: Path, name: str) -> None:
    res = _simulate(clone / name, "--policy", "ebb")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and res.stdout == "" and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    files, origins = EXTERNAL[name]
    assert f"{len(files)} input(s) not found under data_root" in lines[0]
    assert all(f in lines[0] for f in files), lines[0]
    assert all(o in lines[0] for o in origins) and "not shipped with Ebb" in lines[0]


def test_the_alibaba_pod_list_is_named_as_not_redistributable(clone: Path) -> None:
    res = _simulate(clone / "three-classes.yaml")
    assert "research or study use only" in res.stderr and "cluster-trace-gpu-v2023/csv/" in res.stderr


def test_the_bundled_example_runs_without_shared(clone: Path) -> None:
    res = _simulate(clone / "lending.yaml", "--policy", "static")
    assert res.returncode == 0, res.stderr
    assert "cluster scorecard" in res.stdout
