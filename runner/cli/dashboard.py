"""`runner dashboard`: serve the live web dashboard over the results directory.

A thin shell over runner.dashboard.server, which (with aiohttp) is imported only when the
command runs, so `runner --help` never pays for it.
"""

from __future__ import annotations

import click

from runner.cli.common import Settings, console, handle_errors, pass_settings, require
from runner.errors import RunnerError


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to serve on (0: any free one).")  # fmt: skip
@click.option(
    "--host", default="127.0.0.1", show_default=True,
    help="Address to bind. Anything but loopback shows your results to the network.",
)  # fmt: skip
@pass_settings
@handle_errors
def dashboard(settings: Settings, port: int, host: str) -> None:
    """Serve a live, read-only web dashboard of the runs and studies in the results directory.

    \b
    Examples:
      runner dashboard
      runner dashboard --port 9000
      runner --results-dir /mnt/results dashboard
    Runs table, run pages with live curves and logs, comparisons, studies. Ctrl-C stops it.
    """
    require("aiohttp", "runner dashboard")
    from runner.dashboard.server import DashboardConfig, serve

    results_dir = settings.results_dir
    config = DashboardConfig(results_dir=results_dir, host=host, port=port)

    def ready(url: str) -> None:
        note = "" if results_dir.is_dir() else " (no runs yet: it shows them as they appear)"
        console.print(f"dashboard of {results_dir}/ at [bold]{url}[/bold]{note}; Ctrl-C stops it")

    try:
        serve(config, ready)
    except OSError as err:
        raise RunnerError(f"cannot serve on {host}:{port} ({err.strerror or err}); "
                          "choose another port with --port N") from None  # fmt: skip
    except KeyboardInterrupt:
        console.print("dashboard stopped")


COMMANDS = (dashboard,)
