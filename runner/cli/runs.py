"""The commands about runs that exist: runs, status, logs, fetch, cancel, join, check."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from runner.cli.common import (
    Settings,
    confirm,
    console,
    errors,
    handle_errors,
    pass_settings,
    plain,
    require,
    run_argument,
    terminal_safe,
    yes_option,
)
from runner.cli.lazy import deferred_module
from runner.errors import RunInputError, RunnerError, SpecError

if TYPE_CHECKING:
    from runner import api
    from runner.cli import views
else:  # imported by the command that runs (runner.cli.lazy)
    api = deferred_module("runner.api")
    views = deferred_module("runner.cli.views")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@pass_settings
@handle_errors
def runs(settings: Settings, as_json: bool) -> None:
    """List runs in the results directory with their state and headline result.

    A run directory that cannot be read is listed as DAMAGED with the file and the problem.
    Cluster runs show their last recorded state; `runner status RUN` asks the cluster.

    \b
    --json: a list, newest first, every entry with the same keys: run_id, benchmark, backend,
    handle, world_size, division, status (state.json's fields), run_dir, summary,
    summary_damage, damage. A damaged run's status.state is DAMAGED, its status.reason and
    damage say which file and what is wrong, and what could not be read is null.
    """
    from runner.cli import listing  # rows from the run index: no record read that is known

    root = settings.results_dir
    found = listing.rows(root, listing.JSON if as_json else listing.TABLE)
    if as_json:
        import json

        click.echo(json.dumps([listing.as_json(root, n, row) for n, row in found], indent=2))
    elif not found:
        shown = plain(str(root))
        console.print(f"no runs under {shown}/; start one with `runner submit cnn-digits`")
    else:
        # print, not click.echo: click swaps an ASCII stdout for UTF-8, where the escaping set
        # up at start (common.escape_unencodable) is what a C locale's reader can take.
        print(listing.table(found, colour=sys.stdout.isatty()))


@click.command()
@run_argument
@pass_settings
@handle_errors
def status(settings: Settings, run_id: str) -> None:
    """Show a run's state (and why it failed or is pending)."""
    run = api.open_run(settings.results_dir, run_id)
    state = api.status(settings.results_dir, run)
    console.print(f"{views.plain(run.run_id)}: {views.state_text(state)}")
    if state.since:
        console.print(f"since {views.plain(state.since)}")


@click.command()
@run_argument
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Which rank's log (elastic runs: worker wN's).",
)
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the run ends.")
@click.option("--raw", is_flag=True, help="Print event lines as logged (`:::MLLOG {json}`).")
@pass_settings
@handle_errors
def logs(settings: Settings, run_id: str, rank: int, follow: bool, raw: bool) -> None:
    """Print one rank's log; events are shown as readable lines unless --raw.

    \b
    Examples:
      runner logs RUN
      runner logs RUN --rank 1 --follow
      runner logs RUN --raw | grep :::MLLOG
    """
    from contract.events import RUN_START, parse_line
    from runner.results.eventtext import event_text

    run = api.open_run(settings.results_dir, run_id)
    _check_rank(run, rank)
    start_ms: int | None = None
    shown = terminal_safe if sys.stdout.isatty() else str  # a pipe gets the bytes as they are
    for line in api.logs(settings.results_dir, run, rank, follow):
        event = None if raw else parse_line(line)
        if event is None:
            click.echo(shown(line))
            continue
        if event["key"] == RUN_START:
            start_ms = event["time_ms"]
        click.echo(shown(event_text(event, start_ms)))


def _check_rank(run: api.Run, rank: int) -> None:
    """A rank the run never had is bad input (exit 2), said before any backend is asked. An
    elastic run's joiners are ranks MAX, MAX+1, ...: whether one joined is the backend's to
    say."""
    placement = run.record.spec.placement
    if not placement.elastic and rank >= placement.world_size:
        raise RunInputError(
            f"rank {rank} does not exist; this run has ranks 0-{placement.world_size - 1}"
        )


@click.command()
@run_argument
@click.option("--max-file-mb", type=click.IntRange(min=1), default=128, show_default=True,
              help="The largest result file copied from a cluster's results store.")  # fmt: skip
@click.option("--max-run-mb", type=click.IntRange(min=1), default=256, show_default=True,
              help="The most copied from the store for one run.")  # fmt: skip
@pass_settings
@handle_errors
def fetch(settings: Settings, run_id: str, max_file_mb: int, max_run_mb: int) -> None:
    """Bring a run's results into its run directory and check they are complete.

    A cluster's results store is read without following links and within the caps: a file
    or a run beyond them is refused, not copied (a result file is a few MiB).
    """
    if max_file_mb > max_run_mb:
        raise SpecError("--max-file-mb", f"must not exceed --max-run-mb ({max_run_mb})")
    run = api.open_run(settings.results_dir, run_id)
    missing = api.fetch(settings.results_dir, run, (max_file_mb, max_run_mb))
    if missing:
        raise RunnerError(f"{run.run_dir} is incomplete; missing: {'; '.join(missing)}")
    console.print(f"[green]complete[/green]: {views.plain(str(run.run_dir))}")


@click.command()
@run_argument
@yes_option
@pass_settings
@handle_errors
def cancel(settings: Settings, run_id: str, yes: bool) -> None:
    """Stop a run, keeping what it recorded; does nothing to a finished one."""
    run = api.open_run(settings.results_dir, run_id)
    if not api.status(settings.results_dir, run).state.finished:
        confirm(f"Cancel {terminal_safe(run.run_id)}?", yes)
    cancelled = views.state_text(api.cancel(settings.results_dir, run))
    console.print(f"{views.plain(run.run_id)}: {cancelled}")


@click.command()
@run_argument
@pass_settings
@handle_errors
def join(settings: Settings, run_id: str) -> None:
    """Start one more worker in a running elastic run (`--workers MIN:MAX`), up to MAX.

    \b
    A run starts with MAX workers, so a join is refused until a worker has left; it brings
    the run back up. The worker joins at the run's next decision point with the current
    weights, optimizer state, step and place in the epoch. A local run only.
    Examples:
      runner join RUN
    """
    run = api.open_run(settings.results_dir, run_id)
    if not run.record.spec.placement.elastic:  # the user's choice of run: bad input (exit 2)
        raise RunInputError(
            f"{run.run_id} is not elastic; only a run submitted with --workers MIN:MAX takes "
            "a joining worker"
        )
    console.print(f"{views.plain(run.run_id)}: {views.plain(api.join(settings.results_dir, run))}")


@click.command()
@run_argument
@pass_settings
@handle_errors
def check(settings: Settings, run_id: str) -> None:
    """Check RUN's event log against the MLPerf compliance rules of its benchmark.

    \b
    Examples:
      runner check RUN
      runner --results-dir /mnt/results check RUN
    Runs MLCommons' compliance checker (mlperf-logging, in the `test` extra) with stackbench's
    rules (workloads/compliance/): a closed-division run against its benchmark's rules and the
    common ones, an open-division run against the common ones. Exits 1 if a rule fails.
    """
    require("mlperf_logging", "runner check")
    run = api.open_run(settings.results_dir, run_id)
    result = api.check(settings.results_dir, run)
    click.echo(f"rules: {result.ruleset}")
    for message in result.messages:  # plain text: they quote Python and JSON
        click.echo(message.strip() + "\n" + "-" * 30)
    if not result.ok:
        failed = len(result.messages)
        errors.print(f"[red]not compliant[/red]: {views.plain(run.run_id)} ({failed} failed)")
        sys.exit(1)
    console.print(f"[green]compliant[/green]: {views.plain(run.run_id)}")


COMMANDS = (runs, status, logs, fetch, cancel, join, check)
