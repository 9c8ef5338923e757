"""``ebb lint`` on hostile files (issue 12, M6): billion laughs, deep YAML/JSON/Python, huge integers,
NUL bytes and a bad ``.ebb-lint.yaml`` each end in one parse-error (or config-error) line, fast;
never a hang, a ``RecursionError``/``MemoryError`` traceback, or a warning printed about the file.

The hostile files are built here; the red-team reproductions in ``../shared/redteam`` are replayed
too when that folder is present. How long each one takes is ``bench/limits.py``'s (``lint-*``); here
the bound is on the work done (nodes composed) and on the outcome.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ebb.cli.main import app
from ebb.config.yamlio import BoundedSafeLoader
from ebb.errors import ConfigError
from ebb.lint import ALL_RULES, LintResult, lint_paths, load_disabled
from ebb.lint.core import Workspace, read_file
from ebb.testing.hostile_inputs import laughs

REDTEAM = Path(__file__).resolve().parents[4] / "shared" / "redteam" / "inputs"
RUN = "from ebb.cli.main import main; main()"


MANIFEST = "apiVersion: v1\nkind: ConfigMap\n"
"""A billion-laughs document lint reads as a Kubernetes manifest starts with this."""


def _lint(tmp_path: Path, name: str, content: str | bytes) -> LintResult:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return lint_paths([path], ALL_RULES)


def _one_parse_error(result: LintResult, *needles: str) -> str:
    assert result.exit_code == 2 and result.findings == [] and len(result.errors) == 1
    message = result.errors[0].message
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, message
    return message


def test_a_billion_laughs_manifest_is_one_parse_error_after_composing_fewer_than_100_nodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """laughs9.yaml: before, ebb lint ran > 60 s and > 1.3 GB expanding 10**9 aliases."""
    composed = [0]
    original = BoundedSafeLoader.compose_node

    def counted(self: BoundedSafeLoader, *args: object) -> object:
        composed[0] += 1
        return original(self, *args)

    monkeypatch.setattr(BoundedSafeLoader, "compose_node", counted)
    result = _lint(tmp_path, "laughs.yaml", laughs(9, head=MANIFEST))
    assert 0 < composed[0] < 100
    _one_parse_error(result, "YAML refused", "1,000,000 nodes", "fix:")
    assert result.errors[0].line == 8


def test_a_manifest_with_alias_fan_out_under_the_cap_is_linted(tmp_path: Path) -> None:
    result = _lint(tmp_path, "laughs5.yaml", laughs(5, head=MANIFEST))
    assert result.exit_code == 0 and result.errors == []


@pytest.mark.parametrize("name, text, needle", [
    ("deep.yaml", "apiVersion: v1\nkind: X\nx: " + "[" * 10_000 + "]" * 10_000 + "\n", "nested deeper than 64"),
    ("deep.json", "[" * 100_000 + "]" * 100_000, "JSON nested deeper than 64"),
    ("deep.conf", "[" * 100_000 + "]" * 100_000, "JSON nested deeper than 64"),
    ("deep.py", "x = " + "-" * 100_000 + "1\n", "nested too deeply for the parser"),
    ("chain.py", "import torch\nx = a" + ".b" * 50_000 + "\n", "nested too deeply for the parser"),
    ("nul.py", "import torch\x00\n", "null bytes"),
    ("big.json", '{"fp16": {"enabled": true, "loss_scale": 1' + "0" * 400 + "}}", "outside"),
    ("digits.json", '{"a": ' + "9" * 5000 + "}", "invalid JSON"),
    ("rec.yaml", "a: &a [*a]\n", "recursive alias"),
])
def test_a_hostile_file_is_one_parse_error_line(tmp_path: Path, name: str, text: str, needle: str) -> None:
    _one_parse_error(_lint(tmp_path, name, text), needle)


def test_json_at_the_depth_cap_is_linted_with_its_lines(tmp_path: Path) -> None:
    text = '{"a":' * 63 + '{"train_batch_size": 8}' + "}" * 63
    result = _lint(tmp_path, "ok.json", text)
    assert result.errors == []


def test_yaml_scalars_past_int64_or_malformed_stay_text_instead_of_crashing(tmp_path: Path) -> None:
    text = ("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nspec:\n  minReplicas: " + "9" * 5000 +
            "\n  maxReplicas: 99999999999999999999\n  when: 2023-13-45\n  flag: !!bool maybe\n")
    result = _lint(tmp_path, "hpa.yaml", text)
    assert result.errors == []


def test_python_nested_as_deep_as_the_parser_allows_is_linted_without_recursion(tmp_path: Path) -> None:
    """The EBB104 walk used one Python frame per AST level; a deep file then needs a deep stack."""
    loops = "".join("  " * i + f"for i{i} in range(3):\n" for i in range(20))
    # .generate(...) is a model call outside no_grad too (EBB104 counts model(...) only under no_grad)
    text = "import torch\n" + loops + "  " * 20 + "y = " + "-" * 600 + "model.generate(x)\n"
    path = tmp_path / "deep_ok.py"
    path.write_text(text)
    docs, error = read_file(path, Workspace())  # the parser needs the stack; the rules must not
    assert error is None and len(docs) == 1

    def nested(depth: int) -> list[str]:  # run the rules with only ~200 frames of headroom
        if depth:
            return nested(depth - 1)
        return [f.rule_id for rule in ALL_RULES if rule.applies_to(docs[0].kind) for f in rule.check(docs[0])]

    assert nested(sys.getrecursionlimit() - 200) == ["EBB104"]


def test_python_that_only_draws_compiler_warnings_is_linted_without_printing_them(tmp_path: Path) -> None:
    # pytest runs with -W error: before, the SyntaxWarning either escaped or was printed by `ebb lint`
    result = _lint(tmp_path, "warn.py", "import torch\nx = [0x1for i in y]\npat = '\\d'\n")
    assert result.errors == []


@pytest.mark.parametrize("text, needle", [
    ("disable: 5\n", "disable: expected a list of rule ids, got 5"),
    ("disable: [EBB101, 7]\n", "disable: expected a list of rule ids"),
    ("- disable\n", "expected a mapping"),
    (laughs(9, head=MANIFEST), "1,000,000 nodes"),
    ("disable: [" * 5000, "nested deeper"),
    ("disable: [EBB101\n", "broken YAML"),
])
def test_a_bad_lint_config_is_one_config_error_line_naming_it(tmp_path: Path, text: str, needle: str) -> None:
    cfg = tmp_path / ".ebb-lint.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_disabled(cfg)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(str(cfg)) and needle in message and "fix:" in message


def test_the_cli_reports_a_bad_lint_config_on_one_line_and_exits_two(tmp_path: Path) -> None:
    """bad_disable/: ``disable: 5`` made a two-line (wrapped) error; a laughs config hung."""
    (tmp_path / "nul.py").write_bytes(b"import torch\x00\n")
    cfg = tmp_path / ".ebb-lint.yaml"
    cfg.write_text("disable: 5\n" + "x" * 200 + ": 1\n")
    res = CliRunner().invoke(app, ["lint", "--config", str(cfg), str(tmp_path / "nul.py")])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(cfg) in lines[0] and "fix:" in lines[0]


def test_the_cli_on_hostile_files_exits_two_with_one_line_per_file_and_no_traceback(tmp_path: Path) -> None:
    files = {"laughs.yaml": laughs(9, head=MANIFEST), "deep.json": "[" * 100_000, "deep.py": "x = " + "-" * 100_000 + "1\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    res = subprocess.run([sys.executable, "-c", RUN, "lint", *(str(tmp_path / n) for n in files)],
                         capture_output=True, text=True, timeout=60, env=os.environ | {"COLUMNS": "80"})
    assert res.returncode == 2 and res.stderr == "", res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 4 and lines[-1] == "3 files, 0 findings, 3 parse errors"
    for name, line in zip(files, lines):
        assert line.startswith(f"{tmp_path / name}:") and "parse error" in line


_LINT_REPRO = ["manual/laughs9.yaml", "manual/laughs6.yaml", "manual/laughs5.yaml", "manual/deep.json",
               "manual/deep.yaml", "manual/deep.py", "manual/nul.py", "manual/deep_ok.json",
               "crashers/lint/01_RecursionError.json", "crashers/lint/02_MemoryError.py",
               "crashers/lint/03_RecursionError.yaml"]


@pytest.mark.parametrize("name", _LINT_REPRO)
def test_the_red_team_lint_reproductions_give_a_result_or_one_parse_error(name: str) -> None:
    path = REDTEAM / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (the shared red-team folder is not beside the repository)")
    result = lint_paths([path], ALL_RULES)
    assert result.files == 1 and len(result.errors) <= 1
    assert all("\n" not in e.message for e in result.errors)


def test_the_red_team_bad_disable_config_is_one_config_error() -> None:
    cfg = REDTEAM / "manual" / "bad_disable" / ".ebb-lint.yaml"
    if not cfg.is_file():
        pytest.skip(f"{cfg} is absent (the shared red-team folder is not beside the repository)")
    with pytest.raises(ConfigError, match="disable: expected a list of rule ids, got 5"):
        load_disabled(cfg)


@pytest.mark.parametrize("text", [
    # fuzz.py lint crashers: a mapping as `kind` (unhashable) and a string `args` next to a list `command`
    "apiVersion: policy/v1\nkind:\n  labels: {app: x}\n",
    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: metrics-server}\nspec:\n  template:\n    spec:\n"
    "      containers:\n        - image: registry.k8s.io/metrics-server/metrics-server:v0.7\n"
    "          args: --kubelet-insecure-tls\n          command: [/metrics-server]\n",
    # malformed selectors and labels next to a hard topology spread
    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nspec:\n  template:\n    metadata: {labels: [x]}\n"
    "    spec:\n      topologySpreadConstraints: [{whenUnsatisfiable: DoNotSchedule}]\n---\n"
    "apiVersion: policy/v1\nkind: PodDisruptionBudget\nspec:\n  selector: {matchLabels: [a], matchExpressions: x}\n"
    "---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nspec:\n  selector:\n    matchExpressions:\n"
    "      - {key: [a], operator: In, values: 5}\n      - 7\n",
    # lists where mappings belong and the reverse
    "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nspec:\n  metrics: [{type: {a: 1}}, {type: [1]}]\n",
    "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nspec:\n  metrics: 7\n"
    "  behavior: {scaleDown: {stabilizationWindowSeconds: .nan}}\n",
    "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: s}\nspec:\n  triggers: 5\n"
    "  pollingInterval: 1.0e+300\n",
])
def test_rules_read_fields_of_the_wrong_type_as_unset(tmp_path: Path, text: str) -> None:
    (tmp_path / "prometheus.yml").write_text("global: {scrape_interval: 90s}\nscrape_configs: 5\n")
    (tmp_path / "m.yaml").write_text(text)
    result = lint_paths([tmp_path], ALL_RULES)
    assert result.errors == [] and result.files == 2
