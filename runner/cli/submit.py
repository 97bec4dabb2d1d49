"""`runner submit`: resolve a benchmark into a job, run it and follow it to the end."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from runner.cli.common import (
    WORKERS,
    Settings,
    console,
    device_option,
    errors,
    escape,
    exit_code,
    handle_errors,
    link_option,
    pass_settings,
    per_node_option,
    signals_interrupt,
    threads_option,
    warn_oversubscribed,
    where_options,
)
from runner.cli.lazy import deferred_module, deferred_name
from runner.errors import Interrupted, RunnerError

if TYPE_CHECKING:
    from runner import api
    from runner.cli import views
    from runner.job.target import ClusterOptions
else:  # imported by the command that runs (runner.cli.lazy)
    api = deferred_module("runner.api")
    views = deferred_module("runner.cli.views")
    ClusterOptions = deferred_name("runner.job.target", "ClusterOptions")


@click.command()
@click.argument("benchmark")
@where_options
@click.option("--workers", type=WORKERS, default=None, metavar="N|MIN:MAX",
              help="Worker processes in all (default: the benchmark's); MIN:MAX starts MAX "
              "elastic workers, and the run goes on while MIN are left "
              "(docs/adaptive-elastic.md).")  # fmt: skip
@per_node_option
@threads_option
@device_option
@link_option
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Change a config value; repeatable (non-tunables: open division).")  # fmt: skip
@click.option("--plugin", "plugins", multiple=True, metavar="MODULE_OR_PATH",
              help="Load your own models, strategies, optimizers, policies or benchmark from "
              "a module or path first; repeatable (open division; `runner plugins`).")  # fmt: skip
@click.option("--image-plugins", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="With --image: the JSON list of plugins the image carries "
              "(its /opt/stackbench/plugins/plugins.json); a stack's own are known.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the job and what would run; run nothing.")
@click.option("--detach", is_flag=True, help="Start the run and return; follow with `runner logs`.")
@pass_settings
@handle_errors
def submit(
    settings: Settings, benchmark: str, local: bool, stack: str | None, kubeconfig: Path | None,
    context: str | None, job_api: str | None, image: str | None, runtime: str | None,
    pending_timeout: float | None,
    workers: tuple[int | None, int] | None, per_node: int | None,
    threads_per_worker: int | None, device: str, link: str | None,
    overrides: tuple[str, ...], plugins: tuple[str, ...], image_plugins: Path | None,
    dry_run: bool, detach: bool,
) -> None:  # fmt: skip
    """Resolve BENCHMARK into a job and run it (here, unless a cluster is named), following it
    to the end.

    \b
    Examples:
      runner submit cnn-digits --workers 2
      runner submit cnn-digits --set strategy=allreduce --set max_epochs=5
      runner submit cnn-digits --workers 4 --detach
      runner submit cnn-digits --workers 4 --link 100mbit --set strategy=allreduce
      runner submit cnn-digits --set policy=batch --set batch_size=8 --set lr=0.025
      runner submit cnn-digits --workers 2:3 --set strategy=allreduce
      runner submit cnn-digits --stack kind --dry-run
      runner submit cnn-digits --stack gke-gpu-8 --workers 4 --device cuda
      runner submit cnn-digits --kubeconfig ~/.kube/config --image REG/stackbench@sha256:...
      runner submit allreduce-micro --workers 2 --set max_elements=1000000
      runner submit cnn-digits --workers 2 --plugin examples/topk --set strategy=topk
    Ctrl-C, SIGTERM or SIGHUP cancel the run and keep what it recorded.
    """
    from runner.job.image_plugins import on_image
    from runner.job.spec import get_benchmark, resolve
    from runner.job.target import make_target
    from workloads.plugins import loading

    for plugin in plugins:  # first: the benchmark may be the plugin's
        loading.load(plugin)
    results = settings.results_dir
    cluster = ClusterOptions(stack, kubeconfig, context, job_api, image, pending_timeout, runtime,
                             image_plugins)  # fmt: skip
    target = make_target(
        results, local, cluster, per_node, device, threads_per_worker,  # type: ignore[arg-type]
    )  # fmt: skip
    bench = get_benchmark(benchmark)
    low, high = workers or (None, bench.default_workers)
    spec = resolve(benchmark, overrides, target.placement(high, link, low), plugins=plugins)
    if target.remote:  # the pods load what the image carries, or nothing is submitted
        spec = on_image(spec, target.image_plugins, target.where)
    backend = target.make_backend()
    try:
        if dry_run:  # a cluster's manifest alone on stdout, so that it pipes into kubectl
            if not target.remote:
                console.print_json(spec.to_json())
            click.echo(api.dryrun(spec, backend, results), nl=not target.remote)
            if views.lr_text(spec):
                errors.print(views.lr_text(spec), markup=False)
            warn_oversubscribed(spec.placement)
            return
        warn_oversubscribed(spec.placement)  # before anything starts: the fix is a flag away
        with signals_interrupt():  # a SIGTERM mid-create is recorded, never a silent death
            run = api.submit(spec, backend, results, detach=detach)
    except (KeyboardInterrupt, Interrupted) as err:
        where = results / spec.run_id
        said = f"recorded FAILED in {views.plain(str(where))}" if where.is_dir() else "no record"
        errors.print(f"interrupted while submitting {escape(spec.run_id)}: {said}", soft_wrap=True)
        sys.exit(exit_code(err))
    finally:
        backend.close()
    console.print(  # one line, whatever the width: scripts take the id and path from it
        f"run [bold]{run.run_id}[/bold] ({spec.division} division) in "
        f"{views.plain(str(run.run_dir))}",
        soft_wrap=True,
    )
    for record in spec.plugins:
        console.print(f"with plugin {views.plain(record.label)}", soft_wrap=True)
    if views.lr_text(spec):
        console.print(views.lr_text(spec), markup=False)
    if detach:
        console.print(f"follow it with: runner logs {run.run_id} --follow")
        return
    follow(results, run)


def follow(results: Path, run: api.Run) -> None:
    """Follow a submitted run with live progress, then show its outcome; exit 1 unless it
    SUCCEEDED, 128 + N if signal N stopped the command (the run is cancelled)."""
    view = views.progress_for(console, run.record.spec)
    try:
        with signals_interrupt(), view:
            outcome = api.follow_to_end(
                results, run, api.Callbacks(on_event=view.on_event, on_status=view.on_status)
            )
    except (KeyboardInterrupt, Interrupted) as err:
        recorded = views.plain(str(run.run_dir))
        errors.print(f"{_after_interrupt(results, run)}; what was recorded is in {recorded}",
                     soft_wrap=True)  # fmt: skip
        sys.exit(exit_code(err))
    finish(run, outcome)


def _after_interrupt(results: Path, run: api.Run) -> str:
    """The run's state once it is cancelled, as the last line says it. A second Ctrl-C can stop
    the first cancel half-way, the run still RUNNING for a moment (its supervisor told) or for
    good (not yet told): cancel again, which is quick and does nothing to a finished run, so
    that the line states the final state; a third Ctrl-C leaves it to `runner status`."""
    from contract.files import DamagedFile

    try:
        with signals_interrupt():
            state = api.status(results, run)
            if not state.state.finished:
                state = api.cancel(results, run)
    except (KeyboardInterrupt, Interrupted, RunnerError, DamagedFile) as err:
        why = (
            "interrupted"
            if isinstance(err, KeyboardInterrupt | Interrupted)
            else views.plain(str(err))
        )
        return f"cancelling: {why} (`runner status {escape(run.run_id)}` says how it ended)"
    return views.state_text(state)


def finish(run: api.Run, outcome: api.Outcome) -> None:
    from contract.rundir import rank_log

    views.print_outcome(console, run, outcome)
    if outcome.status.state.value != "SUCCEEDED":
        rank = outcome.status.failed_rank or 0
        if rank_log(run.run_dir, rank).is_file():  # a job that never had a pod has no log
            console.print(f"see the logs: runner logs {run.run_id} --rank {rank}")
        sys.exit(1)


COMMANDS = (submit,)
