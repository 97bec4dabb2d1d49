"""The `runner` click group: the group's options and help, `benchmarks` and `plugins`, and
every other family's commands added (the package's docstring maps them). Reached through
runner/cli/start.py, which first serves the replies it has cached, and as `runner.cli.main`.

Commands import what they need inside their bodies, so `runner --help` loads none of torch,
pulumi, kubernetes or matplotlib.
"""

from __future__ import annotations

import os
import signal  # first: every import before the handler is a moment Ctrl-C prints a traceback


def _quiet_exit(signum: int, frame: object) -> None:
    # Not SystemExit: one raised while a class is created (a dataclass's field) reaches the
    # console script as `RuntimeError: Error calling __set_name__` and its traceback. Nothing
    # is started or written before the commands run, so there is nothing to clean up.
    os._exit(130)


def _quiet_while_importing() -> Callable[..., Any] | int | None:
    """Ctrl-C while the commands' modules import (a fifth of a second or more) exits 130
    without the traceback of wherever the import was. Returns the handler to put back once
    they are in, so that Ctrl-C raises KeyboardInterrupt in a command again; None where SIGINT
    is left alone: ignored (a background job), not Python's, or not the main thread's to set."""
    try:
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.SIG_IGN or previous is None:
            return None
        signal.signal(signal.SIGINT, _quiet_exit)
        return previous
    except ValueError:  # imported from another thread
        return None


_PREVIOUS_SIGINT = _quiet_while_importing()

from collections.abc import Callable  # noqa: E402 - after the handler: imports take the time
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import click  # noqa: E402

from runner.cli import dashboard, data, doctor, runs, stack, study, submit  # noqa: E402
from runner.cli.common import (  # noqa: E402
    RunnerGroup,
    Settings,
    configure_logging,
    console,
    handle_errors,
    own_folder,
)


@click.group(cls=RunnerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--results-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
    envvar="STACKBENCH_RESULTS", show_default=True, help="Where run directories live.",
)  # fmt: skip
@click.option("--verbose", "-v", count=True, help="Log what the runner does (-vv: everything).")
@click.option("--debug", is_flag=True, help="Show the Python traceback of an error too.")
@click.option("--plugin", "plugins", multiple=True, metavar="MODULE_OR_PATH",
              help="Load this plugin first, for any command (reading a run made with "
              "submit --plugin PATH); repeatable.")  # fmt: skip
@click.pass_context
def main(
    ctx: click.Context, results_dir: Path, verbose: int, debug: bool, plugins: tuple[str, ...]
) -> None:
    """Run stackbench benchmarks locally or on a cluster and collect comparable results.

    \b
    Examples:
      runner benchmarks
      runner submit cnn-digits --workers 2
      runner submit cnn-digits --set lr=0.1 --set batch_size=64 --dry-run
      runner runs
      runner logs RUN --rank 1 --follow
      runner data fetch cifar10
      runner sweep cnn-digits --workers 1,2 --runs 3
      runner report STUDY
      runner check RUN
      runner teardown --stack gke-gpu-8

    \b
    Exit codes: 0 done; 1 a failure, or a run that did not succeed; 2 bad input;
    130 Ctrl-C, 129 SIGHUP, 143 SIGTERM (the followed run is cancelled, its record kept).
    """
    configure_logging(verbose)
    ctx.obj = Settings(own_folder(results_dir), debug)
    if plugins:
        _load_plugins(plugins, debug)


def _load_plugins(plugins: tuple[str, ...], debug: bool) -> None:
    """The plugins named before the command, loaded as `submit --plugin` loads them."""
    from runner.cli.common import fail
    from workloads.plugins import loading
    from workloads.plugins.registry import PluginError

    try:
        for plugin in plugins:
            loading.load(plugin)
    except PluginError as err:
        if debug:
            raise
        fail(str(err))


PLUGIN_HELP = "Load this plugin first (as submit --plugin does); repeatable."


@main.command()
@click.argument("benchmark", required=False)
@click.option("--plugin", "plugins", multiple=True, metavar="MODULE_OR_PATH", help=PLUGIN_HELP)
@handle_errors
def benchmarks(benchmark: str | None, plugins: tuple[str, ...]) -> None:
    """List the benchmarks with their task, target and defaults; with BENCHMARK, the keys
    --set takes for it: value, what it accepts, and whether changing it keeps the run in
    the closed division.

    \b
    Examples:
      runner benchmarks
      runner benchmarks transformer-wmt17
      runner benchmarks --plugin path/to/my_benchmark
    """
    from workloads.plugins import loading

    for plugin in plugins:
        loading.load(plugin)
    if benchmark is None:
        from runner.cli.catalog import benchmarks_table
        from runner.job import cards  # the cards, not the benchmarks' code, while unchanged

        click.echo(benchmarks_table(cards.listed()))
        return
    from runner.cli.views import keys_table
    from runner.job.spec import get_benchmark  # resolving one: the whole job model

    console.print(keys_table(get_benchmark(benchmark)))


@main.command()
@click.option("--plugin", "plugins", multiple=True, metavar="MODULE_OR_PATH", help=PLUGIN_HELP)
@handle_errors
def plugins(plugins: tuple[str, ...]) -> None:
    """List every extension point's entries (models, data sets, tasks, strategies,
    optimizers, schedules, policies, benchmarks) and where each comes from: built in, an
    installed package (its entry points, `stackbench.<point>`), or a --plugin path.

    \b
    Examples:
      runner plugins
      runner plugins --plugin examples/stackbench-example
    """
    from runner.cli.catalog import plugins_table
    from workloads.plugins import loading, points

    for plugin in plugins:
        loading.load(plugin)
    rows = [
        (registry.point, name, entry.origin)
        for registry in points.POINTS
        for name, entry in registry.entries().items()
    ]
    click.echo(plugins_table(rows))


for _module in (submit, runs, data, study, stack, dashboard, doctor):
    for _command in _module.COMMANDS:
        main.add_command(_command)

if _PREVIOUS_SIGINT is not None:
    signal.signal(signal.SIGINT, _PREVIOUS_SIGINT)
