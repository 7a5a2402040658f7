"""Tables the CLI commands share, fitted to the terminal (80 columns and up) without cutting a name.

A table's first columns are its names (a queue's path, a node, an instance, an application): each is as wide
as its longest cell, never wrapped nor cut. Every other cell wraps between its words, a word longer than
:data:`FOLD_ABOVE` (a log's path) folded over lines instead of cut with an ellipsis. Where even that does not
fit, the columns the table names droppable go, least useful first.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult

    from submarine_elastic.controller.api import DecisionRecord


#: A word of a cell up to this long widens its column rather than being folded.
FOLD_ABOVE = 12


def _longest_word(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


class NamedTable(Table):
    """A :class:`rich.table.Table` whose first ``names`` columns are never cut, and whose ``droppable`` columns
    (least useful first) go where the rest would not fit (see the module docstring)."""

    def __init__(
        self, title: str | None, *columns: str, names: int = 1, droppable: tuple[str, ...] = (), **kwargs: Any
    ) -> None:
        super().__init__(title=title, **kwargs)
        self._names = names
        self._droppable = droppable
        for i, col in enumerate(columns):
            if i < names:
                self.add_column(col, no_wrap=True, min_width=len(col))
            else:
                self.add_column(col, overflow="fold", min_width=_longest_word(col))

    def add_row(self, *renderables: RenderableType | None, **kwargs: Any) -> None:
        """A row; a name widens its column to the whole name, a short word its column to that word."""
        for i, (column, cell) in enumerate(zip(self.columns, renderables, strict=False)):
            if isinstance(cell, str):
                plain = Text.from_markup(cell).plain
            elif isinstance(cell, Text):
                plain = cell.plain
            else:
                continue
            width = len(plain) if i < self._names else _longest_word(plain)
            if i < self._names or width <= FOLD_ABOVE:
                column.min_width = max(column.min_width or 0, width)
        super().add_row(*renderables, **kwargs)

    def _fits(self, console: Console, options: ConsoleOptions) -> bool:
        """Whether rich lays this table out within ``options.max_width`` (it crops a table it cannot)."""
        extra = self._extra_width
        widths = self._calculate_column_widths(console, options.update_width(options.max_width - extra))
        return sum(widths) + extra <= options.max_width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        fitted, left_out = self, []
        for name in self._droppable:
            if fitted._fits(console, options):
                break
            left_out.append(name)
            fitted = copy.copy(self)
            fitted.columns = [c for c in self.columns if c.header not in left_out]
        if left_out:
            fitted.caption = f"left out to fit {options.max_width} columns: {', '.join(left_out)}"
        yield from Table.__rich_console__(fitted, console, options)


def table(title: str | None, *columns: str, names: int = 1, droppable: tuple[str, ...] = ()) -> NamedTable:
    """An empty table with these columns, the first ``names`` of them names; the ``droppable`` ones go, in that
    order, where the table would not fit."""
    return NamedTable(title, *columns, names=names, droppable=droppable)


def decisions_table(decisions: list[DecisionRecord], *, with_run: bool) -> Table:
    """The controller's decisions as a table, oldest first (``with_run``: a column for the job's run), each
    with its state: applied, failed with why, or pending or stalled with what YARN and the ring lack."""
    columns = ("run", "time", "from", "to", "state", "reason")[0 if with_run else 1 :]
    result = table("controller decisions", *columns)
    for d in decisions:
        cells = [
            time.strftime("%H:%M:%S", time.localtime(d.time)),
            str(d.from_workers),
            str(d.to_workers),
            d.describe(),
            d.reason,
        ]
        result.add_row(*([str(d.run)] if with_run else []), *cells)
    return result
