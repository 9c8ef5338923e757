"""check_scenario_inputs: every file a cluster scenario reads, the missing ones named at once with their origin."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.config.scenario import parse_scenario
from ebb.errors import InputError
from ebb.sources.traces.external import MAX_LISTED, check_scenario_inputs, scenario_inputs

HEAD = "zones: {a: 8}\ndata_root: traces\nservices:\n"


def svc(name: str, src: str) -> str:
    return f"  - {{name: {name}, namespace: ns, class: order-fulfilment, {src}}}\n"


def test_the_inputs_are_every_file_read_once_and_bundled_traces_none(tmp_path: Path) -> None:
    text = (HEAD + svc("a", "arrivals: {azure: code}") + svc("b", "arrivals: {azure: conv}")
            + svc("c", "arrivals: {bundled: azure-code}") + svc("d", "arrivals: {trace: mine/x.csv}")
            + svc("e", "demand: {gpus: 4}") + svc("f", "demand: {alibaba_gpu: alibaba-gpu-2023/pods.csv}")
            + "generate:\n  - {servegen: servegen/language/m-mid, clients: 2, class: order-fulfilment}\n")
    sc = parse_scenario(text, source="s.yaml", base=tmp_path)
    root = tmp_path / "traces"
    assert scenario_inputs(sc) == (str(root / "azure-llm-2023/AzureLLMInferenceTrace_code.csv"),
                                   str(root / "azure-llm-2023/AzureLLMInferenceTrace_conv.csv"),
                                   str(root / "mine/x.csv"), str(root / "alibaba-gpu-2023/pods.csv"),
                                   str(root / "servegen/language/m-mid"))
    with pytest.raises(InputError) as e:
        check_scenario_inputs(sc)
    msg = str(e.value)
    assert msg.startswith("s.yaml: 5 input(s) not found under data_root") and "\n" not in msg
    assert "mine/x.csv is no dataset Ebb knows: check the path" in msg
    assert "servegen/ is github.com/alibaba/ServeGen data/ (Apache-2.0)" in msg
    (root / "mine").mkdir(parents=True)
    (root / "mine" / "x.csv").write_text("1\n")
    with pytest.raises(InputError, match="4 input"):
        check_scenario_inputs(sc)


def test_a_scenario_of_bundled_traces_has_nothing_to_miss(tmp_path: Path) -> None:
    sc = parse_scenario(HEAD + svc("a", "arrivals: {bundled: azure-conv}"), source="s.yaml", base=tmp_path)
    assert scenario_inputs(sc) == ()
    check_scenario_inputs(sc)


def test_past_the_listed_limit_the_message_says_how_many_more(tmp_path: Path) -> None:
    n = MAX_LISTED + 3
    text = HEAD + "".join(svc(f"s{i}", f"arrivals: {{trace: t{i}.csv}}") for i in range(n))
    with pytest.raises(InputError) as e:
        check_scenario_inputs(parse_scenario(text, source="s.yaml", base=tmp_path))
    assert f"{n} input(s) not found" in str(e.value) and "and 3 more" in str(e.value)
