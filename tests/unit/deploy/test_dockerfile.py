"""The Dockerfile: a pinned base, a non-root user, README's install step, and the image deploy/ runs.

No Docker runs on the build machines, so the file is parsed, not built: these tests hold the
promises a reader checks by eye (and that drifted before: the manifests named an image no build
produced).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction; continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def build_args() -> dict[str, str]:
    return dict(rest.split("=", 1) for word, rest in instructions() if word == "ARG" and "=" in rest)


def version() -> str:
    v: str = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    return v


def documented_build_tag() -> str:
    """The tag of deploy/README.md's ``docker build -t TAG .`` (the one build it documents)."""
    tags = re.findall(r"^docker build -t (\S+) \.", (ROOT / "deploy" / "README.md").read_text(encoding="utf-8"),
                      flags=re.MULTILINE)
    assert len(tags) == 1, f"deploy/README.md documents {len(tags)} `docker build -t TAG .` commands, expected 1"
    return str(tags[0])


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return list(spec.get("containers", [])) + list(spec.get("initContainers", []))


def test_every_stage_starts_from_the_python_slim_bookworm_base_pinned_by_digest() -> None:
    args = build_args()
    bases = [rest.split()[0] for word, rest in instructions() if word == "FROM"]
    assert bases, "the Dockerfile has no FROM"
    for base in bases:
        resolved = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
        assert resolved.startswith("python:3.") and "-slim-bookworm@" in resolved, resolved
        assert DIGEST.search(resolved), f"base {resolved!r} is not pinned by a sha256 digest"


def test_the_image_runs_as_a_fixed_non_root_uid_that_the_manifests_run_as() -> None:
    users = [rest for word, rest in instructions() if word == "USER"]
    assert users, "the Dockerfile sets no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0)
    for name in ("controller-deployment.yaml", "agent-daemonset.yaml"):
        doc = yaml.safe_load((ROOT / "deploy" / name).read_text(encoding="utf-8"))
        assert doc["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid), name


def test_the_install_step_is_the_readmes_install_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    (readme_cmd,) = [ln.strip() for ln in section.splitlines() if "pip install" in ln]
    steps = [rest for word, rest in instructions() if word == "RUN" and "pip install" in rest]
    assert len(steps) == 1, f"expected one pip install step, found {steps}"
    assert shlex.split(steps[0]) == shlex.split(readme_cmd)


def test_the_entrypoint_is_the_ebb_cli() -> None:
    (entry,) = [rest for word, rest in instructions() if word == "ENTRYPOINT"]
    assert json.loads(entry) == ["ebb"]


def test_the_documented_build_tags_the_package_version_and_the_label_agrees() -> None:
    tag = documented_build_tag()
    assert tag == f"ghcr.io/ebb-dev/ebb:{version()}"
    labels = " ".join(rest for word, rest in instructions() if word == "LABEL")
    assert f'org.opencontainers.image.version="{version()}"' in labels
    assert f"docker build -t {tag} ." in DOCKERFILE.read_text(encoding="utf-8")


def test_every_image_in_deploy_is_the_image_the_documented_build_produces() -> None:
    tag = documented_build_tag()
    seen = 0
    for path in sorted((ROOT / "deploy").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            for c in containers(doc or {}):
                assert c["image"] == tag, f"{path.name}: container {c['name']} runs {c['image']!r}, not {tag!r}"
                seen += 1
    assert seen >= 2  # the controller and the agent


def test_the_build_context_holds_only_what_the_install_step_reads() -> None:
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!src/"} <= set(lines)
    copied = {rest.split()[0] for word, rest in instructions() if word == "COPY" and not rest.startswith("--from")}
    assert copied == {"pyproject.toml", "src"}
