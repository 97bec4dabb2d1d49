"""The commands that turn runs into answers: `sweep` (a study: a grid of runs) and `report`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from runner.cli.common import (
    Settings,
    console,
    device_option,
    errors,
    escape,
    exit_code,
    handle_errors,
    no_blank_ids,
    own_folder,
    pass_settings,
    per_node_option,
    require,
    signals_interrupt,
    threads_option,
    warn_oversubscribed,
    where_options,
)
from runner.cli.lazy import deferred_module, deferred_name
from runner.errors import Interrupted, RunnerError, SpecError

if TYPE_CHECKING:
    from contract import events, files
    from runner import api
    from runner.cli import views
    from runner.cli.progress import bar, metric_label
    from runner.job.target import ClusterOptions
else:  # imported by the command that runs (runner.cli.lazy)
    api = deferred_module("runner.api")
    events = deferred_module("contract.events")
    files = deferred_module("contract.files")
    views = deferred_module("runner.cli.views")
    bar = deferred_name("runner.cli.progress", "bar")
    metric_label = deferred_name("runner.cli.progress", "metric_label")
    ClusterOptions = deferred_name("runner.job.target", "ClusterOptions")


@click.command()
@click.argument("benchmark")
@where_options
@click.option("--workers", "workers_text", required=True, metavar="N,N,...",
              help="Worker counts to sweep (processes in all), e.g. 1,2,4,8.")  # fmt: skip
@per_node_option
@threads_option
@device_option
@click.option("--link", "link_text", metavar="LINK[,LINK...]", default=None,
              help="Links to sweep (100mbit,1gbit; a delay or loss follows its rate: "
              "25mbit,delay=5ms,1gbit,delay=5ms): shaped links here, pod bandwidth limits on "
              "a cluster.")  # fmt: skip
@click.option("--runs", type=click.IntRange(min=1, max=1000), default=None,
              help="Runs per cell (default: the benchmark's; 5+ for MLPerf stats).")  # fmt: skip
@click.option("--set", "set_items", multiple=True, metavar="KEY=V[,V...]",
              help="One value for every run, or several (a,b) to sweep; repeatable.")  # fmt: skip
@pass_settings
@handle_errors
def sweep(
    settings: Settings, benchmark: str, local: bool, stack: str | None, kubeconfig: Path | None,
    context: str | None, job_api: str | None, image: str | None, runtime: str | None,
    pending_timeout: float | None,
    workers_text: str, per_node: int | None, threads_per_worker: int | None, device: str,
    link_text: str | None,
    runs: int | None, set_items: tuple[str, ...],
) -> None:  # fmt: skip
    """Run BENCHMARK over a grid (workers x --set values x runs) and record it as a study.

    \b
    Examples:
      runner sweep cnn-digits --workers 1,2 --runs 3
      runner sweep cnn-digits --workers 1,2,4 --runs 5 --set strategy=ddp,allreduce
      runner sweep vgg11-cifar10 --workers 2,4 --link 25mbit,100mbit --set strategy=ddp,allreduce
      runner sweep allreduce-micro --workers 2 --link 1gbit,1gbit,delay=1ms,1gbit,delay=5ms
      runner sweep resnet20-cifar10 --workers 1,2,4,8 --stack gke-gpu-8 --device cuda
    Runs go one after another, here unless a cluster is named. Ctrl-C, SIGTERM or SIGHUP cancel
    the current run and keep the study, marked partial, with every run it started.
    Then: runner report STUDY
    """
    from runner import sweep as sweeps
    from runner.job.spec import get_benchmark
    from runner.job.target import make_target
    from runner.results import study as studies

    workers = studies.parse_workers(workers_text)
    links = studies.parse_links(link_text)
    cluster = ClusterOptions(stack, kubeconfig, context, job_api, image, pending_timeout, runtime)
    target = make_target(
        settings.results_dir, local, cluster, per_node, device,  # type: ignore[arg-type]
        threads_per_worker,
    )  # fmt: skip
    target = sweeps.holding_threads(target, workers)
    runs_per_cell = runs or get_benchmark(benchmark).default_runs
    study = sweeps.new_study(
        benchmark, workers, set_items, runs_per_cell, target, sweeps.base_seed(set_items), links
    )
    warn_oversubscribed(target.placement(max(workers)))
    sweeps.check_writable(settings.results_dir)  # before the header: nothing said that fails
    axes = "".join(f" x {len(v)} {k}" for k, v in study.grid.items())
    axes += f" x {len(links)} links" if len(links) > 1 else ""
    console.print(f"study [bold]{study.study_id}[/bold]: {_count(len(study.runs), 'run')} "
                  f"({_count(len(workers), 'worker count')} x {_count(runs_per_cell, 'run')}"
                  f"{axes})")  # fmt: skip
    try:
        with signals_interrupt():
            study = _run_with_progress(settings.results_dir, study, target)
    except (KeyboardInterrupt, Interrupted) as err:
        errors.print(f"interrupted; the study is partial: runner report {study.study_id}")
        sys.exit(exit_code(err))
    console.print(f"study {study.study_id} {study.state}; next: runner report {study.study_id}")


def _run_with_progress(results_dir: Path, study: Any, target: Any) -> Any:
    from runner import sweep as sweeps
    from runner.job.benchmarks import BENCHMARKS

    progress = bar(console)
    total = len(study.runs)
    config = BENCHMARKS[study.benchmark].config
    label = metric_label(getattr(config, "target_metric", "value"))  # micro-benchmarks: none
    with progress:
        task = progress.add_task("starting", total=total, info="")

        def on_start(i: int, planned: Any, run: api.Run) -> None:
            cell = ", ".join(f"{k}={v}" for k, v in planned.sets)
            link = f" on {planned.link} links" if planned.link else ""
            desc = f"run {i + 1}/{total}: {_count(planned.workers, 'worker')}{link}"
            desc += f", {cell}" if cell else ""
            progress.update(task, description=f"{desc}, seed {planned.seed}", info="")

        def on_event(event: dict[str, Any]) -> None:
            value = event.get("value")
            if event.get("key") == events.EVAL_ACCURACY and isinstance(value, int | float):
                meta = events.metadata(event)
                progress.update(task, info=f"epoch {meta.get('epoch_num')} {label} {value:.4f}")

        def on_end(i: int, planned: Any, outcome: api.Outcome) -> None:
            from runner.results import rundir

            summary = rundir.read_summary(outcome.run.run_dir)
            headline = views.plain(views.headline(summary, outcome.status))
            progress.console.print(f"  {outcome.run.run_id}: {views.state_text(outcome.status)}  "
                                   f"{headline}")  # fmt: skip
            progress.advance(task)

        callbacks = sweeps.Callbacks(on_start, on_event, on_end)
        return sweeps.run_study(results_dir, study, target, callbacks)


def _count(n: int, noun: str) -> str:
    """`1 run`, `3 runs`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


@click.command()
@click.argument("ids", nargs=-1, required=True, metavar="RUN|STUDY...", callback=no_blank_ids)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where figures and the export go (default: the study's report/ folder, "
                   "else results/reports/<name>/, one per set of runs and studies). A file "
                   "an earlier report wrote there (listed in its .stackbench-report.json) and "
                   "this one does not is removed; nothing else is.")  # fmt: skip
@click.option("--format", "fmt", type=click.Choice(["md", "html"]), default="md",
              show_default=True, help="Export of the whole report.")  # fmt: skip
@click.option("--allow-mixed", is_flag=True,
              help="Show runs with different closed-division configs side by side.")  # fmt: skip
@click.option("--group-by", "group_by", metavar="KEY", default=None,
              help="One series per value of this configuration key (any --set key, workers, "
                   "link, division, policy, plugin), as the dashboard groups runs.")  # fmt: skip
@pass_settings
@handle_errors
def report(
    settings: Settings,
    ids: tuple[str, ...],
    out_dir: Path | None,
    fmt: str,
    allow_mixed: bool,
    group_by: str | None,
) -> None:
    """Tables, figures (PNG and SVG) and a Markdown or HTML export of runs and studies.

    \b
    Examples:
      runner report STUDY
      runner report STUDY_A STUDY_B --format html
      runner report RUN1 RUN2 RUN3 --allow-mixed
      runner report STUDY --group-by link
    Time to accuracy is aggregated by the MLPerf rule (5+ runs: drop fastest and slowest).
    Needs the `report` extra (matplotlib).
    """
    require("matplotlib", "runner report")
    from runner.results import export
    from runner.results import report as reports
    from runner.stack.pulumi_cli import project_dir

    results_dir = settings.results_dir
    runs, title, damaged = reports.collect(results_dir, ids)
    for problem in damaged:
        errors.print(f"[yellow]left out, damaged[/yellow]: {escape(problem)}")
    costs = reports.cluster_costs(runs, project_dir())
    built = reports.build(runs, title, allow_mixed=allow_mixed, costs=costs, group_by=group_by)
    for table in export.tables(built):
        console.print(views.plain_table(table))
    given_out = out_dir is not None
    if out_dir is not None:
        out_dir = own_folder(out_dir, "--out")
    else:
        out_dir = reports.default_folder(results_dir, ids)
        _refuse_links(results_dir, out_dir)
    try:
        paths, written = _write_report(built, out_dir, fmt)
    except OSError as err:
        raise _unwritable(err, out_dir, given_out) from None
    console.print("figures: " + ", ".join(views.plain(str(p)) for p in paths if p.suffix == ".png"))
    console.print(f"report: {views.plain(str(written))}")


def _write_report(built: Any, out_dir: Path, fmt: str) -> tuple[list[Path], Path]:
    """The figures and the export in `out_dir`; OSError when the disk refuses."""
    from runner.results import export

    paths = export.write_figures(built, out_dir)
    written = export.export_path(out_dir, fmt)
    text = (export.to_markdown if fmt == "md" else export.to_html)(built, paths, out_dir)
    files.write_text(written, text)  # whole, and replacing a planted link, never through it
    export.remove_stale(out_dir, [*paths, written])
    return paths, written


def _refuse_links(results_dir: Path, out_dir: Path) -> None:
    """The default report folder is inside the results directory, which may be shared or a
    copy: a folder on the way there that is a link (reports/ -> ~/) would take the figures
    out of it. Never followed; --out is the way to write elsewhere."""
    path = results_dir
    for part in out_dir.relative_to(results_dir).parts:
        path = path / part
        if path.is_symlink():
            raise RunnerError(
                f"{path} is a symbolic link, which is never followed; remove it, or write "
                "the report elsewhere with --out DIR"
            )


def _unwritable(err: OSError, out_dir: Path, given_out: bool) -> Exception:
    """One line for a report that cannot be written (a read-only or full disk, a folder not
    ours): bad input when the place was the user's --out, else a failure that says to give
    one."""
    where = err.filename or out_dir
    problem = f"cannot write the report to {where}: {err.strerror or err}"
    if given_out:
        return SpecError("--out", f"{problem}; choose another folder")
    return RunnerError(f"{problem}; write it elsewhere with --out DIR")


COMMANDS = (sweep, report)
