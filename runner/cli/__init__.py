"""The `runner` command line: a thin shell over runner.api.

Bad input exits 2 with what to change; an operational failure exits 1 with the next command
to run; a run that fails exits 1, a cancelled one 130.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

from runner import api
from runner.cli import progress, views
from runner.errors import RunnerError, SpecError

F = TypeVar("F", bound=Callable[..., Any])
console = Console()
errors = Console(stderr=True)


def handle_errors(fn: F) -> F:
    """SpecError -> usage error (exit 2), RunnerError -> message and exit 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as err:
            raise click.BadParameter(str(err), param_hint=err.param) from None
        except RunnerError as err:
            errors.print(f"[red]error:[/red] {err}")
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--results-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
    envvar="STACKBENCH_RESULTS", show_default=True, help="Where run directories live.",
)  # fmt: skip
@click.pass_context
def main(ctx: click.Context, results_dir: Path) -> None:
    """Run stackbench benchmarks locally or on a cluster and collect comparable results.

    \b
    Examples:
      runner benchmarks
      runner submit cnn-digits --local --workers 2
      runner submit cnn-digits --set lr=0.1 --set batch_size=64 --dry-run
      runner runs
      runner logs RUN --rank 1 --follow
      runner data fetch cifar10
      runner sweep cnn-digits --workers 1,2 --runs 3 --local
      runner report STUDY
      runner check RUN
      runner teardown --stack gke-gpu-8
    """
    ctx.obj = results_dir


@main.command()
@click.argument("benchmark", required=False)
@handle_errors
def benchmarks(benchmark: str | None) -> None:
    """List the benchmarks with their task, target and defaults; with BENCHMARK, the keys
    --set takes for it: value, what it accepts, and whether changing it keeps the run in
    the closed division.

    \b
    Examples:
      runner benchmarks
      runner benchmarks transformer-wmt17
    """
    from runner.job.benchmarks import BENCHMARKS
    from runner.job.spec import get_benchmark

    if benchmark is None:
        console.print(views.benchmarks_table(list(BENCHMARKS.values())))
        return
    console.print(views.keys_table(get_benchmark(benchmark)))


@main.command()
@click.argument("benchmark")
@click.option("--local", "local", is_flag=True, help="Run here with torchrun (the default).")
@click.option("--stack", default=None, help="Run on the cluster of this Pulumi stack.")
@click.option(
    "--kubeconfig", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
    help="Run on a cluster made elsewhere (with --image).",
)  # fmt: skip
@click.option("--context", default=None, help="Kubeconfig context (with --kubeconfig).")
@click.option("--job-api", type=click.Choice(["trainjob", "pytorchjob"]), default=None,
              help="Kubeflow API (default: the stack's, else trainjob).")  # fmt: skip
@click.option("--image", default=None, help="Training image (digest or version tag).")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Nodes (cluster runs).")  # fmt: skip
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Processes per node (default: the benchmark's).")  # fmt: skip
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config value; repeatable (non-tunables: open division).",
)
@click.option("--pending-timeout", type=click.FloatRange(min=1), default=None, metavar="SECONDS",
              help="Cancel a cluster job still pending after this long, saying why.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the resolved job (YAML for a cluster).")
@click.option("--detach", is_flag=True, help="Start the run and return; follow with `runner logs`.")
@click.pass_obj
@handle_errors
def submit(
    results_dir: Path, benchmark: str, local: bool, stack: str | None, kubeconfig: Path | None,
    context: str | None, job_api: str | None, image: str | None, nodes: int,
    workers: int | None, device: str, overrides: tuple[str, ...],
    pending_timeout: float | None, dry_run: bool, detach: bool,
) -> None:  # fmt: skip
    """Resolve BENCHMARK into a job and run it, following it to the end.

    \b
    Examples:
      runner submit cnn-digits --local --workers 2
      runner submit cnn-digits --set strategy=allreduce --set max_epochs=5
      runner submit cnn-digits --workers 4 --detach
      runner submit cnn-digits --stack kind --dry-run
      runner submit cnn-digits --kubeconfig ~/.kube/config --image REG/stackbench@sha256:...
      runner submit allreduce-micro --workers 2 --set max_elements=1000000
    Ctrl-C cancels the run and keeps what it recorded.
    """
    from runner.job.spec import Placement, get_benchmark, resolve

    remote = stack is not None or kubeconfig is not None
    if local and remote:
        raise click.UsageError("--local runs here; drop it to use --stack or --kubeconfig")
    if not remote:
        for name, value in (("--context", context), ("--job-api", job_api), ("--image", image),
                            ("--pending-timeout", pending_timeout)):  # fmt: skip
            if value is not None:
                raise click.UsageError(f"{name} applies to cluster runs (--stack/--kubeconfig)")
        if nodes != 1:
            raise click.UsageError("--nodes applies to cluster runs; locally use --workers")
    bench = get_benchmark(benchmark)
    per_node = workers if workers is not None else bench.default_workers
    placement = Placement(num_nodes=nodes, procs_per_node=per_node, device=device)  # type: ignore[arg-type]
    spec = resolve(benchmark, overrides, placement)
    if remote:
        _submit_remote(results_dir, spec, (stack, kubeconfig, context, job_api, image),
                       pending_timeout, dry_run, detach)  # fmt: skip
    else:
        _submit_local(results_dir, spec, dry_run, detach)


def _submit_local(results_dir: Path, spec: Any, dry_run: bool, detach: bool) -> None:
    from runner.backends.local.backend import LocalBackend
    from runner.job.spec import workload_argv

    if dry_run:
        console.print_json(spec.to_json())
        argv = workload_argv(spec, output_dir=str(results_dir / spec.run_id))
        console.print(f"torchrun --standalone --nproc-per-node {spec.placement.procs_per_node} "
                      + " ".join(_quote(a) for a in argv[1:]),
                      soft_wrap=True, markup=False)  # fmt: skip
        return
    _run(results_dir, api.submit(spec, LocalBackend(results_dir), results_dir, "local"), detach)


def _submit_remote(
    results_dir: Path, spec: Any, where: tuple[Any, ...], pending_timeout: float | None,
    dry_run: bool, detach: bool,
) -> None:  # fmt: skip
    from runner.backends.kubernetes.backend import KubernetesBackend
    from runner.backends.kubernetes.connection import connect
    from runner.backends.kubernetes.render import render, to_yaml

    conn = connect(*where)
    manifest = render(spec, conn)  # validates placement against the cluster before any change
    if dry_run:
        click.echo(to_yaml(manifest), nl=False)
        return
    with KubernetesBackend(conn, results_root=results_dir, pending_timeout_s=pending_timeout) as b:
        run = api.submit(spec, b, results_dir, "kubernetes")
    _run(results_dir, run, detach)


def _run(results_dir: Path, run: api.Run, detach: bool) -> None:
    from workloads.microconfig import AllReduceMicroConfig

    spec = run.record.spec
    console.print(f"run [bold]{run.run_id}[/bold] ({spec.division} division) in {run.run_dir}")
    if detach:
        console.print(f"follow it with: runner logs {run.run_id} --follow")
        return
    try:
        if isinstance(spec.config, AllReduceMicroConfig):
            status = progress.follow_measurements(console, results_dir, run)
        else:
            status = progress.follow_training(
                console, results_dir, run, spec.config.run.max_epochs, spec.config.target_metric
            )
    except KeyboardInterrupt:
        errors.print("cancelling ...")
        status = api.cancel(results_dir, run)
        errors.print(f"{views.state_text(status)}; what was recorded is in {run.run_dir}")
        sys.exit(130)
    if not run.handle.startswith("local://") and status.state.value == "SUCCEEDED":
        missing = api.fetch(results_dir, run)  # results home, then the job is deleted
        if missing:
            errors.print(f"[yellow]incomplete results[/yellow]: {'; '.join(missing)}")
    _finish(run, status)


def _finish(run: api.Run, status: Any) -> None:
    from runner.results import rundir

    summary = rundir.read_summary(run.run_dir)
    if summary and summary.get("kind") == "allreduce-micro":
        console.print(views.allreduce_table(summary))
    elif summary:
        console.print(views.summary_table(summary))
    console.print(f"{views.state_text(status)}  results: {run.run_dir}")
    if status.state.value != "SUCCEEDED":
        console.print(f"see the logs: runner logs {run.run_id} --rank {status.failed_rank or 0}")
        sys.exit(1)


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
@handle_errors
def runs(results_dir: Path, as_json: bool) -> None:
    """List runs in the results directory with their state and headline result."""
    infos = api.list_runs(results_dir)
    if as_json:
        click.echo(json.dumps([views.run_json(i) for i in infos], indent=2))
    elif not infos:
        console.print(f"no runs under {results_dir}/; start one with `runner submit cnn-digits`")
    else:
        console.print(views.runs_table(infos))


@main.command()
@click.argument("run_id", metavar="RUN")
@click.pass_obj
@handle_errors
def status(results_dir: Path, run_id: str) -> None:
    """Show a run's state (and why it failed or is pending)."""
    run = api.open_run(results_dir, run_id)
    state = api.status(results_dir, run)
    console.print(f"{run.run_id}: {views.state_text(state)}")
    if state.since:
        console.print(f"since {state.since}")


@main.command()
@click.argument("run_id", metavar="RUN")
@click.option("--rank", type=int, default=0, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the run ends.")
@click.pass_obj
@handle_errors
def logs(results_dir: Path, run_id: str, rank: int, follow: bool) -> None:
    """Print one rank's log."""
    run = api.open_run(results_dir, run_id)
    for line in api.logs(results_dir, run, rank, follow):
        click.echo(line)


@main.command()
@click.argument("run_id", metavar="RUN")
@click.pass_obj
@handle_errors
def fetch(results_dir: Path, run_id: str) -> None:
    """Bring a run's results into its run directory and check they are complete."""
    run = api.open_run(results_dir, run_id)
    missing = api.fetch(results_dir, run)
    if missing:
        raise RunnerError(f"{run.run_dir} is incomplete; missing: {'; '.join(missing)}")
    console.print(f"[green]complete[/green]: {run.run_dir}")


@main.command()
@click.argument("run_id", metavar="RUN")
@click.pass_obj
@handle_errors
def cancel(results_dir: Path, run_id: str) -> None:
    """Stop a run; does nothing to a finished one."""
    run = api.open_run(results_dir, run_id)
    console.print(f"{run.run_id}: {views.state_text(api.cancel(results_dir, run))}")


@main.group()
def data() -> None:
    """Download and prepare data sets (outside any benchmark's clock).

    \b
    Examples:
      runner data fetch cifar10
      runner data fetch epsilon --dir /mnt/data
      runner data fetch wmt17 --dir /mnt/data
      runner data fetch cifar10 --mirror http://mirror.internal/datasets
    """


@data.command("fetch")
@click.argument("name", metavar="NAME")
@click.option(
    "--dir", "directory", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Data directory (default: $STACKBENCH_DATA, else ~/.cache/stackbench/data); "
    "runs read it through config data_dir.",
)  # fmt: skip
@click.option(
    "--mirror", metavar="URL", default=None,
    help="Download URL/<file name> instead of the published URL; checksums are still checked.",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Download and prepare again even if present.")
@handle_errors
def fetch_data(name: str, directory: Path | None, mirror: str | None, force: bool) -> None:
    """Download data set NAME, verify its published checksums and prepare it.

    NAME is cifar10, epsilon, wikitext2, wmt16 or wmt17. The WMT en-de sets are large: wmt16
    downloads about 1.65 GB and wmt17 about 1.74 GB (1.58 GB of it, Europarl v7 and Common
    Crawl, the same files), then extracts the English and German text to DIR/NAME/raw and
    tokenizes it into DIR/NAME/cache. Verified downloads stay in DIR/downloads, so preparing
    again never downloads again.
    """
    from runner.datasets import fetch as datasets
    from workloads.data import default_data_dir

    if name not in datasets.DATASETS:
        raise click.BadParameter(
            f"unknown data set {name!r}; choose one of: {', '.join(datasets.DATASETS)}",
            param_hint="NAME",
        )
    root = directory or default_data_dir()
    if datasets.is_prepared(name, root) and not force:
        console.print(f"{name} is already prepared in {datasets.prepared_path(name, root)}")
        return
    columns = (TextColumn("{task.description}"), BarColumn(), _AmountColumn())
    tasks: dict[str, Any] = {}
    with Progress(*columns, TimeElapsedColumn(), console=console) as bar:

        def on_progress(what: str, done: int, total: int | None, unit: str) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total, unit=unit)
            bar.update(tasks[what], completed=done)

        path = datasets.fetch(name, root, mirror=mirror, force=force, progress=on_progress)
    console.print(f"[green]ready[/green]: {path}")
    if root != default_data_dir():
        console.print(f"runs read it with: --set data_dir={root}")


class _AmountColumn(ProgressColumn):
    """Bytes (with speed) for downloads, counts for conversions."""

    def __init__(self) -> None:
        super().__init__()
        self._bytes, self._speed = DownloadColumn(), TransferSpeedColumn()
        self._count = MofNCompleteColumn()

    def render(self, task: Any) -> Any:
        if task.fields.get("unit") == "bytes":
            return f"{self._bytes.render(task)} {self._speed.render(task)}"
        return self._count.render(task)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


# sweep, report, cost and teardown live in runner.cli.results, which imports this module's
# helpers; registered last, once those exist.
from runner.cli.results import check, cost, report, sweep, teardown  # noqa: E402

for _command in (sweep, report, check, cost, teardown):
    main.add_command(_command)
