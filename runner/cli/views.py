"""How the CLI shows things: rich tables and text built from plain data (no I/O here)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from contract.rundir import JobState, JobStatus
from runner.api import RunInfo
from runner.job.benchmarks import AnyBenchmark, MicroBenchmark
from workloads.config import LOWER_IS_BETTER
from workloads.mllog import OTHER_PHASE
from workloads.mllog import STEP_PHASES as PHASES

STATE_STYLE = {
    JobState.PENDING: "yellow",
    JobState.RUNNING: "cyan",
    JobState.SUCCEEDED: "green",
    JobState.FAILED: "red",
    JobState.CANCELLED: "magenta",
}


def benchmarks_table(benchmarks: list[AnyBenchmark]) -> Table:
    table = Table(title="Benchmarks", title_justify="left")
    # Three columns that read at 80 characters; identifiers are copied, so never wrapped.
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("task")
    table.add_column("target (light)")
    table.add_column("defaults")
    for b in benchmarks:
        if isinstance(b, MicroBenchmark):
            table.add_row(b.name, b.task, "-", f"{b.default_workers} workers")
            continue
        c = b.config
        table.add_row(
            b.name,
            b.task,
            f"{c.target_metric} {'<=' if c.target_metric in LOWER_IS_BETTER else '>='} "
            f"{c.target_value:g} ({b.light_target:g})",
            f"{b.default_workers} workers x batch {c.batch_size}, {c.strategy}, "
            f"{b.default_runs} run{'s' if b.default_runs > 1 else ''}",
        )
    return table


def headline(summary: dict[str, Any] | None) -> str:
    """One line of result: the final metric and time to target (or that it was missed)."""
    if not summary:
        return "-"
    if summary.get("kind") == "allreduce-micro":
        best = max(summary["results"], key=lambda r: r["busbw_gbps"], default=None)
        if best is None:
            return "no measurements"
        where = f"{best['dtype']}, {best['elements']:,} elements"
        return f"peak busbw {best['busbw_gbps']:.2f} GB/s ({where})"
    final = summary.get("final") or {}
    metric = f"{summary['target']['metric']} {final.get('value', float('nan')):.4f}"
    if summary.get("target_reached"):
        return f"{metric}, target in {summary['time_to_target_s']:.1f} s"
    return f"{metric}, target {summary['target']['value']:g} not reached"


def runs_table(infos: list[RunInfo]) -> Table:
    table = Table(title="Runs", title_justify="left")
    table.add_column("run", no_wrap=True)
    for column in ("benchmark", "backend", "workers", "state", "result"):
        table.add_column(column)
    for info in infos:
        spec = info.run.record.spec
        table.add_row(
            spec.run_id, spec.benchmark, info.run.record.backend, str(spec.placement.world_size),
            state_text(info.status), headline(info.summary),
        )  # fmt: skip
    return table


def state_text(status: JobStatus) -> str:
    style = STATE_STYLE[status.state]
    text = f"[{style}]{status.state.value}[/{style}]"
    return f"{text} ({status.reason})" if status.reason else text


def run_json(info: RunInfo) -> dict[str, Any]:
    return {
        "run_id": info.run.run_id,
        "benchmark": info.run.record.spec.benchmark,
        "backend": info.run.record.backend,
        "handle": info.run.handle,
        "world_size": info.run.record.spec.placement.world_size,
        "division": info.run.record.spec.division,
        "status": info.status.to_dict(),
        "run_dir": str(info.run.run_dir),
        "summary": info.summary,
    }


def summary_table(summary: dict[str, Any]) -> Table:
    """The end-of-run summary: outcome, throughput, and where the step time went."""
    table = Table(title=f"Summary of {summary['run_id']}", title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    target = summary["target"]
    reached = summary["target_reached"]
    table.add_row(
        "target",
        f"{target['metric']} {'<=' if target['metric'] in LOWER_IS_BETTER else '>='} "
        f"{target['value']:g}: "
        + ("[green]reached[/green]" if reached else "[red]not reached[/red]"),
    )
    if reached:
        table.add_row("time to target", f"{summary['time_to_target_s']:.2f} s")
    final = summary.get("final") or {}
    if final:
        table.add_row(f"final {target['metric']}", f"{final['value']:.4f} (epoch {final['epoch']})")
    table.add_row(
        "run time",
        f"{summary['run_time_s']:.2f} s ({summary['epochs']} epochs, "
        f"{summary['steps']} steps; init {summary['init_time_s']:.2f} s outside)",
    )
    if summary.get("throughput_samples_per_s"):
        tokens = summary.get("throughput_tokens_per_s")
        table.add_row(
            "throughput",
            f"{summary['throughput_samples_per_s']:,.0f} samples/s "
            + (f"({tokens:,.0f} tokens/s) " if tokens else "")
            + f"on {summary['world_size']} workers (global batch "
            f"{summary['global_batch_size']} {summary.get('batch_unit', 'samples')})",
        )
    if summary.get("step_time_ms"):
        table.add_row(
            "step time",
            f"{summary['step_time_ms']:.2f} ms (warm-up step "
            f"{1000 * summary['warmup']['time_s']:.1f} ms, reported apart)",
        )
    for phase in (p for p in (*PHASES, OTHER_PHASE) if p in summary["phases_s"]):
        share = summary["phase_shares"][phase]
        table.add_row(f"  {phase}", f"{summary['phases_s'][phase]:.3f} s  {100 * share:5.1f} %")
    table.add_row(
        "communication share", f"{100 * summary['communication_share']:.1f} % of training time"
    )
    table.add_row("division", summary["division"])
    return table


def allreduce_table(summary: dict[str, Any]) -> Table:
    """allreduce-micro's result: one row per tensor size and dtype, as nccl-tests prints."""
    title = (
        f"All-reduce on {summary['world_size']} ranks, {summary['backend']} "
        f"({summary['device']}): {summary['run_id']}"
    )
    table = Table(title=title, title_justify="left")
    for column in (
        "elements",
        "bytes",
        "dtype",
        "iters",
        "time (us)",
        "algbw (GB/s)",
        "busbw (GB/s)",
    ):
        table.add_column(column, justify="right")
    for r in summary["results"]:
        table.add_row(
            f"{r['elements']:,}", _bytes_text(r["size_bytes"]), r["dtype"], str(r["num_iters"]),
            f"{r['time_us']:,.1f}", f"{r['algbw_gbps']:.3f}", f"{r['busbw_gbps']:.3f}",
        )  # fmt: skip
    return table


def plain_table(table: Any) -> Table:
    """A runner.results.report Table (title, header, rows, notes) as a rich table."""
    out = Table(title=table.title, title_justify="left", caption_justify="left")
    for i, name in enumerate(table.header):
        out.add_column(name, no_wrap=i == 0)  # the first column holds ids: never wrap them
    for row in table.rows:
        out.add_row(*row, style="red" if any("NOT CONVERGED" in c for c in row) else None)
    if table.notes:
        out.caption = "\n".join(table.notes)
    return out


def _bytes_text(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
