"""``--help`` that reads whole at 80 columns: on a narrow terminal each option's help goes under it.

Typer lays an options panel out as a table (names | negative names | type | help). From
:data:`WIDE_COLUMNS` columns up that fits every command's options; below it the help column gets
about 25 characters and rich cuts what does not fit with "…" — option names
(``--time-col,--time-c…``), environment variables (``EBB_SIMULATE_TOKENS_IN…``) and value lists.
Below :data:`WIDE_COLUMNS`, :func:`install` makes each panel a list instead: a line with the
option's names and type, then its help, environment variable and default indented four spaces on
the whole width, words never cut (a single token longer than the width folds onto the next line;
no character is lost). The panels, their titles and every text stay typer's own; only the layout
changes, so ``ebb -h`` at 120 columns is unchanged.

Mechanism: typer renders panels with the module function ``typer.rich_utils._print_options_panel``.
:func:`install` wraps it (once, lazily: rich_utils, with Markdown, costs about 50 ms to import, so
only a help screen pays it) — the original builds its table into a capture, and the wrapper prints
the same cells stacked. :class:`EbbTyper` makes every ``ebb`` command and group install it when it
formats help. A typer release that renames the function leaves the table layout in place and
``tests/unit/cli/test_help_width.py`` fails, naming the cut lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

__all__ = ["WIDE_COLUMNS", "EbbCommand", "EbbGroup", "EbbTyper", "install"]

WIDE_COLUMNS = 100
"""Narrowest terminal at which typer's table layout shows every option of every ``ebb`` command
uncut (checked at 100, 120 and 140 columns); narrower ones get the stacked layout."""

_INDENT = 4
_installed: list[bool] = []


class _Capture:
    """Stands in for the console while typer builds a panel: keeps what it would print."""

    def __init__(self) -> None:
        self.printed: list[Any] = []

    def print(self, *objects: Any, **_: Any) -> None:
        self.printed.extend(objects)


def _stacked(panel: Any) -> Any:
    """The same panel with each table row as two lines: names and type, then the help indented."""
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    table = panel.renderable
    if not isinstance(panel, Panel) or not isinstance(table, Table) or len(table.columns) < 6:
        return panel
    columns = [list(col.cells) for col in table.columns]
    first = len(columns) - 6  # 1 when typer added the "required" marker column
    grid = Table.grid(padding=0, expand=True)
    grid.add_column(overflow="fold")
    for row in range(table.row_count):
        cells = [col[row] for col in columns]
        required = cells[0] if first else ""
        long_names, short_names, neg_long, neg_short, types, help_cell = cells[first:]
        names = Text(", ").join(part for cell in (long_names, short_names) if isinstance(cell, Text)
                                for part in cell.split(",") if part.plain)
        negative = Text(", ").join(part for cell in (neg_long, neg_short) if isinstance(cell, Text)
                                   for part in cell.split(",") if part.plain)
        head = Text()
        if isinstance(required, Text) and required.plain:
            head.append_text(required)
            head.append(" ")
        head.append_text(names)
        if negative.plain:
            head.append(" / ")
            head.append_text(negative)
        if isinstance(types, Text) and types.plain:
            head.append("  ")
            head.append_text(types)
        head.overflow = "fold"
        grid.add_row(head)
        grid.add_row(Padding(help_cell, (0, 0, 0, _INDENT)))
    return Panel(grid, box=panel.box, title=panel.title, title_align=panel.title_align,
                 border_style=panel.border_style)


def _narrow(original: Callable[..., None]) -> Callable[..., None]:
    def print_options_panel(*, console: Any, **kwargs: Any) -> None:
        if console.width >= WIDE_COLUMNS:
            original(console=console, **kwargs)
            return
        capture = _Capture()
        original(console=capture, **kwargs)
        for obj in capture.printed:
            console.print(_stacked(obj))

    return print_options_panel


def install() -> None:
    """Make typer's options panels stack below :data:`WIDE_COLUMNS` columns (idempotent)."""
    if _installed:
        return
    from typer import rich_utils

    original = getattr(rich_utils, "_print_options_panel", None)
    if callable(original):
        rich_utils._print_options_panel = _narrow(original)  # noqa: SLF001 -- module docstring: the seam
    _installed.append(True)


class EbbCommand(TyperCommand):
    """A typer command whose help stacks on narrow terminals (:func:`install`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        install()
        super().format_help(ctx, formatter)


class EbbGroup(TyperGroup):
    """A typer group whose help stacks on narrow terminals (:func:`install`)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        install()
        super().format_help(ctx, formatter)


class EbbTyper(typer.Typer):
    """``typer.Typer`` whose group and commands are :class:`EbbGroup` and :class:`EbbCommand` by default."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", EbbGroup)
        super().__init__(**kwargs)

    def command(self, name: str | None = None, *, cls: type[TyperCommand] | None = None,
                **kwargs: Any) -> Callable[[Any], Any]:
        return super().command(name, cls=cls or EbbCommand, **kwargs)
