"""The consoles every command writes through (runner.cli.common.console and .errors).

Apart from common.py so that rich, which they are built on, is imported at the first print
and not when the CLI starts (`runner --help` prints through click alone).
"""

from __future__ import annotations

import contextlib
import os
import sys

from rich.console import Console as RichConsole
from rich.console import ConsoleDimensions

PIPE_COLUMNS = 1000


class Console(RichConsole):
    """A console as wide as its terminal, and wide enough elsewhere (a pipe, a file, a CI log)
    for a state and its reason (at most 600 characters) to stay one line: rich takes 80
    columns there, and `runner status RUN | grep FAILED` found half a reason. A COLUMNS the
    user set is kept, read at each print: rich reads it once, when the console is made, and a
    caller that sets it later (click's test runner, one process for many commands) got the
    width of the first."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            return ConsoleDimensions(int(columns), size.height)
        if self.is_terminal:
            return size
        return ConsoleDimensions(max(size.width, PIPE_COLUMNS), size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        RichConsole.size.fset(self, new_size)  # type: ignore[attr-defined]


class StdoutConsole(Console):
    """stdout, where a reader that stops reading (`runner submit ... | head -1`) is no failure:
    rich would exit 1 at the next print, from wherever it is, even from within the callbacks
    of a followed run. Here output stops and the command goes on to its own end and exit code
    (a followed run's is its outcome's); the run's record is what matters."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        # What is left in sys.stdout's buffer goes nowhere at exit, rather than a second
        # BrokenPipeError ("Exception ignored ...") as Python flushes it.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
