"""The `runner` commands that turn runs into answers: sweep, report, check, cost, teardown.

A thin shell like runner.cli (which registers these commands on its group): options are
checked here, the work is done by runner.sweep, runner.results.report, runner.api (check),
runner.stack.cost and runner.stack.teardown, and only this module writes to the terminal.
matplotlib is imported by `report` alone.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from runner.cli import console, errors, handle_errors
from runner.errors import RunnerError


@click.command()
@click.argument("benchmark")
@click.option("--workers", "workers_text", required=True, metavar="N,N,...",
              help="Worker counts to sweep, e.g. 1,2,4,8.")  # fmt: skip
@click.option("--runs", type=click.IntRange(min=1), default=None,
              help="Runs per cell (default: the benchmark's; 5+ for MLPerf stats).")  # fmt: skip
@click.option("--set", "set_items", multiple=True, metavar="KEY=V[,V...]",
              help="One value for every run, or several (a,b) to sweep; repeatable.")  # fmt: skip
@click.option("--local", "local", is_flag=True, help="Run here with torchrun.")
@click.option("--stack", default=None, help="Run on the cluster of this Pulumi stack.")
@click.option("--per-node", type=click.IntRange(min=1), default=1, show_default=True,
              help="Processes per node on a stack (workers / per-node = nodes).")  # fmt: skip
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.pass_obj
@handle_errors
def sweep(
    results_dir: Path, benchmark: str, workers_text: str, runs: int | None,
    set_items: tuple[str, ...], local: bool, stack: str | None, per_node: int, device: str,
) -> None:  # fmt: skip
    """Run BENCHMARK over a grid (workers x --set values x runs) and record it as a study.

    \b
    Examples:
      runner sweep cnn-digits --workers 1,2 --runs 3 --local
      runner sweep cnn-digits --workers 1,2,4 --runs 5 --set strategy=ddp,allreduce --local
      runner sweep resnet20-cifar10 --workers 1,2,4,8 --stack gke-gpu-8 --device cuda
    Runs go one after another. Ctrl-C cancels the current run and keeps the study (partial).
    Then: runner report STUDY
    """
    from runner import sweep as sweeps
    from runner.job.spec import get_benchmark
    from runner.results import study as studies

    if local == (stack is not None):
        raise click.UsageError("say where the runs go: --local or --stack NAME")
    if local and (per_node != 1 or device != "cpu"):
        raise click.UsageError("--per-node and --device cuda apply to --stack sweeps")
    workers = studies.parse_workers(workers_text)
    runs_per_cell = runs or get_benchmark(benchmark).default_runs
    target = _target(results_dir, stack, per_node, device)
    seed = sweeps.base_seed(set_items)
    study = sweeps.new_study(benchmark, workers, set_items, runs_per_cell, target, seed)
    console.print(f"study [bold]{study.study_id}[/bold]: {len(study.runs)} runs "
                  f"({len(workers)} worker counts x {runs_per_cell} runs"
                  + "".join(f" x {len(v)} {k}" for k, v in study.grid.items()) + ")")  # fmt: skip
    try:
        study = _run_with_progress(results_dir, study, target)
    except KeyboardInterrupt:
        errors.print(f"interrupted; the study is partial: runner report {study.study_id}")
        sys.exit(130)
    console.print(f"study {study.study_id} {study.state}; next: runner report {study.study_id}")


def _target(results_dir: Path, stack: str | None, per_node: int, device: str) -> Any:
    from runner import sweep as sweeps

    if stack is None:
        from runner.backends.local.backend import LocalBackend

        return sweeps.Target("local", lambda: LocalBackend(results_dir))
    from runner.backends.kubernetes.connection import connect

    conn = connect(stack=stack)  # once: a bad stack fails before the first run

    def make() -> Any:
        from runner.backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(conn, results_root=results_dir)

    return sweeps.Target("kubernetes", make, stack, per_node, device)


def _run_with_progress(results_dir: Path, study: Any, target: Any) -> Any:
    from runner import sweep as sweeps
    from runner.cli import views
    from runner.cli.progress import metric_label
    from runner.job.benchmarks import BENCHMARKS

    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), console=console,
    )  # fmt: skip
    total = len(study.runs)
    config = BENCHMARKS[study.benchmark].config
    label = metric_label(getattr(config, "target_metric", "value"))  # micro-benchmarks: none
    with progress:
        task = progress.add_task("starting", total=total, info="")

        def on_start(i: int, planned: Any, run: Any) -> None:
            cell = ", ".join(f"{k}={v}" for k, v in planned.sets)
            desc = f"run {i + 1}/{total}: {planned.workers} workers{', ' + cell if cell else ''}"
            progress.update(task, description=f"{desc}, seed {planned.seed}", info="")

        def on_event(event: dict[str, Any]) -> None:
            if event["key"] == "eval_accuracy":
                epoch = (event.get("metadata") or {}).get("epoch_num")
                progress.update(task, info=f"epoch {epoch} {label} {event['value']:.4f}")

        def on_end(i: int, planned: Any, run: Any, status: Any) -> None:
            from runner.results import rundir

            summary = rundir.read_summary(run.run_dir)
            progress.console.print(f"  {run.run_id}: {views.state_text(status)}  "
                                   f"{views.headline(summary)}")  # fmt: skip
            progress.advance(task)

        callbacks = sweeps.Callbacks(on_start, on_event, on_end)
        return sweeps.run_study(results_dir, study, target, callbacks)


@click.command()
@click.argument("ids", nargs=-1, required=True, metavar="RUN|STUDY...")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where figures and the export go (default: the study's report/ folder, "
                   "else results/reports/<name>/).")  # fmt: skip
@click.option("--format", "fmt", type=click.Choice(["md", "html"]), default="md",
              show_default=True, help="Export of the whole report.")  # fmt: skip
@click.option("--allow-mixed", is_flag=True,
              help="Show runs with different closed-division configs side by side.")  # fmt: skip
@click.pass_obj
@handle_errors
def report(
    results_dir: Path, ids: tuple[str, ...], out_dir: Path | None, fmt: str, allow_mixed: bool
) -> None:
    """Tables, figures (PNG and SVG) and a Markdown or HTML export of runs and studies.

    \b
    Examples:
      runner report STUDY
      runner report STUDY_A STUDY_B --format html
      runner report RUN1 RUN2 RUN3 --allow-mixed
    Time to accuracy is aggregated by the MLPerf rule (5+ runs: drop fastest and slowest).
    """
    from runner.cli.views import plain_table
    from runner.results import report as reports
    from runner.results import study as studies
    from runner.stack.pulumi_cli import project_dir

    runs, title = reports.collect(results_dir, ids)
    costs = reports.cluster_costs(runs, project_dir())
    built = reports.build(runs, title, allow_mixed=allow_mixed, costs=costs)
    for table in reports.tables(built):
        console.print(plain_table(table))
    if out_dir is None:
        study_file = studies.find(results_dir, ids[0]) if len(ids) == 1 else None
        slug = ids[0] if len(ids) == 1 else f"{ids[0]}+{len(ids) - 1}"
        out_dir = study_file.parent / "report" if study_file else results_dir / "reports" / slug
    paths = reports.write_figures(built, out_dir)
    export = out_dir / f"report.{fmt}"
    text = (reports.to_markdown if fmt == "md" else reports.to_html)(built, paths, out_dir)
    export.write_text(text, encoding="utf-8")
    console.print("figures: " + ", ".join(str(p) for p in paths if p.suffix == ".png"))
    console.print(f"report: {export}")


@click.command()
@click.argument("run_id", metavar="RUN")
@click.pass_obj
@handle_errors
def check(results_dir: Path, run_id: str) -> None:
    """Check RUN's event log against the MLPerf compliance rules of its benchmark.

    \b
    Examples:
      runner check RUN
      runner --results-dir /mnt/results check RUN
    Runs MLCommons' compliance checker (pip install mlperf-logging) with stackbench's rules
    (workloads/compliance/): a closed-division run against its benchmark's rules and the
    common ones, an open-division run against the common ones. Exits 1 if a rule fails.
    """
    from runner import api

    run = api.open_run(results_dir, run_id)
    result = api.check(results_dir, run)
    click.echo(f"rules: {result.ruleset}")
    for message in result.messages:  # plain text: they quote Python and JSON
        click.echo(message.strip() + "\n" + "-" * 30)
    if not result.ok:
        errors.print(f"[red]not compliant[/red]: {run.run_id} ({len(result.messages)} failed)")
        sys.exit(1)
    console.print(f"[green]compliant[/green]: {run.run_id}")


@click.command()
@click.option("--stack", required=True, help="The Pulumi stack to price.")
@click.option("--hours", type=click.FloatRange(min=0), default=None,
              help="The stack's lifetime so far, for its total cost.")  # fmt: skip
@click.pass_obj
@handle_errors
def cost(results_dir: Path, stack: str, hours: float | None) -> None:
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
    from runner.cli.views import plain_table
    from runner.results import report as reports
    from runner.results.runs import load_run
    from runner.stack import cost as costs
    from runner.stack import teardown as teardowns
    from runner.stack.pulumi_cli import project_dir

    project = project_dir()
    if project is None:
        raise RunnerError("no Pulumi.yaml here or above; run this inside the stackbench checkout")
    shape = costs.load_shape(stack, project)
    prices = costs.stack_prices(costs.load_price_table(), shape)
    runs = [load_run(r.run_dir) for r in teardowns.stack_runs(results_dir, stack)]
    run_costs = reports.cluster_costs(runs, project)
    console.print(plain_table(costs_table(shape, prices)))
    for run in runs:
        console.print(f"  {run.run_id}: {reports.cost_text(run_costs.get(run.run_id), run)}")
    if hours is not None:
        used = [costs.RunUse(r.num_nodes, reports.run_duration_s(r)) for r in runs]
        life = costs.lifetime_cost(prices, shape, hours * costs.SECONDS_PER_HOUR, used)
        text = f"${life.usd:,.2f}" if life.usd is not None else f"unknown price ({life.reason})"
        console.print(f"lifetime ({hours:g} h, {life.node_hours:.1f} node-h): {text}")
        for part in life.parts:
            usd = f"${part.usd:,.2f}" if part.usd is not None else part.unknown_reason
            console.print(f"  {part.what}: {part.counted}: {usd}", markup=False)


def costs_table(shape: Any, prices: Any) -> Any:
    from runner.results.report import Table

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
@click.pass_obj
@handle_errors
def teardown(results_dir: Path, stack: str, force: bool) -> None:
    """Destroy a stack once its results are home: guard, cancel jobs, destroy, check.

    \b
    Examples:
      runner teardown --stack gke-gpu-8
      runner teardown --stack gke-gpu-8 --force     # results still on the cluster are lost
    Refuses while runs on the stack are unfetched (and lists them).
    """
    from runner.stack import teardown as teardowns

    result = teardowns.teardown(results_dir, stack, force, on_line=click.echo)
    if result.cancel_errors:
        errors.print("[yellow]could not cancel[/yellow]: " + "; ".join(result.cancel_errors))
    if result.leftovers:
        errors.print(f"[red]{len(result.leftovers)} resource(s) still in stack {stack}'s "
                     "state:[/red]\n  " + "\n  ".join(result.leftovers))  # fmt: skip
        sys.exit(1)
    console.print(f"[green]stack {stack} destroyed[/green]: no resources left in its state")
    console.print(f"not checked: {result.unchecked}")
