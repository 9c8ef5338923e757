"""Every rule fires on its positive fixtures at the right line and stays silent on its negative ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from ebb.lint import ALL_RULES, Finding, lint_paths
from ebb.lint.rules import parse_duration_s, selector_matches

DATA = Path(__file__).resolve().parents[2] / "data" / "lint"
DOCS = Path(__file__).resolve().parents[3] / "docs" / "lint"


def lint(*names: str) -> list[Finding]:
    return lint_paths([DATA / n for n in names], ALL_RULES).findings


def ids_lines(findings: list[Finding]) -> list[tuple[str, str, int]]:
    return [(f.rule_id, Path(f.path).name, f.line) for f in findings]


@pytest.mark.parametrize(("fixture", "expected"), [
    ("EBB101/bad_no_offload.json", [("EBB101", "bad_no_offload.json", 4)]),
    ("EBB101/bad_offload_unpinned.json", [("EBB101", "bad_offload_unpinned.json", 5)]),
    ("EBB102/bad.json", [("EBB102", "bad.json", 5)]),
    ("EBB103/bad.py", [("EBB103", "bad.py", 8)]),
    ("EBB104/bad_no_grad.py", [("EBB104", "bad_no_grad.py", 10)]),
    ("EBB104/bad_generate.py", [("EBB104", "bad_generate.py", 10), ("EBB104", "bad_generate.py", 21)]),
    ("EBB201/bad.yaml", [("EBB201", "bad.yaml", 9), ("EBB201", "bad.yaml", 20), ("EBB202", "bad.yaml", 20)]),
    ("EBB202/bad.yaml", [("EBB202", "bad.yaml", 15)]),
    ("EBB202/info_missing.yaml", [("EBB202", "info_missing.yaml", 5)]),
    ("EBB203/bad.yaml", [("EBB203", "bad.yaml", 16)]),
    ("EBB204/bad.yaml", [("EBB204", "bad.yaml", 14)]),
    ("EBB205/bad_metrics_server.yaml", [("EBB205", "bad_metrics_server.yaml", 16)]),
    ("EBB205/bad_default.yaml", [("EBB205", "bad_default.yaml", 14)]),
    ("EBB205/prom_bad", [("EBB205", "prometheus.yml", 2)]),
    ("EBB202/keda_bad.yaml", [("EBB202", "keda_bad.yaml", 11)]),
    ("EBB202/keda_info_missing.yaml", [("EBB202", "keda_info_missing.yaml", 5)]),
    ("EBB205/keda_bad", [("EBB205", "scaledobject.yaml", 7)]),
    ("EBB205/keda_bad_default", [("EBB205", "scaledobject.yaml", 12)]),
    ("kcm/EBB202_short", [("EBB202", "hpa.yaml", 5)]),
    ("kcm/EBB205_bad", [("EBB205", "metrics-server.yaml", 16)]),
])
def test_each_positive_fixture_yields_exactly_the_expected_findings_at_the_right_lines(
        fixture: str, expected: list[tuple[str, str, int]]) -> None:
    assert ids_lines(lint(fixture)) == expected


@pytest.mark.parametrize("fixture", [
    "EBB101/good.json", "EBB101/good_stage1.json", "EBB102/good.json", "EBB103/good.py",
    "EBB103/good_cpu_only.py", "EBB104/good_compiled.py", "EBB104/good_cuda_graph.py", "EBB104/good_training.py",
    "EBB104/suppressed.py", "EBB201/good.yaml", "EBB202/good.yaml", "EBB203/good.yaml",
    "EBB204/good_split", "EBB205/good_metrics_server.yaml", "EBB205/prom_good",
    "EBB202/keda_good.yaml", "EBB205/keda_good", "EBB205/keda_good_no_prometheus.yaml", "kcm/EBB202_long",
    "kcm/EBB205_good",
])
def test_each_negative_fixture_is_clean(fixture: str) -> None:
    assert lint(fixture) == []


def test_a_missing_scale_down_window_is_reported_as_info_and_a_short_one_as_warning() -> None:
    assert [f.severity for f in lint("EBB202/info_missing.yaml")] == ["info"]
    assert [f.severity for f in lint("EBB202/bad.yaml")] == ["warning"]


def test_the_dataloader_finding_names_every_missing_setting_and_the_column() -> None:
    (f,) = lint("EBB103/bad.py")
    assert "num_workers=0" in f.message and "pin_memory" in f.message and "prefetch_factor" not in f.message
    assert f.column == 14


def _lint_source(tmp_path: Path, source: str) -> list[Finding]:
    (tmp_path / "s.py").write_text(source, encoding="utf-8")
    return lint_paths([tmp_path / "s.py"], ALL_RULES).findings


@pytest.mark.parametrize(("call", "problems"), [
    # PyTorch's default prefetch_factor (2 per worker when num_workers > 0) is never a finding
    ("DataLoader(ds, num_workers=4, pin_memory=True)", []),
    ("DataLoader(ds, num_workers=args.workers, pin_memory=args.pin_mem)", []),  # expressions: not decided here
    ("DataLoader(ds, **kwargs)", []),
    ("DataLoader(ds, num_workers=8)", ["pin_memory"]),
    ("DataLoader(ds, pin_memory=True)", ["num_workers missing"]),
    ("DataLoader(ds, num_workers=0, pin_memory=True, prefetch_factor=4)", ["num_workers=0", "prefetch_factor"]),
    ("DataLoader(ds, 8, True, None, None, 4, None, True)", []),  # workers and pinning given by position
])
def test_the_dataloader_rule_applies_pytorch_defaults_and_reports_only_real_problems(
        tmp_path: Path, call: str, problems: list[str]) -> None:
    found = _lint_source(tmp_path, f"import torch\nfrom torch.utils.data import DataLoader\nds = None\n"
                                   f"device = 'cuda'\nloader = {call}\n")
    messages = [f.message for f in found if f.rule_id == "EBB103"]
    if not problems:
        assert messages == []
    else:
        (message,) = messages
        assert all(p in message for p in problems) and ("prefetch_factor" in message) == ("prefetch_factor" in problems)


def test_a_save_model_helper_in_an_epoch_loop_is_not_an_inference_loop(tmp_path: Path) -> None:
    """Issue #18 item 7: ConvNeXt's `for epoch ...: utils.save_model(...)` was reported as eager inference."""
    source = ("import torch\nimport utils\nmodel = utils.build()\n"
              "for epoch in range(10):\n    stats = train_one_epoch(model)\n"
              "    with torch.no_grad():\n        utils.save_model(args=None, model=model, epoch=epoch)\n"
              "        misc.save_model(model)\n        best_model(x)\n")
    assert [(f.rule_id, f.line) for f in _lint_source(tmp_path, source)] == [("EBB104", 4)]  # best_model(x) only
    assert _lint_source(tmp_path, source.replace("        best_model(x)\n", "")) == []


@pytest.mark.parametrize(("body", "flagged"), [
    ("with torch.no_grad():\n    for b in batches:\n        out = model(b)\n", True),
    ("with torch.no_grad():\n    for b in batches:\n        out = self.model(b)\n", True),
    ("with torch.no_grad():\n    for b in batches:\n        out = model.forward(b)\n", True),
    ("for b in batches:\n    out = model.generate(b)\n", True),
    ("for b in batches:\n    out = model(b)\n", False),  # no no_grad: not surely inference
    ("with torch.no_grad():\n    for b in batches:\n        out = tok(b)\n", False),  # a tokenizer
    # a validation loop in a file that also trains is not the hot path
    ("with torch.no_grad():\n    for b in batches:\n        out = model(b)\nmodel.train()\n", False),
    ("with torch.no_grad():\n    for b in batches:\n        out = model(b)\noptimizer.step()\n", False),
])
def test_the_eager_loop_rule_fires_only_on_inference_entry_points(tmp_path: Path, body: str, flagged: bool) -> None:
    source = "import torch\nfrom transformers import AutoTokenizer\ntok = AutoTokenizer.from_pretrained('x')\n" + body
    assert bool(_lint_source(tmp_path, source)) is flagged


def test_the_eager_inference_loop_is_info_at_the_loop_column_and_names_the_call() -> None:
    (f,) = lint("EBB104/bad_no_grad.py")
    assert (f.severity, f.line, f.column) == ("info", 10, 9)
    assert "model(...)" in f.message and "no_grad" in f.message
    first, inner = lint("EBB104/bad_generate.py")
    assert "lm.generate(...)" in first.message and "no_grad" not in first.message
    assert "lm(...)" in inner.message  # lm bound from from_pretrained(...).to(...); the outer loop is not reported


def test_the_eager_inference_finding_is_silenced_only_by_its_suppression_comment(tmp_path: Path) -> None:
    src = (DATA / "EBB104" / "suppressed.py").read_text(encoding="utf-8")
    (tmp_path / "unsuppressed.py").write_text(src.replace("  # ebb: ignore[EBB104]", ""), encoding="utf-8")
    assert [(f.rule_id, f.line) for f in lint_paths([tmp_path], ALL_RULES).findings] == [("EBB104", 10)]


@pytest.mark.parametrize(("extra", "flagged"), [
    ("model.compile()", False),  # nn.Module.compile()
    ("from torch.cuda import make_graphed_callables", False),
    ("step = torch.cuda.make_graphed_callables(model, (ids,))", False),
    ("@torch.compile\ndef f(x):\n    return x", False),
    ("import re\nPAT = re.compile('x')", True),  # re.compile is not torch.compile
    ("", True),
])
def test_any_compile_or_cuda_graph_use_in_the_file_silences_the_eager_loop_rule(
        tmp_path: Path, extra: str, flagged: bool) -> None:
    body = ("import torch\nmodel = object()\nids = None\n" + extra + "\n"
            "with torch.inference_mode():\n    while True:\n        ids = model(ids)\n")
    (tmp_path / "s.py").write_text(body, encoding="utf-8")
    assert bool(lint_paths([tmp_path / "s.py"], ALL_RULES).findings) is flagged


def test_the_metric_pipeline_finding_counts_the_stale_rereads() -> None:
    (f,) = lint("EBB205/bad_metrics_server.yaml")
    assert "4 times" in f.message


def test_the_metric_pipeline_findings_report_the_worst_case_lag() -> None:
    (ms,) = lint("EBB205/bad_metrics_server.yaml")
    assert "worst-case lag 75 s (resolution 60 + sync 15)" in ms.message
    (prom,) = lint("EBB205/prom_bad")
    assert "worst-case lag at least 75 s" in prom.message
    (keda,) = lint("EBB205/keda_bad")  # scrape 1m + rate(...[2m]) + pollingInterval 10
    assert "6 polls re-read the same value" in keda.message
    assert "worst-case lag 190 s (scrape 60 + query range 120 + polling 10)" in keda.message
    (default,) = lint("EBB205/keda_bad_default")  # no global scrape_interval (1m), no pollingInterval (30 s)
    assert "every 30 s (default)" in default.message and "worst-case lag 210 s" in default.message


def test_the_controller_manager_sync_period_replaces_the_15_s_default() -> None:
    (f,) = lint("kcm/EBB205_bad")  # --metric-resolution=15s is stale against a 10 s sync period
    assert "HPA sync 10 s (kube-controller-manager flag)" in f.message and "1.5 times" in f.message
    assert "worst-case lag 25 s" in f.message
    assert lint("kcm/EBB205_good") == []  # 60 s resolution, 1m30s sync period


def test_the_controller_manager_downscale_flag_decides_the_implicit_window() -> None:
    (short,) = lint("kcm/EBB202_short")
    assert short.severity == "warning" and "30 s" in short.message
    assert lint("kcm/EBB202_long") == []
    assert [f.severity for f in lint("EBB202/info_missing.yaml")] == ["info"]


@pytest.mark.parametrize(("args", "sync", "down", "known"), [
    (["kube-controller-manager", "--horizontal-pod-autoscaler-sync-period=1m30s"], 90.0, 300.0, False),
    (["/usr/bin/kube-controller-manager", "--horizontal-pod-autoscaler-downscale-stabilization", "2m"],
     15.0, 120.0, True),
    (["kube-scheduler", "--horizontal-pod-autoscaler-sync-period=5s"], 15.0, 300.0, False),
])
def test_controller_manager_flags_are_read_in_both_forms(tmp_path: Path, args: list[str], sync: float,
                                                         down: float, known: bool) -> None:
    import yaml

    from ebb.lint.core import Workspace, read_file
    from ebb.lint.rules import controller_settings

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kcm"},
           "spec": {"containers": [{"name": "c", "image": "x", "command": args}]}}
    (tmp_path / "kcm.yaml").write_text(yaml.safe_dump(pod), encoding="utf-8")
    docs, _ = read_file(tmp_path / "kcm.yaml", Workspace())
    cs = controller_settings(docs)
    assert (cs.sync_s, cs.downscale_s, cs.downscale_known) == (sync, down, known)


@pytest.mark.parametrize(("query", "seconds"), [("sum(rate(x[2m]))", 120.0), ("max_over_time(x[10m:1m])", 660.0),
                                                ("rate(a[1m]) / rate(b[5m])", 300.0), ("up", 0.0)])
def test_the_query_window_is_the_longest_range_in_the_promql(query: str, seconds: float) -> None:
    from ebb.lint.rules import query_window_s

    assert query_window_s(query) == seconds


def test_a_pdb_in_another_file_of_the_same_run_satisfies_the_spread_rule() -> None:
    assert lint("EBB204/good_split/deployment.yaml") != []
    assert lint("EBB204/good_split") == []


def test_rule_ids_are_unique_and_each_has_a_doc_page_matching_its_explain_text() -> None:
    ids = [r.id for r in ALL_RULES]
    assert len(ids) == len(set(ids))
    for rule in ALL_RULES:
        page = DOCS / f"{rule.id}.md"
        assert page.read_text(encoding="utf-8") == rule.doc, rule.id
        assert rule.severity in ("error", "warning", "info")


@pytest.mark.parametrize(("text", "seconds"), [("15s", 15.0), ("1m", 60.0), ("1m30s", 90.0), ("500ms", 0.5),
                                               ("10m", 600.0), ("1d", 86400.0), ("abc", None), ("", None)])
def test_durations_parse_like_go_and_prometheus(text: str, seconds: float | None) -> None:
    assert parse_duration_s(text) == seconds


def test_label_selectors_follow_kubernetes_semantics() -> None:
    labels = {"app": "web", "tier": "front"}
    assert selector_matches({"matchLabels": {"app": "web"}}, labels)
    assert not selector_matches({"matchLabels": {"app": "db"}}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]},
                                labels)
    assert selector_matches({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, labels)
    assert not selector_matches(None, labels)
