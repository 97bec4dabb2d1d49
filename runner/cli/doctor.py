"""`runner doctor`: check this machine for what a local run, or a stack, needs."""

from __future__ import annotations

import sys

import click

from runner.cli.common import EXIT_FAILED, Settings, console, handle_errors, pass_settings, plain
from runner.errors import RunnerError


@click.command()
@click.option(
    "--stack", metavar="NAME", default=None,
    help="Check every step from zero to `runner submit --stack NAME` instead.",
)  # fmt: skip
@pass_settings
@handle_errors
def doctor(settings: Settings, stack: str | None) -> None:
    """Check what running here (or, with --stack, on that stack) needs, one line a step.

    Each step that is missing is named with the command that does it; nothing is
    installed or changed. Exit 1 while a required step is missing.

    \b
    Examples:
      runner doctor
      runner doctor --stack kind
      runner doctor --stack gke-gpu-8
    See docs/clusters.md for the steps in order.
    """
    if stack is None:
        from runner.doctor import local

        checks = local.checks(settings.results_dir)
    else:
        from runner.doctor import stack as stack_checks
        from runner.stack.pulumi_cli import project_dir

        project = project_dir()
        if project is None:
            raise RunnerError("no Pulumi.yaml here or above: run runner doctor --stack from the "
                              "stackbench folder")  # fmt: skip
        checks = stack_checks.checks(project, stack)
    for check in checks:
        style = "green" if check.ok else ("yellow" if check.optional else "red")
        head, _, rest = check.line().partition(" ")
        console.print(f"[{style}]{head}[/{style}] {plain(rest.lstrip())}", soft_wrap=True)
    if not all(c.ok or c.optional for c in checks):
        sys.exit(EXIT_FAILED)
    console.print("ready" + (f": runner submit cnn-digits --stack {stack}" if stack else ""))


COMMANDS = (doctor,)
