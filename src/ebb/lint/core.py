"""The lint engine: findings, the rule protocol, file discovery, readers with line numbers, suppression.

Readers never execute anything: Kubernetes/Prometheus YAML is composed (``yaml.compose_all``) so every
mapping key keeps its line; JSON is scanned by a small parser that records the line of every key;
Python is parsed with :mod:`ast`. A file that cannot be parsed yields a parse error (file and line)
and the run continues with the other files.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

__all__ = [
    "Finding", "ParseError", "Document", "Workspace", "Rule", "LintResult", "Path_",
    "discover", "read_file", "lint_paths", "load_disabled", "CONFIG_NAME",
]

CONFIG_NAME = ".ebb-lint.yaml"
YAML_SUFFIXES = {".yaml", ".yml"}
JSON_SUFFIXES = {".json", ".conf"}
PY_SUFFIXES = {".py"}
SUFFIXES = YAML_SUFFIXES | JSON_SUFFIXES | PY_SUFFIXES

Path_ = tuple[str | int, ...]
_SUPPRESS = re.compile(r"#\s*ebb:\s*ignore\[([A-Za-z0-9_,\s]+)\]")
_DS_KEYS = {"zero_optimization", "fp16", "bf16", "train_batch_size", "train_micro_batch_size_per_gpu"}


@dataclass(frozen=True)
class Finding:
    """One problem at one place. ``line``/``column`` are 1-based."""

    rule_id: str
    severity: str  # "error" | "warning" | "info"
    message: str
    fix: str
    path: str
    line: int
    column: int = 1


@dataclass(frozen=True)
class ParseError:
    """A file that could not be read or parsed; the run goes on and exits 2 at the end."""

    path: str
    line: int
    message: str


@dataclass
class Workspace:
    """Every document of one run, for rules that look across files (PDBs, metric pipelines)."""

    documents: list[Document] = field(default_factory=list)


@dataclass
class Document:
    """One parsed document: a YAML document, a JSON file or a Python module.

    ``kind`` is one of ``k8s``, ``prometheus``, ``deepspeed``, ``python``, ``yaml``, ``json``.
    ``lines`` maps a key path (keys and list indexes) to the 1-based line where it starts.
    """

    path: str
    kind: str
    data: Any
    lines: dict[Path_, int]
    source: str
    workspace: Workspace
    tree: ast.Module | None = None
    start_line: int = 1

    def line_of(self, path: Path_) -> int:
        """Line of ``path`` or of its nearest known ancestor."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.start_line

    def get(self, *path: str | int) -> Any:
        """The value at ``path`` or ``None``."""
        cur: Any = self.data
        for k in path:
            if isinstance(k, int) and isinstance(cur, list) and 0 <= k < len(cur):
                cur = cur[k]
            elif isinstance(k, str) and isinstance(cur, dict) and k in cur:
                cur = cur[k]
            else:
                return None
        return cur


class Rule(Protocol):
    """A lint rule. ``doc`` is the text ``ebb lint --explain ID`` prints (same as docs/lint/ID.md)."""

    @property
    def id(self) -> str: ...
    @property
    def severity(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def why(self) -> str: ...
    @property
    def fix(self) -> str: ...
    @property
    def doc(self) -> str: ...

    def applies_to(self, kind: str) -> bool: ...

    def check(self, document: Document) -> Iterable[Finding]: ...


@dataclass
class LintResult:
    findings: list[Finding]
    errors: list[ParseError]
    files: int

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        return 1 if self.findings else 0


# --------------------------------------------------------------------------------------- discovery
def discover(paths: Sequence[Path]) -> list[Path]:
    """Files named explicitly, plus YAML/JSON/.conf/Python files found under folders (sorted)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in SUFFIXES
                              and not any(part.startswith(".") for part in f.relative_to(p).parts)))
        else:
            out.append(p)
    seen: set[Path] = set()
    unique = []
    for f in out:
        if f not in seen:
            seen.add(f)
            unique.append(f)
    return unique


# ------------------------------------------------------------------------------------------- YAML
def _scalar(node: yaml.ScalarNode) -> Any:
    """The Python value of a scalar as ``yaml.safe_load`` would build it; unknown tags stay strings."""
    try:
        return yaml.SafeLoader("").construct_object(node, deep=True)
    except yaml.YAMLError:
        return node.value


def _convert(node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for k, v in node.value:
            key = str(k.value) if isinstance(k, yaml.ScalarNode) else str(k.start_mark.line)
            lines[path + (key,)] = k.start_mark.line + 1
            out[key] = _convert(v, path + (key,), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            lines[path + (i,)] = item.start_mark.line + 1
            items.append(_convert(item, path + (i,), lines))
        return items
    assert isinstance(node, yaml.ScalarNode)
    return _scalar(node)


def _yaml_kind(data: Any) -> str:
    if not isinstance(data, dict):
        return "yaml"
    if "apiVersion" in data and "kind" in data:
        return "k8s"
    if "scrape_configs" in data or isinstance(data.get("global"), dict) and "scrape_interval" in data["global"]:
        return "prometheus"
    if "zero_optimization" in data or ("fp16" in data and _DS_KEYS & set(data) - {"fp16"}):
        return "deepspeed"
    return "yaml"


def _read_yaml(path: str, text: str, ws: Workspace) -> list[Document]:
    docs: list[Document] = []
    for node in yaml.compose_all(text, Loader=yaml.SafeLoader):
        if node is None:
            continue
        lines: dict[Path_, int] = {}
        data = _convert(node, (), lines)
        docs.append(Document(path, _yaml_kind(data), data, lines, text, ws, start_line=node.start_mark.line + 1))
    return docs


# ------------------------------------------------------------------------------------------- JSON
class _JsonScan:
    """Records the line of every key of a JSON text that ``json.loads`` already accepted."""

    _ws = re.compile(r"[ \t\r\n]*")

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines: dict[Path_, int] = {}
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.decoder = json.JSONDecoder()

    def line(self, pos: int) -> int:
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def skip(self, pos: int) -> int:
        m = self._ws.match(self.text, pos)
        return m.end() if m else pos

    def value(self, pos: int, path: Path_) -> int:
        pos = self.skip(pos)
        ch = self.text[pos]
        if ch == "{":
            pos = self.skip(pos + 1)
            if self.text[pos] == "}":
                return pos + 1
            while True:
                pos = self.skip(pos)
                key, end = json.decoder.scanstring(self.text, pos + 1)  # type: ignore[attr-defined]
                self.lines[path + (key,)] = self.line(pos)
                pos = self.skip(end)
                pos = self.value(pos + 1, path + (key,))  # past ':'
                pos = self.skip(pos)
                if self.text[pos] == "}":
                    return pos + 1
                pos += 1  # ','
        if ch == "[":
            pos = self.skip(pos + 1)
            if self.text[pos] == "]":
                return pos + 1
            i = 0
            while True:
                pos = self.skip(pos)
                self.lines[path + (i,)] = self.line(pos)
                pos = self.skip(self.value(pos, path + (i,)))
                if self.text[pos] == "]":
                    return pos + 1
                pos += 1
                i += 1
        _, end = self.decoder.raw_decode(self.text, pos)
        return int(end)


def _read_json(path: str, text: str, ws: Workspace) -> list[Document]:
    data = json.loads(text)
    scan = _JsonScan(text)
    scan.value(0, ())
    kind = "deepspeed" if isinstance(data, dict) and _DS_KEYS & set(data) else "json"
    return [Document(path, kind, data, scan.lines, text, ws)]


def _read_python(path: str, text: str, ws: Workspace) -> list[Document]:
    tree = ast.parse(text, filename=path)
    return [Document(path, "python", None, {}, text, ws, tree=tree)]


def read_file(path: Path, ws: Workspace) -> tuple[list[Document], ParseError | None]:
    """Parse one file into documents; a parse failure is returned, never raised."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], ParseError(name, 1, f"cannot read: {exc}")
    suffix = path.suffix.lower()
    try:
        if suffix in PY_SUFFIXES:
            return _read_python(name, text, ws), None
        if suffix in JSON_SUFFIXES:
            try:
                return _read_json(name, text, ws), None
            except json.JSONDecodeError as exc:
                if suffix == ".json":
                    return [], ParseError(name, exc.lineno, f"invalid JSON: {exc.msg}")
                # ``.conf`` files are sometimes YAML/HOCON-like; fall through to YAML.
        return _read_yaml(name, text, ws), None
    except SyntaxError as exc:
        return [], ParseError(name, exc.lineno or 1, f"invalid Python: {exc.msg}")
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        return [], ParseError(name, (mark.line + 1) if mark else 1, f"invalid YAML: {exc.problem or exc}")
    except yaml.YAMLError as exc:
        return [], ParseError(name, 1, f"invalid YAML: {exc}")


# ------------------------------------------------------------------------------------ suppression
def suppressed(source_lines: list[str], finding: Finding) -> bool:
    """True when the finding's line carries ``# ebb: ignore[ID]`` (or ``ignore[ID1,ID2]``)."""
    if not 1 <= finding.line <= len(source_lines):
        return False
    m = _SUPPRESS.search(source_lines[finding.line - 1])
    return m is not None and finding.rule_id in {s.strip() for s in m.group(1).split(",")}


def load_disabled(config: Path | None) -> set[str]:
    """Rule ids listed under ``disable:`` in ``.ebb-lint.yaml`` (empty when there is no file)."""
    if config is None or not config.is_file():
        return set()
    data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    ids = data.get("disable", []) if isinstance(data, dict) else []
    if not isinstance(ids, list):
        raise ValueError(f"{config}: 'disable' must be a list of rule ids")
    return {str(i) for i in ids}


def _iter_findings(rules: Sequence[Rule], docs: Sequence[Document]) -> Iterator[Finding]:
    for doc in docs:
        for rule in rules:
            if rule.applies_to(doc.kind):
                yield from rule.check(doc)


def lint_paths(paths: Sequence[Path], rules: Sequence[Rule], disabled: set[str] | None = None) -> LintResult:
    """Lint files and folders; findings sorted by file, line, rule."""
    disabled = disabled or set()
    active = [r for r in rules if r.id not in disabled]
    ws = Workspace()
    errors: list[ParseError] = []
    files = discover(paths)
    for f in files:
        docs, err = read_file(f, ws)
        ws.documents.extend(docs)
        if err:
            errors.append(err)
    source_lines: dict[str, list[str]] = {}
    findings: list[Finding] = []
    for finding in _iter_findings(active, ws.documents):
        src = source_lines.setdefault(finding.path, next(d.source for d in ws.documents if d.path == finding.path).splitlines())
        if not suppressed(src, finding):
            findings.append(finding)
    findings = sorted(set(findings), key=lambda x: (x.path, x.line, x.rule_id, x.message))
    return LintResult(findings, errors, len(files))


@dataclass(frozen=True)
class RuleBase:
    """What every rule shares: its id, severity, texts, the document kinds it reads; a rule adds
    ``check(document) -> Iterator[Finding]``."""

    id: str
    severity: str
    title: str
    why: str
    fix: str
    kinds: tuple[str, ...]

    @property
    def doc(self) -> str:
        return f"# {self.id}: {self.title}\n\nSeverity: {self.severity}\n\n## Why\n\n{self.why}\n\n## Fix\n\n{self.fix}\n"

    def applies_to(self, kind: str) -> bool:
        return kind in self.kinds

    def finding(self, doc: Document, path: Path_, message: str, severity: str | None = None) -> Finding:
        return Finding(self.id, severity or self.severity, message, self.fix, doc.path, doc.line_of(path))
