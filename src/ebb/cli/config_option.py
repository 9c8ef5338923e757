"""``--config FILE`` and ``--print-config``: the commands whose flags are grouped settings.

``ebb run`` and ``ebb simulate`` read their flags into settings dataclasses, one per concern
(:mod:`ebb.config.run_settings`, :mod:`ebb.config.simulate_settings`); each flag is listed in
``-h`` under its group's panel, and ``--config FILE`` gives the same settings as YAML, one section
per panel (lower case), a key per flag (its long name, dashes as underscores). Every key is in
docs/config.md, generated from the fields' docstrings (:mod:`ebb.cli.config_docs`), which are
also the flags' help texts (:func:`settings_option`): one text, documented once.

Precedence, key by key: a flag on the command line > its environment variable
(``EBB_<COMMAND>_<OPTION>``, :mod:`ebb.cli.app`) > the ``--config`` file > the default. Click's
parameter source says which flags were given; :func:`ebb.config.settings_file.merge_settings`
merges. ``--config`` itself reads ``EBB_RUN_CONFIG`` / ``EBB_SIMULATE_CONFIG`` too.
``--print-config`` prints the merged settings as a ``--config`` file and exits: what a run would be
told, after the settings' own checks (not yet those that open files or the network).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Protocol, TypeVar

import typer

from ebb.config.settings_file import Groups, SettingsFile, SettingsGroup, field_help, read_settings_file, settings_yaml

__all__ = ["NOT_SETTINGS", "ConfigOpt", "PrintConfigOpt", "given_flags", "option_key", "panel", "print_settings",
           "read_settings", "settings_option"]

ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", metavar="FILE",
    help="YAML settings: a section per panel below (its name in lower case), keys as the flags' long names with "
         "underscores (docs/config.md); a flag or EBB_* variable given wins.")]

# Never from the environment: an EBB_RUN_PRINT_CONFIG left set would turn every run into a print.
PrintConfigOpt = Annotated[bool, typer.Option(
    "--print-config", allow_from_autoenv=False,
    help="Print the merged settings (flags, EBB_* variables, --config, defaults) as a --config file and exit.")]

NOT_SETTINGS = frozenset({"config", "print_config"})
"""Parameters that say how to read the settings, not settings themselves (``--config``, ``--print-config``)."""
_GIVEN = frozenset({"COMMANDLINE", "ENVIRONMENT", "PROMPT"})
"""Parameter sources (click's ``ParameterSource`` names) of a flag that was given, not defaulted."""

T = TypeVar("T")


class _Option(Protocol):
    """What :func:`option_key` reads of a click option."""

    @property
    def name(self) -> str | None: ...

    @property
    def opts(self) -> list[str]: ...


def panel(cls: type[SettingsGroup]) -> str:
    """The help panel of a group's flags: its section's name, capitalised (``source`` → ``Source``)."""
    return cls.SECTION.capitalize()


def settings_option(cls: type[SettingsGroup], key: str, *decls: str, help_suffix: str = "", **kwargs: Any) -> Any:
    """A ``typer.Option`` for field ``key`` of ``cls``: help from its docstring (plus ``help_suffix``,
    for what only the CLI knows, such as the bundled traces), listed in the group's panel."""
    return typer.Option(*decls, help=field_help(cls, key) + help_suffix, rich_help_panel=panel(cls), **kwargs)


def option_key(param: _Option) -> str:
    """The settings key of an option: its first long name, dashes as underscores (``--prometheus-url``
    → ``prometheus_url``, ``--log-json/--no-log-json`` → ``log_json``)."""
    longs = [o for o in param.opts if o.startswith("--")]
    if not longs:
        raise ValueError(f"option {param.name!r} has no long name to key it by")
    return longs[0][2:].replace("-", "_")


def given_flags(ctx: typer.Context) -> dict[str, Any]:
    """``{key: value}`` of the options given on the command line or in the environment (not defaulted)."""
    given: dict[str, Any] = {}
    for param in ctx.command.params:
        if param.name is None or param.name in NOT_SETTINGS:
            continue
        source = ctx.get_parameter_source(param.name)
        if source is not None and source.name in _GIVEN:
            given[option_key(param)] = ctx.params[param.name]
    return given


def read_settings(ctx: typer.Context, groups: Groups,
                  build: Callable[[Mapping[str, Any], SettingsFile | None], T]) -> T:
    """The command's settings: its given flags over its ``--config`` file (read once) over the defaults."""
    path = ctx.params.get("config")
    file = None if path is None else read_settings_file(Path(path), groups)
    return build(given_flags(ctx), file)


def print_settings(groups: tuple[Any, ...]) -> None:
    """``--print-config``: the built groups as a ``--config`` file, on stdout."""
    typer.echo(settings_yaml(groups), nl=False)
