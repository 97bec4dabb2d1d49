"""The `runner` command line: a thin shell over runner.api, one module per family of commands.

    start.py    the entry point: the replies it has cached, else the click group
    app.py      the group, its options and help; benchmarks, plugins
    submit.py   submit
    runs.py     runs, status, logs, fetch, cancel, check
    data.py     data fetch
    study.py    sweep, report
    stack.py    cost, teardown
    dashboard.py dashboard (the web app itself: runner/dashboard/)
    doctor.py   doctor (the checks themselves: runner/doctor/)
    common.py   what they share: error handling, exit codes, option definitions

Only this package writes to the terminal. Importing it imports nothing: `runner.cli.main`,
the click group, is imported at its first use, so that start.py (the console script, and
`python -m runner.cli`) answers before click is imported at all.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported on the start-up path (runner/cli/start.py)
if TYPE_CHECKING:
    from runner.cli.app import main as main


def __getattr__(name: str) -> object:
    """`main`: the click group (runner/cli/app.py), imported when first asked for."""
    if name == "main":
        from runner.cli.app import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
