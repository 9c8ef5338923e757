"""`ebb run` and `ebb simulate` take `--config FILE`: a flag beats its EBB_* variable, which beats the
file, which beats the default; a bad file is one line and exit 2; every flag is a documented key."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from ebb.cli.app import app
from ebb.cli.config_docs import COMMANDS, config_markdown
from ebb.cli.config_option import option_key
from ebb.cli.main import main  # noqa: F401 - registers every command on app
from ebb.config.run_settings import RUN_GROUPS, run_settings
from ebb.config.settings_file import field_help, group_fields, read_settings_file
from ebb.config.simulate_settings import SIMULATE_GROUPS, simulate_settings

ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def _printed(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    res = runner.invoke(app, [*args, "--print-config"], env=env)
    assert res.exit_code == 0, (res.output, res.exception)
    doc = yaml.safe_load(res.stdout)
    assert isinstance(doc, dict)
    return doc


def _options(command: str) -> dict[str, Any]:
    group = typer.main.get_command(app)
    params = group.commands[command].params  # type: ignore[attr-defined]
    return {option_key(p): p for p in params
            if p.name not in ("config", "print_config") and any(o.startswith("--") for o in p.opts)}


def test_a_flag_beats_its_variable_which_beats_the_file_which_beats_the_default(tmp_path: Path) -> None:
    cfg = tmp_path / "ebb.yaml"
    cfg.write_text("loop: {mode: act, interval_s: 2}\nactuator: {workers: 5}\n")
    base = ["run", "--config", str(cfg)]
    assert _printed(base)["loop"]["interval_s"] == 2.0
    assert _printed(base)["loop"]["max_staleness_s"] == 5.0  # not in the file: the default
    assert _printed(base, env={"EBB_RUN_INTERVAL_S": "3"})["loop"]["interval_s"] == 3.0
    assert _printed([*base, "--interval-s", "4"], env={"EBB_RUN_INTERVAL_S": "3"})["loop"]["interval_s"] == 4.0
    # Given explicitly, a flag wins even when it spells the default.
    printed = _printed([*base, "--mode", "recommend", "--workers", "2"])
    assert printed["loop"]["mode"] == "recommend" and printed["actuator"]["workers"] == 2


def test_the_config_path_itself_reads_its_variable(tmp_path: Path) -> None:
    cfg = tmp_path / "sim.yaml"
    cfg.write_text("model: {seed: 7}\n")
    assert _printed(["simulate"], env={"EBB_SIMULATE_CONFIG": str(cfg)})["model"]["seed"] == 7


def test_a_repeatable_flag_replaces_the_files_list(tmp_path: Path) -> None:
    cfg = tmp_path / "ebb.yaml"
    cfg.write_text("source: {agent: [http://a:1, http://b:1]}\n")
    assert _printed(["run", "--config", str(cfg)])["source"]["agent"] == ["http://a:1", "http://b:1"]
    assert _printed(["run", "--config", str(cfg), "--agent", "http://c:1"])["source"]["agent"] == ["http://c:1"]


def test_the_election_id_variable_beats_the_file(tmp_path: Path) -> None:
    cfg = tmp_path / "ebb.yaml"
    cfg.write_text("ledger: {candidate_id: from-file}\n")
    assert _printed(["run", "--config", str(cfg)])["ledger"]["candidate_id"] == "from-file"
    assert _printed(["run", "--config", str(cfg)], env={"EBB_INSTANCE": "pod-0"})["ledger"]["candidate_id"] == "pod-0"


def test_print_config_prints_a_file_that_reads_back_as_the_same_settings(tmp_path: Path) -> None:
    printed = tmp_path / "printed.yaml"
    for command, flag in (("run", "--cycles"), ("simulate", "--seed")):
        out = runner.invoke(app, [command, flag, "3", "--print-config"])
        assert out.exit_code == 0, out.output
        printed.write_text(out.stdout)
        again = runner.invoke(app, [command, "--config", str(printed), "--print-config"])
        assert again.exit_code == 0 and again.stdout == out.stdout
    assert simulate_settings({}, read_settings_file(printed, SIMULATE_GROUPS)) == simulate_settings({"seed": 3})


def test_the_examples_load_and_a_flag_overrides_them() -> None:
    run_yaml, sim_yaml = ROOT / "examples" / "ebb.yaml", ROOT / "examples" / "simulate.yaml"
    s = run_settings({}, read_settings_file(run_yaml, RUN_GROUPS))
    assert (s.source.engine, s.actuator.deployment, s.ledger.elect) == ("vllm", "vllm", True)
    printed = _printed(["run", "--config", str(run_yaml), "--mode", "recommend", "--interval-s", "2"])
    assert printed["loop"] == {**printed["loop"], "mode": "recommend", "interval_s": 2.0, "metrics_port": 9400}
    assert printed["source"]["prometheus_selector"] == 'namespace="serving",job="vllm"'
    sim = simulate_settings({}, read_settings_file(sim_yaml, SIMULATE_GROUPS))
    assert sim.input.window_s == "0:3600" and sim.input.scaling == (1.0, 8)
    assert _printed(["simulate", "--config", str(sim_yaml), "--peak-replicas", "off"])["input"]["peak_replicas"] == "off"


def _ebb(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ebb.cli.main", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "400"})


@pytest.mark.parametrize(("text", "said"), [
    (None, "cannot read settings file (--config)"),
    ("loop: {modes: act}\n", "ebb.yaml: loop.modes: unknown key (fix: did you mean mode?)"),
    ("loop: {interval_s: soon}\n", "ebb.yaml: loop.interval_s: expected a number, got 'soon'"),
    ("loop: {mode: yolo}\n", "--mode must be recommend or act, got 'yolo'"),
    ("loop: [\n", "ebb.yaml: line 2: broken YAML"),
])
def test_a_bad_config_file_is_one_line_and_exit_2_before_anything_starts(tmp_path: Path, text: str | None,
                                                                       said: str) -> None:
    cfg = tmp_path / "ebb.yaml"
    if text is not None:
        cfg.write_text(text)
    res = _ebb("run", "--config", str(cfg), "--cycles", "1", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and said in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == (["ebb.yaml"] if text is not None else [])


def test_a_simulation_runs_with_the_settings_of_its_file(tmp_path: Path) -> None:
    counts = tmp_path / "counts.txt"
    counts.write_text("# bin_s=1\n" + "\n".join(str(3 + i % 4) for i in range(120)) + "\n")
    cfg = tmp_path / "sim.yaml"
    cfg.write_text(f"input: {{trace: {counts}, peak_replicas: 2}}\npolicy: {{policy: 'hpa,static'}}\n"
                   f"output: {{json: {tmp_path / 'cards.json'}, quiet: true}}\nmodel: {{gpu_hour_usd: 2}}\n")
    res = runner.invoke(app, ["simulate", "--config", str(cfg), "--policy", "static"])
    assert res.exit_code == 0, (res.output, res.exception)
    cards = json.loads((tmp_path / "cards.json").read_text())
    assert [c["policy"] for c in cards] == ["static"]  # the flag beat the file's two policies
    assert cards[0]["cost_usd"] == pytest.approx(cards[0]["gpu_hours"] * 2)


@pytest.mark.parametrize(("command", "groups"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_every_flag_is_one_settings_key_with_its_default_and_help(command: str, groups: Any) -> None:
    options = _options(command)
    keys = {k: g for g in groups for k in group_fields(g)}
    assert set(options) == set(keys)
    for key, param in options.items():
        g = keys[key]
        default = getattr(g(), key)
        assert (tuple(param.default) if isinstance(param.default, list) else param.default) == default, key
        assert param.help.startswith(field_help(g, key)), key


def test_the_etcd_flags_of_every_command_say_where_the_password_comes_from() -> None:
    from ebb.ledger.location import PASSWORD_ENV

    assert f"${PASSWORD_ENV}" in _options("run")["etcd_password_file"].help
    assert f"${PASSWORD_ENV}" in _options("explain")["etcd_password_file"].help


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_help_fits_80_columns_with_every_flag_name_whole(command: str) -> None:
    res = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80", "TERM": "dumb"})
    assert res.exit_code == 0
    assert max(len(line) for line in res.output.splitlines()) <= 80
    names = set(re.findall(r"--[a-z0-9-]+(?=[ ,])", res.output.replace("│", " ")))
    for param in _options(command).values():
        assert next(o for o in param.opts if o.startswith("--")) in names, param.opts


def test_docs_config_md_is_generated_from_the_settings() -> None:
    text = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert text == config_markdown(), "docs/config.md is stale: python -m ebb.cli.config_docs > docs/config.md"
