"""Grouped command settings from flags, ``EBB_*`` variables and one YAML file (``--config``), merged once.

``ebb run`` and ``ebb simulate`` read their flags into frozen dataclasses, one per concern; each
names its *section* in ``SECTION`` (:mod:`ebb.config.run_settings`,
:mod:`ebb.config.simulate_settings`). ``--config FILE`` holds the same settings as YAML::

    source:                      # a section: one of the command's groups (its help panel)
      source: prometheus         # a key: the flag's long name, dashes written as underscores
      prometheus_url: http://prometheus.monitoring:9090
    loop:
      mode: recommend

Precedence, key by key: a flag on the command line > its environment variable > the file > the
field's default. The CLI says which flags were given (click's parameter source); this module merges.

Guarantees:

* The file is read once, through :mod:`ebb.config.yamlio` (safe loader; at most 64 levels and
  1,000,000 nodes after alias expansion); broken YAML is one ConfigError naming the file and line.
  An empty file is no settings.
* An unknown section or key is a ConfigError naming it and the fix: a close match, the section the
  key belongs to, or the known names; a typo never silently leaves a default in place. A key written
  with dashes (``prometheus-url``) is refused with its underscore spelling as the fix.
* Every value is checked against its field's type before any dataclass is built: a boolean is
  ``true``/``false``; an integer is a whole number (not a boolean); a number may be written as an
  integer; a path is a string; a list is a list of strings; ``null`` only where the default is
  unset. A string is a string: only the keys a group lists in ``INTEGER_TEXT`` (a column index, a
  replica count, client ids: ``time_col: 0``, ``peak_replicas: 20``) also take an unquoted integer.
  Elsewhere a number is refused with "quote it": YAML 1.1 reads some unquoted text as a number
  (``window_s: 10:50`` is the base-60 integer 650), which must not become the string ``'650'``.
  The error reads ``FILE: section.key: expected ..., got ... (fix: ...)``.
* Then each group validates itself when built (its ``__post_init__``), naming the flag.

Field docstrings: a dataclass field's docstring (the string literal right under it) documents it;
its first paragraph is the flag's ``--help`` text (:func:`field_help`) and the whole is its entry
in docs/config.md. They are read from the module's source with :mod:`ast` once per module.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Protocol

import yaml

from ebb.config.yamlio import config_error, describe, load_yaml, read_config_text

__all__ = [
    "INTEGER_TEXT",
    "Groups",
    "SettingsFile",
    "SettingsGroup",
    "field_docs",
    "field_help",
    "group_fields",
    "group_values",
    "key_sections",
    "merge_settings",
    "parse_settings",
    "read_settings_file",
    "settings_groups",
    "settings_yaml",
]



class SettingsGroup(Protocol):
    """A settings dataclass: its fields are the keys of its ``SECTION`` of a ``--config`` file."""

    SECTION: ClassVar[str]
    """The section's name in the file (and, capitalised, the help panel its flags are listed in)."""
    __dataclass_fields__: ClassVar[dict[str, Any]]


INTEGER_TEXT = "INTEGER_TEXT"
"""The optional class attribute (a frozenset of key names) of a group whose string keys also take an
unquoted integer, written as its decimal text: an index, a count, ids."""


Groups = Sequence[type[SettingsGroup]]
"""A command's settings groups, in the order they are built (and validated)."""

KEY_SPELLING = "keys are the flags' long names with underscores"
"""The key rule, quoted in the errors that a dashed key gets."""


@dataclass(frozen=True)
class SettingsFile:
    """A ``--config`` file's values, typed: ``{section: {key: value}}``; every section and key is known."""

    source: str
    """The file as given, for messages."""
    sections: Mapping[str, Mapping[str, Any]]
    """The values each section sets (a key absent keeps its default, or its flag)."""

    def values(self, section: str) -> Mapping[str, Any]:
        """The keys ``section`` sets (empty when the file has no such section)."""
        return self.sections.get(section, {})


@cache
def _module_docs(module: str) -> Mapping[str, Mapping[str, str]]:
    """``{class name: {field: docstring}}`` for the top-level classes of ``module`` (parsed once)."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs = out.setdefault(node.name, {})
        for stmt, nxt in zip(node.body, node.body[1:], strict=False):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return out


def field_docs(cls: type) -> Mapping[str, str]:
    """Each field's docstring, the class's own and its dataclass bases' (a field without one is absent)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_module_docs(klass.__module__).get(klass.__name__, {}))
    return docs


def field_help(cls: type, name: str) -> str:
    """The first paragraph of field ``name``'s docstring on one line: the flag's ``--help`` text.

    Raises TypeError when the field has no docstring (every settings field has one; a test checks).
    """
    doc = field_docs(cls).get(name)
    if doc is None:
        raise TypeError(f"{cls.__name__}.{name} has no docstring: write one (its first paragraph is the --help text)")
    return " ".join(doc.split("\n\n", 1)[0].split())


def group_fields(cls: type) -> tuple[str, ...]:
    """The keys of a settings group, its own fields first, then those it inherits (docs and file order)."""
    names = [f.name for f in dataclasses.fields(cls)]
    own = set(cls.__dict__.get("__annotations__", {}))
    return tuple([n for n in names if n in own] + [n for n in names if n not in own])


def settings_groups(cls: type) -> tuple[type[SettingsGroup], ...]:
    """The groups of a command's settings dataclass (one field per group, named for its ``SECTION``),
    in field order: the order they are built and checked, and listed in ``-h``.

    Raises TypeError when a field's name is not its group's section (``merge_settings`` keys the
    built groups by section).
    """
    hints = typing.get_type_hints(cls)
    out: list[type[SettingsGroup]] = []
    for f in dataclasses.fields(cls):
        group = hints[f.name]
        if getattr(group, "SECTION", None) != f.name:
            raise TypeError(f"{cls.__name__}.{f.name}: a settings field is named for its group's SECTION, "
                            f"got {getattr(group, 'SECTION', None)!r}")
        out.append(group)
    return tuple(out)


def group_values(settings: Any) -> tuple[Any, ...]:
    """The built groups of a settings dataclass instance, in field order (what ``--print-config`` prints)."""
    return tuple(getattr(settings, f.name) for f in dataclasses.fields(settings))


def key_sections(groups: Groups) -> dict[str, str]:
    """``{key: section}`` over the groups; a key in two groups is a ValueError (keys are the flags' names)."""
    owner: dict[str, str] = {}
    for g in groups:
        for name in group_fields(g):
            if name in owner:
                raise ValueError(f"key {name!r} is in sections {owner[name]!r} and {g.SECTION!r}")
            owner[name] = g.SECTION
    return owner


# ---- reading the file -------------------------------------------------------------------------


def _example(value: Any) -> str:
    return yaml.safe_dump(_plain(value), default_flow_style=True).strip().removesuffix("...").strip()


def _type_name(hint: Any) -> tuple[str, str]:
    """(what a value of ``hint`` is, an example of one)."""
    if hint is bool:
        return "true or false", "true"
    if hint is int:
        return "a whole number", "8"
    if hint is float:
        return "a number", "1.5"
    if hint is Path:
        return "a file path", "/etc/ebb/file.yaml"
    if typing.get_origin(hint) is tuple:
        return "a list of strings", "[a, b]"
    return "a string", "text"


def _coerce(value: Any, hint: Any, *, source: str, where: str, key: str, default: Any, integer_text: bool) -> Any:
    """``value`` as ``hint`` (the field's type), or the one-line ConfigError of the module docstring;
    ``integer_text``: a string field that also takes an integer (its decimal text)."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional, hint = len(args) < len(typing.get_args(hint)), args[0]
    what, example = _type_name(hint)
    if default is not None and default is not dataclasses.MISSING:
        example = _example(default)
    fix = f"write {what}, e.g. {key}: {example}" + (", or leave the key out" if optional else "")
    if value is None:
        if optional:
            return None
        raise config_error(source, where, f"expected {what}, got null", f"{fix}; without the key the default holds")
    ok: Any = None
    if hint is bool:
        ok = value if isinstance(value, bool) else None
    elif hint is int:
        ok = value if isinstance(value, int) and not isinstance(value, bool) else None
    elif hint is float:
        ok = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    elif hint is Path:
        ok = Path(value) if isinstance(value, str) and value else None
    elif typing.get_origin(hint) is tuple:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            ok = tuple(value)
    elif isinstance(value, str):
        ok = value
    elif integer_text and isinstance(value, int) and not isinstance(value, bool):
        ok = str(value)  # a column index, a replica count or client ids written without quotes
    elif isinstance(value, (bool, int, float)):
        # YAML 1.1 read unquoted text as a number or a boolean (10:50 → 650, yes → true): the text
        # written is gone, so refuse it rather than keep a different string.
        raise config_error(source, where, f"expected {what}, got {describe(value)} (unquoted, YAML reads some "
                           "text as a number or a boolean: 10:50 as 650, yes as true)",
                           f'quote it: {key}: "..." keeps the text as written'
                           + (", or leave the key out" if optional else ""))
    if ok is None:
        raise config_error(source, where, f"expected {what}, got {describe(value)}", fix)
    return ok


def _unknown_key_fix(key: Any, section: str, names: Sequence[str], owner: Mapping[str, str]) -> str:
    text = str(key)
    underscored = text.replace("-", "_")
    if underscored != text and underscored in names:
        return f"write {underscored}: {KEY_SPELLING}"
    if underscored in owner:
        return f"{underscored} belongs in section {owner[underscored]}:"
    close = difflib.get_close_matches(underscored, names, n=1)
    if close:
        return f"did you mean {close[0]}?"
    return f"the keys of {section}: are {', '.join(names)}"


def parse_settings(text: str, source: str, groups: Groups) -> SettingsFile:
    """The YAML ``text`` (named ``source`` in errors) as a :class:`SettingsFile` for ``groups``."""
    doc = load_yaml(text, source)
    by_section = {g.SECTION: g for g in groups}
    sections_list = ", ".join(by_section)
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise config_error(source, "<top>", f"expected a mapping of sections, got {type(doc).__name__}",
                           f"write one mapping per section: {sections_list}")
    owner = key_sections(groups)
    out: dict[str, dict[str, Any]] = {}
    for name, body in doc.items():
        if name not in by_section:
            close = difflib.get_close_matches(str(name), list(by_section), n=1)
            hint = f"did you mean {close[0]}?" if close else f"the sections are {sections_list}"
            if str(name) in owner:
                hint = f"{name} is a key: write it under {owner[str(name)]}:"
            raise config_error(source, describe(name) if not isinstance(name, str) else name, "unknown section", hint)
        if body is None:
            continue
        if not isinstance(body, dict):
            raise config_error(source, name, f"expected a mapping of settings, got {type(body).__name__}",
                               f"write {name}: then one indented key: value per line")
        cls = by_section[name]
        names = group_fields(cls)
        hints = typing.get_type_hints(cls)
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        integer_text: frozenset[str] = getattr(cls, INTEGER_TEXT, frozenset())
        typed: dict[str, Any] = {}
        for key, value in body.items():
            if key not in names:
                raise config_error(source, f"{name}.{key}", "unknown key", _unknown_key_fix(key, name, names, owner))
            typed[key] = _coerce(value, hints[key], source=source, where=f"{name}.{key}", key=key,
                                 default=defaults[key], integer_text=key in integer_text)
        out[name] = typed
    return SettingsFile(source, out)


def read_settings_file(path: Path, groups: Groups) -> SettingsFile:
    """:func:`parse_settings` of the file at ``path`` (one-line ConfigError when it cannot be read)."""
    return parse_settings(read_config_text(path, "settings file (--config)"), str(path), groups)


# ---- merging and printing ---------------------------------------------------------------------


def merge_settings(groups: Groups, given: Mapping[str, Any], file: SettingsFile | None) -> dict[str, Any]:
    """``{section: group}``, each built from its defaults, then ``file``'s values, then the ``given`` flags.

    ``given`` maps keys to the values of the flags given on the command line or in the environment
    (a list becomes a tuple); a key no group has is a ValueError (a command wired wrong). Each group
    validates itself as it is built, in the order of ``groups``.
    """
    owner = key_sections(groups)
    unknown = sorted(set(given) - set(owner))
    if unknown:
        raise ValueError(f"flags {unknown} are no settings key of sections {[g.SECTION for g in groups]}")
    built: dict[str, Any] = {}
    for g in groups:
        values = dict(file.values(g.SECTION)) if file is not None else {}
        values.update({k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if owner[k] == g.SECTION})
        built[g.SECTION] = g(**values)
    return built


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


class _Dumper(yaml.SafeDumper):
    """Strings that YAML would fold or normalise on reading (line breaks, NEL, line and paragraph
    separators, other unprintable characters, surrounding spaces) are written double-quoted, escaped."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    exact = value.isprintable() and value == value.strip() and not any(c in value for c in "\x85\u2028\u2029")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=None if exact else '"')


_Dumper.add_representer(str, _str)


def settings_yaml(groups: Sequence[Any]) -> str:
    """Built groups as a ``--config`` file (every key, in field order); reading it back gives equal groups."""
    doc = {g.SECTION: {k: _plain(getattr(g, k)) for k in group_fields(type(g))} for g in groups}
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
