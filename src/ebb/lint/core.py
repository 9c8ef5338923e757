"""The lint engine: findings, the rule protocol, file discovery, readers with line numbers, suppression.

Readers never execute anything: Kubernetes/Prometheus YAML is composed (``yaml.compose_all``) so every
mapping key keeps its line; JSON is scanned by a small parser that records the line of every key;
Python is parsed with :mod:`ast`. A file that cannot be parsed yields a parse error (file and line)
and the run continues with the other files.

Bounds (the files linted are not trusted; a hostile one costs a parse error, never a crash or a hang):

* YAML goes through :class:`ebb.config.yamlio.BoundedSafeLoader`: at most 64 levels and 1,000,000
  nodes per document after alias expansion (a billion-laughs file is refused in milliseconds);
  integers past int64 and malformed tagged scalars stay their source text.
* JSON goes through :func:`ebb.untrusted.loads_json` (64 levels, 64 MiB) and every integer must fit
  in int64.
* Python that :mod:`ast` cannot parse (syntax errors, NUL bytes, nesting past the parser's own
  limits, which raise ``RecursionError``/``MemoryError``) is a parse error; the rules walk the tree
  without recursion.
* :func:`read_file` and :func:`lint_paths` never raise for a bad file; :func:`load_disabled` raises
  one single-line :class:`~ebb.errors.ConfigError` naming the config file and the fix.

A Helm template (YAML with Go ``{{ ... }}`` directives) is not YAML: rather than a parse error it gets
one ``info`` finding, :data:`HELM_RULE_ID`, that says how to lint the rendered chart
(``helm template CHART | ebb lint -``; ``lint_paths(..., stdin=TEXT)`` lints YAML read from stdin).

Severities rank ``error`` > ``warning`` > ``info``; :meth:`LintResult.exit_code_for` turns a result and a
``--fail-on`` threshold (:data:`FAIL_ON`) into the exit code.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from ebb.config.yamlio import (
    MAX_YAML_DEPTH, MAX_YAML_NODES, BoundedSafeLoader, YamlLimitError, compose_all, describe, load_yaml,
    read_config_text, yaml_problem,
)
from ebb.errors import ConfigError
from ebb.untrusted import MAX_JSON_BYTES, MAX_JSON_DEPTH, UntrustedInput, checked_int, loads_json

__all__ = [
    "Finding", "ParseError", "Document", "Workspace", "Rule", "LintResult", "Path_",
    "discover", "read_file", "read_text", "lint_paths", "load_disabled", "CONFIG_NAME",
    "SEVERITIES", "FAIL_ON", "HELM_RULE_ID", "STDIN_NAME",
]

CONFIG_NAME = ".ebb-lint.yaml"
YAML_SUFFIXES = {".yaml", ".yml"}
JSON_SUFFIXES = {".json", ".conf"}
PY_SUFFIXES = {".py"}
SUFFIXES = YAML_SUFFIXES | JSON_SUFFIXES | PY_SUFFIXES

Path_ = tuple[str | int, ...]
_SUPPRESS = re.compile(r"#\s*ebb:\s*ignore\[([A-Za-z0-9_,\s]+)\]")
_DS_KEYS = {"zero_optimization", "fp16", "bf16", "train_batch_size", "train_micro_batch_size_per_gpu"}

SEVERITIES = ("info", "warning", "error")  # lowest first: the rank --fail-on compares
FAIL_ON = ("error", "warning", "info", "never")
HELM_RULE_ID = "helm-template"
STDIN_NAME = "<stdin>"
_GO_TEMPLATE = re.compile(r"\{\{-?\s*[^{}]*?-?\}\}")
_HELM_FIX = "helm template CHART | ebb lint -"
T = TypeVar("T")


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
    _derived: dict[str, tuple[int, Any]] = field(default_factory=dict, repr=False)

    def derived(self, key: str, build: Callable[[list[Document]], T]) -> T:
        """``build(documents)``, computed once per run and per ``key`` (again only when documents were
        added since): a cross-file rule reads the run in one pass, not once per document it checks."""
        held = self._derived.get(key)
        if held is None or held[0] != len(self.documents):
            held = (len(self.documents), build(self.documents))
            self._derived[key] = held
        value: T = held[1]
        return value


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
        """The exit code at the default threshold (``--fail-on warning``)."""
        return self.exit_code_for("warning")

    def exit_code_for(self, fail_on: str) -> int:
        """2 on a parse error (whatever ``fail_on``); 1 when a finding is at or above ``fail_on``
        (``error``, ``warning`` or ``info``; ``never``: no finding fails); else 0. A severity this
        module does not know ranks as ``warning``."""
        if fail_on not in FAIL_ON:
            raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON)}, got {fail_on!r}")
        if self.errors:
            return 2
        if fail_on == "never":
            return 0
        floor = SEVERITIES.index(fail_on)
        rank = {s: i for i, s in enumerate(SEVERITIES)}
        return 1 if any(rank.get(f.severity, 1) >= floor for f in self.findings) else 0


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
def _scalar(node: yaml.ScalarNode, builder: BoundedSafeLoader) -> Any:
    """The Python value of a scalar as ``yaml.safe_load`` would build it; unknown tags, malformed
    tagged scalars and integers past int64 stay their source text."""
    try:
        return builder.construct_object(node, deep=True)
    except yaml.YAMLError:
        return node.value


class _HelmTemplate(ValueError):
    """A Go template directive (``{{ .Values.x }}``) where YAML expects a value."""

    def __init__(self, line: int) -> None:
        super().__init__("Go template directive")
        self.line = line


def _convert(node: yaml.Node, path: Path_, lines: dict[Path_, int], builder: BoundedSafeLoader) -> Any:
    # Recursion depth = YAML nesting, at most MAX_YAML_DEPTH (64) levels: the loader refused deeper.
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for k, v in node.value:
            if node.flow_style and isinstance(k, yaml.MappingNode) and k.flow_style:
                # `{{ .Values.x }}` composes as a flow mapping keyed by a flow mapping: YAML allows it,
                # configs never mean it; it is an unrendered Helm directive.
                raise _HelmTemplate(node.start_mark.line + 1)
            key = str(k.value) if isinstance(k, yaml.ScalarNode) else str(k.start_mark.line)
            lines[path + (key,)] = k.start_mark.line + 1
            out[key] = _convert(v, path + (key,), lines, builder)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            lines[path + (i,)] = item.start_mark.line + 1
            items.append(_convert(item, path + (i,), lines, builder))
        return items
    if not isinstance(node, yaml.ScalarNode):  # pragma: no cover - PyYAML has only these three node kinds
        raise TypeError(f"unexpected YAML node {type(node).__name__}")
    return _scalar(node, builder)


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
    builder = BoundedSafeLoader("")  # one scalar constructor per file; it caches aliased scalars
    for node in compose_all(text):
        lines: dict[Path_, int] = {}
        data = _convert(node, (), lines, builder)
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
        scalar, end = self.decoder.raw_decode(self.text, pos)
        if isinstance(scalar, int) and not isinstance(scalar, bool):
            try:
                checked_int(scalar, "integer")
            except UntrustedInput as exc:
                raise _JsonLimit(str(exc), self.line(pos), "write integers within int64") from exc
        return int(end)


class _JsonLimit(ValueError):
    """A JSON value past a bound (depth, size, integer range), with the line to blame when known."""

    def __init__(self, message: str, line: int, fix: str) -> None:
        super().__init__(message)
        self.line = line
        self.fix = fix


def _read_json(path: str, text: str, ws: Workspace) -> list[Document]:
    try:
        data = loads_json(text)
    except UntrustedInput as exc:
        raise _JsonLimit(str(exc), 1, f"flatten the nesting (at most {MAX_JSON_DEPTH} levels) "
                         f"or split the file (at most {MAX_JSON_BYTES >> 20} MiB)") from exc
    # Recursion depth of the scan = JSON nesting, at most MAX_JSON_DEPTH (64): loads_json checked.
    scan = _JsonScan(text)
    scan.value(0, ())
    kind = "deepspeed" if isinstance(data, dict) and _DS_KEYS & set(data) else "json"
    return [Document(path, kind, data, scan.lines, text, ws)]


def _read_python(path: str, text: str, ws: Workspace) -> list[Document]:
    # The compiler warns about the linted code (invalid escapes, `1in`): not ours to print, and
    # under ``-W error`` such a warning would turn into a SyntaxError for a file Python accepts.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(text, filename=path)
    return [Document(path, "python", None, {}, text, ws, tree=tree)]


_LIMIT_FIX = (f"flatten the nesting (at most {MAX_YAML_DEPTH} levels) or drop repeated aliases "
              f"(at most {MAX_YAML_NODES:,} nodes after expansion)")
_PY_NESTING_FIX = "split the expression into smaller statements"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _python_file(name: str, text: str, ws: Workspace) -> tuple[list[Document], ParseError | None]:
    try:
        return _read_python(name, text, ws), None
    except SyntaxError as exc:  # also NUL bytes (a SyntaxError since Python 3.11.4)
        return [], ParseError(name, exc.lineno or 1, _one_line(f"invalid Python: {exc.msg}"))
    except (RecursionError, MemoryError):  # the parser's own nesting guards
        return [], ParseError(name, 1, f"Python source nested too deeply for the parser (fix: {_PY_NESTING_FIX})")
    except ValueError as exc:  # NUL bytes before Python 3.11.4
        return [], ParseError(name, 1, _one_line(f"invalid Python: {exc}"))


def _helm_finding(name: str, text: str, line: int | None = None) -> Finding:
    """The one ``info`` finding a Helm template gets instead of a parse error (at its first directive)."""
    if line is None:
        m = _GO_TEMPLATE.search(text)
        line = text.count("\n", 0, m.start()) + 1 if m else 1
    message = (f"Helm template (Go {{{{ ... }}}} directives), not linted as YAML: "
               f"lint the rendered chart with {_HELM_FIX}")
    return Finding(HELM_RULE_ID, "info", message, _HELM_FIX, name, line)


def _yaml_file(name: str, text: str, ws: Workspace) -> tuple[list[Document], ParseError | Finding | None]:
    try:
        return _read_yaml(name, text, ws), None
    except _HelmTemplate as exc:
        return [], _helm_finding(name, text, exc.line)
    except YamlLimitError as exc:
        line, what = yaml_problem(exc)
        return [], ParseError(name, line or 1, f"YAML refused: {what} (fix: {_LIMIT_FIX})")
    except yaml.YAMLError as exc:
        if _GO_TEMPLATE.search(text):  # `{{- if ... }}` lines, `{{ include ... }}`: Helm, not broken YAML
            return [], _helm_finding(name, text)
        line, what = yaml_problem(exc)
        return [], ParseError(name, line or 1, f"invalid YAML: {what}")


def read_file(path: Path, ws: Workspace) -> tuple[list[Document], ParseError | Finding | None]:
    """Parse one file into documents; a parse failure is returned (one line, with its line number),
    never raised. A Helm template returns its ``info`` :class:`Finding` in the parse error's place."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], ParseError(name, 1, _one_line(f"cannot read: {exc}"))
    return read_text(name, text, path.suffix.lower(), ws)


def read_text(name: str, text: str, suffix: str, ws: Workspace) -> tuple[list[Document], ParseError | Finding | None]:
    """:func:`read_file` for text already read (stdin): ``suffix`` picks the reader (``.yaml`` for stdin)."""
    if suffix in PY_SUFFIXES:
        return _python_file(name, text, ws)
    if suffix in JSON_SUFFIXES:
        try:
            return _read_json(name, text, ws), None
        except _JsonLimit as exc:
            return [], ParseError(name, exc.line, f"JSON refused: {exc} (fix: {exc.fix})")
        except json.JSONDecodeError as exc:
            if suffix == ".json":
                return [], ParseError(name, exc.lineno, f"invalid JSON: {exc.msg}")
            # ``.conf`` files are sometimes YAML/HOCON-like; fall through to YAML.
        except ValueError as exc:  # e.g. an integer literal over 4,300 digits (Python's own cap)
            return [], ParseError(name, 1, _one_line(f"invalid JSON: {exc}"))
    return _yaml_file(name, text, ws)


# ------------------------------------------------------------------------------------ suppression
def suppressed(source_lines: list[str], finding: Finding) -> bool:
    """True when the finding's line carries ``# ebb: ignore[ID]`` (or ``ignore[ID1,ID2]``)."""
    if not 1 <= finding.line <= len(source_lines):
        return False
    m = _SUPPRESS.search(source_lines[finding.line - 1])
    return m is not None and finding.rule_id in {s.strip() for s in m.group(1).split(",")}


def load_disabled(config: Path | None) -> set[str]:
    """Rule ids listed under ``disable:`` in ``.ebb-lint.yaml`` (empty when there is no file).

    An unreadable file, broken or over-limit YAML, or a ``disable`` that is not a list of rule ids
    raises one single-line :class:`ConfigError` naming the file and the fix.
    """
    if config is None or not config.is_file():
        return set()
    fix = "write disable: [EBB101, EBB203] (a list of rule ids)"
    data = load_yaml(read_config_text(config, "the lint config"), str(config))
    if data is None:
        return set()
    if not isinstance(data, dict):
        raise ConfigError(f"{config}: expected a mapping, got {type(data).__name__} (fix: {fix})")
    ids = data.get("disable", [])
    if ids is None:
        return set()
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ConfigError(f"{config}: disable: expected a list of rule ids, got {describe(ids)} (fix: {fix})")
    return set(ids)


def _iter_findings(rules: Sequence[Rule], docs: Sequence[Document]) -> Iterator[Finding]:
    for doc in docs:
        for rule in rules:
            if rule.applies_to(doc.kind):
                yield from rule.check(doc)


def lint_paths(paths: Sequence[Path], rules: Sequence[Rule], disabled: set[str] | None = None, *,
               stdin: str | None = None) -> LintResult:
    """Lint files and folders, plus ``stdin`` (YAML text, e.g. ``helm template`` output, named
    ``<stdin>``) when given; findings sorted by file, line, rule."""
    disabled = disabled or set()
    active = [r for r in rules if r.id not in disabled]
    ws = Workspace()
    errors: list[ParseError] = []
    notes: list[Finding] = []
    files = discover(paths)
    inputs: list[tuple[list[Document], ParseError | Finding | None]] = [read_file(f, ws) for f in files]
    if stdin is not None:
        inputs.append(read_text(STDIN_NAME, stdin, ".yaml", ws))
    for docs, err in inputs:
        ws.documents.extend(docs)
        if isinstance(err, Finding):
            if err.rule_id not in disabled:
                notes.append(err)
        elif err:
            errors.append(err)
    source_lines: dict[str, list[str]] = {}
    findings: list[Finding] = list(notes)
    for finding in _iter_findings(active, ws.documents):
        if finding.path not in source_lines:  # split each file once, not once per finding in it
            source_lines[finding.path] = next(d.source for d in ws.documents if d.path == finding.path).splitlines()
        src = source_lines[finding.path]
        if not suppressed(src, finding):
            findings.append(finding)
    findings = sorted(set(findings), key=lambda x: (x.path, x.line, x.rule_id, x.message))
    return LintResult(findings, errors, len(files) + (stdin is not None))


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
