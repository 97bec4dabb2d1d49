"""The commands about a stack's money and end: `cost` and `teardown`."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click

from runner.cli.common import (
    Settings,
    confirm,
    console,
    errors,
    escape,
    exit_code,
    handle_errors,
    pass_settings,
    require,
    signals_interrupt,
    yes_option,
)
from runner.errors import Interrupted, RunnerError, SpecError

MAX_HOURS = 1_000_000.0  # a century and more: beyond it, a typo


class Hours(click.ParamType):
    """A lifetime in hours: finite, 0 to MAX_HOURS (FloatRange lets nan and inf through)."""

    name = "hours"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            hours = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of hours", param, ctx)
        if not 0 <= hours <= MAX_HOURS:  # nan fails every comparison
            self.fail(f"{value!r} is not a number of hours from 0 to {MAX_HOURS:,.0f}", param, ctx)
        return hours + 0.0  # -0 is 0


@contextlib.contextmanager
def stack_settings_are_input() -> Iterator[None]:
    """A stack whose settings are missing, unreadable or invalid is the user's to fix: bad
    input to --stack (exit 2), with the one line that says what to change."""
    from runner.stack.settings import StackSettingsError

    try:
        yield
    except StackSettingsError as err:
        raise SpecError("--stack", str(err)) from None


@click.command()
@click.option("--stack", required=True, help="The Pulumi stack to price.")
@click.option("--hours", type=Hours(), default=None,
              help="The stack's lifetime so far, for its total cost.")  # fmt: skip
@pass_settings
@handle_errors
def cost(settings: Settings, stack: str, hours: float | None) -> None:
    """Prices of a stack's shape, the cost of its runs, and of its lifetime.

    \b
    Examples:
      runner cost --stack gke-gpu-8
      runner cost --stack gke-gpu-8 --hours 30
    Prices come from runner/stack/prices.toml (source and date per row); a shape not in it
    shows "unknown price", never $0. The shape is the stack's validated settings and pool
    sizes: a fixed pool is priced at its size, an autoscaled one at its floor plus the
    recorded runs above it; --hours lists what each part counted.
    """
    require("yaml", "runner cost")
    from contract.files import DamagedFile
    from runner.cli.views import plain_table
    from runner.results import export
    from runner.results import report as reports
    from runner.results.runs import load_run
    from runner.stack import cost as costs
    from runner.stack import teardown as teardowns
    from runner.stack.pulumi_cli import project_dir

    project = project_dir()
    if project is None:
        raise RunnerError("no Pulumi.yaml here or above; run this inside the stackbench checkout")
    with stack_settings_are_input():
        shape = costs.load_shape(stack, project)
    prices = costs.stack_prices(costs.load_price_table(), shape)
    runs, damaged = [], []
    for recorded in teardowns.stack_runs(settings.results_dir, stack):
        try:
            runs.append(load_run(recorded.run_dir))
        except DamagedFile as err:  # one damaged run (or unreadable: a socket) must not hide
            damaged.append(f"{recorded.run_id}: left out, {err.path.name} {err.problem}")
    run_costs = reports.cluster_costs(runs, project)
    console.print(plain_table(costs_table(shape, prices)))
    for run in runs:  # a run id is a directory's name: any text
        verbatim(console, f"  {run.run_id}: {export.cost_text(run_costs.get(run.run_id), run)}")
    for line in damaged:
        verbatim(console, f"  {line}")
    if hours is not None:
        used = [costs.RunUse(r.num_nodes, reports.run_duration_s(r)) for r in runs]
        life = costs.lifetime_cost(prices, shape, hours * costs.SECONDS_PER_HOUR, used)
        text = f"${life.usd:,.2f}" if life.usd is not None else f"unknown price ({life.reason})"
        if damaged:  # what they used above an autoscaled floor is unknown
            text += f", not counting {len(damaged)} damaged run(s)"
        verbatim(console, f"lifetime ({hours:g} h, {life.node_hours:.1f} node-h): {text}")
        for part in life.parts:
            usd = f"${part.usd:,.2f}" if part.usd is not None else part.unknown_reason
            verbatim(console, f"  {part.what}: {part.counted}: {usd}")


def costs_table(shape: Any, prices: Any) -> Any:
    from runner.results.export import Table

    def row(what: str, count: str, price: Any) -> tuple[str, ...]:
        usd = f"${price.usd_per_hour:.4f}/h" if price.known else "unknown price"
        return (what, count, usd, "; ".join(price.sources) or price.unknown_reason)

    train, system = shape.training, shape.system
    gpus = f" + {train.gpus_per_node} x {train.gpu_type}" if train.gpus_per_node else ""
    rows = (
        row(f"training node {train.machine_type}{gpus}", train.size.describe(),
            prices.training_node),
        row(f"system node {system.machine_type}", system.size.describe(), prices.system_node),
        row("control plane", "1", prices.control_plane),
    )  # fmt: skip
    title = f"Prices of stack {shape.stack} ({shape.provider} {shape.region})"
    return Table(title, ("what", "nodes", "price", "source (date)"), rows)


@click.command()
@click.option("--stack", required=True, help="The Pulumi stack to destroy.")
@click.option("--force", is_flag=True, help="Destroy even if runs on the stack are unfetched.")
@yes_option
@pass_settings
@handle_errors
def teardown(settings: Settings, stack: str, force: bool, yes: bool) -> None:
    """Destroy a stack once its results are home: guard, cancel jobs, destroy, check.

    \b
    Examples:
      runner teardown --stack gke-gpu-8
      runner teardown --stack gke-gpu-8 --yes       # no question (scripts, CI)
      runner teardown --stack gke-gpu-8 --force     # results still on the cluster are lost
    Refuses while runs on the stack are unfetched (and lists them); asks before destroying.
    """
    require("yaml", "runner teardown")  # the stack's settings say if it is protected
    from runner.stack import teardown as teardowns

    with stack_settings_are_input():
        teardowns.refuse(settings.results_dir, stack, force)
    confirm(f"Destroy stack {stack} and everything in it (pulumi destroy)?", yes)
    try:
        with signals_interrupt():  # SIGTERM and SIGHUP cancel pulumi as Ctrl-C does
            result = teardowns.teardown(settings.results_dir, stack, force, on_line=click.echo)
    except (KeyboardInterrupt, Interrupted) as err:
        again = f"runner teardown --stack {escape(stack)}"
        errors.print(f"teardown interrupted: pulumi has stopped, what it did is above; finish "
                     f"it with `{again}`", soft_wrap=True)  # fmt: skip
        sys.exit(exit_code(err))
    # What pulumi and the cluster said is shown as text: a `[...]` in it is no markup.
    if result.cancel_errors:
        failed = escape("; ".join(result.cancel_errors))
        errors.print(f"[yellow]could not cancel[/yellow]: {failed}", emoji=False)
    if result.leftovers:
        errors.print(f"[red]{len(result.leftovers)} resource(s) still in stack "
                     f"{escape(stack)}'s state:[/red]")  # fmt: skip
        for urn in result.leftovers:
            verbatim(errors, f"  {urn}")
        sys.exit(1)
    console.print(f"[green]stack {escape(stack)} destroyed[/green]: no resources left in its state")
    console.print(f"not checked: {result.unchecked}")


def verbatim(out: Any, line: str) -> None:
    """A line as it is: no markup, emoji codes (`::x::` in a URN) or highlighting, unwrapped
    so that an id or a URN can be copied."""
    out.print(line, markup=False, emoji=False, highlight=False, soft_wrap=True)


COMMANDS = (cost, teardown)
