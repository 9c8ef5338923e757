"""EBB206–EBB208: each fires on its positive fixtures at the right line, stays silent on the near misses,
and holds the precision and recall floor on real manifests it was not written from."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.lint import ALL_RULES, Finding, lint_paths
from ebb.lint.core import Document, Workspace
from ebb.lint.rules_scalers import GPU_UTIL, is_ebb_trigger
from ebb.lint.score import format_score, load_labels, score_against

DATA = Path(__file__).resolve().parents[2] / "data" / "lint"
HELDOUT = DATA / "heldout_scalers"
HELDOUT_EXPECTED = DATA / "heldout_scalers_expected.json"
OURS = {"EBB206", "EBB207", "EBB208"}


def lint(*names: str) -> list[Finding]:
    return lint_paths([DATA / n for n in names], ALL_RULES).findings


def ids_lines(findings: list[Finding]) -> list[tuple[str, str, int]]:
    return [(f.rule_id, Path(f.path).name, f.line) for f in findings]


def _lint_text(tmp_path: Path, text: str) -> list[Finding]:
    (tmp_path / "m.yaml").write_text(text, encoding="utf-8")
    return [f for f in lint_paths([tmp_path], ALL_RULES).findings if f.rule_id in OURS]


@pytest.mark.parametrize(("fixture", "expected"), [
    ("EBB206/bad_hpa.yaml", [("EBB206", "bad_hpa.yaml", 11), ("EBB206", "bad_hpa.yaml", 25)]),
    ("EBB206/bad_keda.yaml", [("EBB206", "bad_keda.yaml", 14), ("EBB206", "bad_keda.yaml", 19)]),
    ("EBB207/bad_two_hpas", [("EBB207", "hpa-queue.yaml", 5), ("EBB207", "hpa-running.yaml", 5)]),
    ("EBB207/bad_hpa_and_keda.yaml", [("EBB207", "bad_hpa_and_keda.yaml", 5), ("EBB207", "bad_hpa_and_keda.yaml", 20)]),
    ("EBB207/bad_ebb_act", [("EBB207", "hpa.yaml", 5)]),
    ("EBB208/bad_no_fallback.yaml", [("EBB208", "bad_no_fallback.yaml", 11)]),
    ("EBB208/bad_static.yaml", [("EBB208", "bad_static.yaml", 6)]),
    ("EBB208/bad_value_metric.yaml", [("EBB208", "bad_value_metric.yaml", 12)]),
])
def test_each_positive_fixture_yields_exactly_the_expected_findings_at_the_right_lines(
        fixture: str, expected: list[tuple[str, str, int]]) -> None:
    assert ids_lines(lint(fixture)) == expected


@pytest.mark.parametrize("fixture", ["EBB206/good.yaml", "EBB207/good_handoff", "EBB207/good_overlay",
                                     "EBB208/good.yaml"])
def test_each_negative_fixture_is_clean(fixture: str) -> None:
    assert lint(fixture) == []


@pytest.mark.parametrize(("name", "is_util"), [
    ("DCGM_FI_DEV_GPU_UTIL", True), ("dcgm_fi_dev_gpu_util_relabelled", True), ("DCGM_FI_DEV_GPU_UTIL_AVG", True),
    ("prometheus.googleapis.com|dcgm_fi_dev_gpu_util|gauge", True), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", True),
    ("gpu_utilization_percent", True), ("GPUUtilization", True), ("nvidia_smi_utilization_gpu_ratio", True),
    ("utilization.gpu", True), ("nvidia_gpu_duty_cycle", True), ("kubernetes.io/container/accelerator/duty_cycle", True),
    ("vllm:num_requests_waiting", False), ("vllm:gpu_cache_usage_perc", False), ("vllm:kv_cache_usage_perc", False),
    ("gpu_memory_utilization", False), ("DCGM_FI_DEV_FB_USED", False), ("DCGM_FI_DEV_MEM_COPY_UTIL", False),
    ("nvidia_gpu_memory_used_bytes", False), ("http_requests_per_second", False),
])
def test_the_gpu_utilisation_pattern_names_utilisation_series_and_not_queue_or_memory_ones(
        name: str, is_util: bool) -> None:
    assert (GPU_UTIL.search(name) is not None) is is_util


def test_the_gpu_utilisation_finding_names_the_scaler_its_target_the_series_and_the_fix() -> None:
    first, second = lint("EBB206/bad_keda.yaml")
    assert first.message.startswith("ScaledObject serving/chat scales Deployment chat on GPU utilisation "
                                    "(dcgm_fi_dev_gpu_util)")
    assert "dcgm-exporter#301" in first.message and "vllm:num_requests_waiting" in first.message
    assert "(nvidia_smi.utilization.gpu)" in second.message  # a metrics-api trigger's valueLocation


@pytest.mark.parametrize(("trigger", "flagged"), [
    ("{type: aws-cloudwatch, metadata: {namespace: AWS/EC2, metricName: GPUUtilization, targetMetricValue: '70'}}",
     True),  # a cloud scaler's metricName is what it reads
    ("{type: prometheus, metadata: {metricName: gpu_utilization, query: 'sum(vllm:num_requests_waiting)'}}",
     False),  # a prometheus trigger's metricName only names the query's result
    ("{type: external, metadata: {scalerAddress: 'gpu-utilization-scaler:9090', queue: jobs}}", False),
])
def test_a_trigger_is_judged_by_what_it_reads_not_by_its_address_or_label(
        tmp_path: Path, trigger: str, flagged: bool) -> None:
    text = ("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: w}\nspec:\n"
            f"  scaleTargetRef: {{name: w}}\n  triggers: [{trigger}]\n")
    assert [f.rule_id for f in _lint_text(tmp_path, text)] == (["EBB206"] if flagged else [])


HPA = ("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {{name: {name}{ns}{extra}}}\nspec:\n"
       "  scaleTargetRef: {{apiVersion: apps/v1, kind: {kind}, name: web}}\n  maxReplicas: 4\n"
       "  behavior: {{scaleDown: {{stabilizationWindowSeconds: 300}}}}\n")
SO = ("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {{name: {name}{ns}{extra}}}\nspec:\n"
      "  scaleTargetRef: {{name: web}}\n{advanced}  triggers: [{{type: cron, metadata: {{timezone: UTC}}}}]\n")


def hpa(name: str, ns: str = "", extra: str = "", kind: str = "Deployment") -> str:
    return HPA.format(name=name, ns=f", namespace: {ns}" if ns else "", extra=extra, kind=kind)


def so(name: str, ns: str = "", extra: str = "", advanced: str = "") -> str:
    return SO.format(name=name, ns=f", namespace: {ns}" if ns else "", extra=extra, advanced=advanced)


@pytest.mark.parametrize(("docs", "reported"), [
    ([hpa("a", "x"), hpa("b", "x")], 2),
    ([hpa("a", "x"), hpa("b")], 2),  # a namespace left out may be x
    ([hpa("a", "x"), hpa("b", "y")], 0),  # two namespaces, two Deployments
    ([hpa("a", "x"), hpa("b", "x", kind="StatefulSet")], 0),  # another kind, another object
    ([hpa("a"), hpa("a")], 0),  # one object written twice
    ([so("web"), hpa("keda-hpa-web")], 0),  # the HPA KEDA makes, by its default name
    ([so("web", advanced="  advanced: {horizontalPodAutoscalerConfig: {name: web-hpa}}\n"), hpa("web-hpa")], 0),
    ([so("web", advanced="  advanced: {horizontalPodAutoscalerConfig: {name: web-hpa}}\n"), hpa("keda-hpa-web")], 2),
    ([so("web", extra=", annotations: {autoscaling.keda.sh/paused: 'true'}"), hpa("a")], 0),  # KEDA scales nothing
    ([so("web"), so("web2")], 2),
])
def test_two_scalers_are_reported_only_when_two_objects_own_one_target(
        tmp_path: Path, docs: list[str], reported: int) -> None:
    assert len([f for f in _lint_text(tmp_path, "---\n".join(docs)) if f.rule_id == "EBB207"]) == reported


@pytest.mark.parametrize(("first", "second", "reported"), [
    ("app/a.yaml", "app/b.yaml", 2),  # one folder: applied together
    ("app/a.yaml", "app/prod/b.yaml", 2),  # a folder and one inside it: a base and its overlay
    ("overlays/dev/a.yaml", "overlays/prod/b.yaml", 0),  # sibling folders: alternatives, never applied together
])
def test_two_scalers_count_only_when_their_folders_are_applied_together(
        tmp_path: Path, first: str, second: str, reported: int) -> None:
    for name, text in ((first, hpa("a", "x")), (second, hpa("b", "x"))):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    found = lint_paths([tmp_path], ALL_RULES).findings
    assert len([f for f in found if f.rule_id == "EBB207"]) == reported


def test_an_ebb_controller_anywhere_in_the_run_counts_against_a_scaler_in_a_sibling_folder(tmp_path: Path) -> None:
    for name in ("controller.yaml", "hpa.yaml"):
        (tmp_path / name.split(".")[0]).mkdir()
        (tmp_path / name.split(".")[0] / name).write_text((DATA / "EBB207" / "bad_ebb_act" / name).read_text())
    assert [f.rule_id for f in lint_paths([tmp_path], ALL_RULES).findings] == ["EBB207"]


def test_an_hpa_beside_ebb_in_act_mode_names_ebb_and_the_keda_hand_off() -> None:
    (f,) = lint("EBB207/bad_ebb_act")
    assert "HPA serving/translate scales Deployment translate, and so does Ebb in act mode (controller.yaml:" in f.message
    assert "--serve-keda" in f.message and "--hand-off" in f.message
    assert "AmbiguousSelector" in lint("EBB207/bad_two_hpas")[0].message


def test_the_cross_file_facts_are_built_once_per_run_and_again_when_files_are_added() -> None:
    ws, built = Workspace(), []

    def build(docs: list[Document]) -> int:
        built.append(len(docs))
        return len(docs)

    assert ws.derived("k", build) == 0 and ws.derived("k", build) == 0 and built == [0]
    ws.documents.append(Document("a.yaml", "yaml", {}, {}, "", ws))
    assert ws.derived("k", build) == 1 and built == [0, 1]


FALLBACK_SO = ("apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {{name: w}}\nspec:\n"
               "  scaleTargetRef: {{name: w}}\n{spec}  triggers:\n    - type: external\n"
               "      metadata: {{scalerAddress: '{address}'}}\n")


@pytest.mark.parametrize(("spec", "address", "severity"), [
    ("", "ebb-keda.ebb-system.svc:9090", "warning"),
    ("  fallback: {failureThreshold: 3}\n", "ebb-keda.ebb-system.svc:9090", "warning"),  # replicas is mandatory
    ("  fallback: {failureThreshold: 3, replicas: 2, behavior: currentReplicasIfLower}\n", "ebb:9090", "warning"),
    ("  fallback: {failureThreshold: 3, replicas: 2, behavior: currentReplicas}\n", "ebb:9090", "info"),
    ("  maxReplicaCount: 8\n  fallback: {failureThreshold: 3, replicas: 8}\n", "ebb:9090", None),  # only grows
    ("  fallback: {failureThreshold: 3, replicas: 100}\n", "ebb:9090", None),  # maxReplicaCount defaults to 100
    ("  fallback: {failureThreshold: 3, replicas: 2, behavior: currentReplicasIfHigher}\n", "ebb:9090", None),
    ("", "webb-scaler:9090", None),  # not a word starting ebb
    ("", "keda-add-ons-http-external-scaler.keda:9090", None),
])
def test_ebbs_scaler_needs_a_fallback_that_never_scales_down(
        tmp_path: Path, spec: str, address: str, severity: str | None) -> None:
    found = _lint_text(tmp_path, FALLBACK_SO.format(spec=spec, address=address))
    assert [f.severity for f in found] == ([severity] if severity else [])


def test_ebbs_scaler_is_known_by_its_address_or_its_workload_class_key() -> None:
    assert is_ebb_trigger({"type": "external", "metadata": {"scalerAddress": "dns:///ebb.ebb-system:9090"}})
    assert is_ebb_trigger({"type": "external-push", "metadata": {"scalerAddress": "x:1", "workloadClass": "batch"}})
    assert not is_ebb_trigger({"type": "prometheus", "metadata": {"scalerAddress": "ebb:9090"}})
    assert not is_ebb_trigger({"type": "external", "metadata": "ebb:9090"})


def test_on_real_manifests_precision_and_recall_are_each_at_least_95_percent() -> None:
    result = lint_paths([HELDOUT], ALL_RULES)
    score = score_against(result, load_labels(HELDOUT_EXPECTED), [HELDOUT])
    table = format_score(score)
    print(f"\n{HELDOUT.name}: {result.files} files\n{table}")
    assert result.errors == []
    for rule in score.rules:
        assert rule.precision is not None and rule.precision >= 0.95, table
        assert rule.recall is not None and rule.recall >= 0.95, table
    assert {r.rule for r in score.rules} >= {"EBB206", "EBB207"}


def test_every_real_manifest_label_carries_a_reason_and_every_file_has_a_source() -> None:
    labels = load_labels(HELDOUT_EXPECTED)
    assert labels and all(lab.reason.strip() for lab in labels)
    sources = (HELDOUT / "SOURCES.md").read_text(encoding="utf-8")
    assert all(f"`{p.name}`" in sources for p in HELDOUT.glob("*.yaml"))
