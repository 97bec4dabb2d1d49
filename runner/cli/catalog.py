"""The tables of what can be run: the benchmarks (their cards) and every extension point's
entries. Apart from views.py, which imports the run records' machinery, so that `runner
benchmarks` and `runner plugins` import rich and nothing of a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from runner.cli.common import plain, terminal_safe
from runner.words import count

if TYPE_CHECKING:
    from runner.job.cards import Card


def benchmarks_table(cards: list[Card]) -> Table:
    """The benchmarks, with where each comes from (built in, or the plugin's
    package==version or path)."""
    table = Table(title="Benchmarks", title_justify="left")
    # Three columns that read at 80 characters; identifiers are copied, so never wrapped.
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("task")
    table.add_column("target (light)")
    table.add_column("defaults")
    table.add_column("origin")
    for c in cards:
        origin = plain(c.origin)
        workers = count(c.default_workers, "worker")
        if c.target_metric is None:  # a measurement of the stack: no target, batch or strategy
            table.add_row(c.name, c.task, "-", workers, origin)
            continue
        table.add_row(
            c.name,
            c.task,
            f"{c.target_metric} {'<=' if c.lower_is_better else '>='} "
            f"{c.target_value:g} ({c.light_target:g})",
            f"{workers} x batch {c.batch_size}, {c.strategy}, {count(c.default_runs, 'run')}",
            origin,
        )
    return table


def plugins_table(rows: list[tuple[str, str, str]]) -> Table:
    """Every extension point's entries: (point, name, origin)."""
    table = Table(title="Extension points", title_justify="left")
    for column in ("point", "name", "origin"):
        table.add_column(column, no_wrap=column != "origin")
    for point, name, origin in rows:
        style = "" if origin == "built in" else "bold"
        table.add_row(point, plain(name), Text(terminal_safe(origin), style))
    return table
