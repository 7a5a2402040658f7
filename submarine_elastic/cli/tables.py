"""Tables the CLI commands share."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from submarine_elastic.controller.api import DecisionRecord


def table(title: str | None, *columns: str) -> Table:
    """An empty table with these columns."""
    result = Table(title=title)
    for col in columns:
        result.add_column(col)
    return result


def decisions_table(decisions: list[DecisionRecord], *, with_run: bool) -> Table:
    """The controller's decisions as a table, oldest first (``with_run``: a column for the job's run), each
    with its state: applied, failed with why, or pending or stalled with what YARN and the ring lack."""
    table = Table(title="controller decisions")
    for col in ("run", "time", "from", "to", "state", "reason")[0 if with_run else 1 :]:
        table.add_column(col)
    for d in decisions:
        cells = [
            time.strftime("%H:%M:%S", time.localtime(d.time)),
            str(d.from_workers),
            str(d.to_workers),
            d.describe(),
            d.reason,
        ]
        table.add_row(*([str(d.run)] if with_run else []), *cells)
    return table
