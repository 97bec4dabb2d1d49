"""The listings of what can be run: the benchmarks (their cards) and every extension point's
entries, as plain aligned columns, as `runner runs` prints its runs. Apart from views.py,
which imports the run records' machinery and rich, so that `runner benchmarks` imports
neither: a rich table costs more to import and draw than the rest of the listing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from runner.cli.common import terminal_safe
from runner.words import count

if TYPE_CHECKING:
    from runner.job.cards import Card

BUILT_IN = "built in"  # workloads.plugins.registry.BUILT_IN, not imported for one string


def columns(header: Sequence[str], rows: Sequence[Sequence[str]], bold: int | None = None) -> str:
    """Aligned columns under their header, cells shown as written (control characters
    written out); column `bold` in bold where a cell is not built in (click.echo drops the
    style where stdout is no terminal)."""
    cells = [[terminal_safe(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row in cells:
        parts = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
        if bold is not None and row[bold] != BUILT_IN:  # the padding outside the style
            parts[bold] = click.style(row[bold], bold=True) + parts[bold][len(row[bold]) :]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def benchmarks_table(cards: list[Card]) -> str:
    """The benchmarks, with where each comes from (built in, or the plugin's
    package==version or path)."""
    rows = []
    for c in cards:
        workers = count(c.default_workers, "worker")
        if c.target_metric is None:  # a measurement of the stack: no target, batch or strategy
            rows.append([c.name, c.task, "-", workers, c.origin])
            continue
        target = f"{c.target_metric} {'<=' if c.lower_is_better else '>='} {c.target_value:g}"
        rows.append([
            c.name, c.task, f"{target} ({c.light_target:g})",
            f"{workers} x batch {c.batch_size}, {c.strategy}, {count(c.default_runs, 'run')}",
            c.origin,
        ])  # fmt: skip
    return columns(("NAME", "TASK", "TARGET (LIGHT)", "DEFAULTS", "ORIGIN"), rows, bold=4)


def plugins_table(rows: list[tuple[str, str, str]]) -> str:
    """Every extension point's entries: (point, name, origin)."""
    return columns(("POINT", "NAME", "ORIGIN"), rows, bold=2)
