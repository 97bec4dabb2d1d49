"""How the CLI shows things: rich tables and text built from plain data (no I/O here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from contract.events import OTHER_PHASE
from contract.events import STEP_PHASES as PHASES
from contract.files import DamagedFile
from contract.rundir import JobState, JobStatus
from contract.summary import AdaptiveSummary, MicroSummary, Summary, TrainSummary
from runner.cli.common import plain, terminal_safe
from runner.job.benchmarks import FREE_KEYS, AnyBenchmark, MicroBenchmark
from runner.words import count
from workloads.strategies.config import EXACT_STRATEGIES, STRATEGIES
from workloads.tasks.config import LOWER_IS_BETTER

if TYPE_CHECKING:
    from runner.api import Outcome, Run, RunInfo  # annotations: `runner benchmarks` needs no api
    from runner.cli.progress import MeasurementProgress, TrainingProgress
    from runner.job.spec import JobSpec

STATE_STYLE = {
    JobState.PENDING: "yellow",
    JobState.RUNNING: "cyan",
    JobState.SUCCEEDED: "green",
    JobState.FAILED: "red",
    JobState.CANCELLED: "magenta",
}


def keys_table(bench: AnyBenchmark) -> Table:
    """The keys `--set` takes for `bench`, by component, with what changing each means."""
    table = Table(title=f"Keys of {bench.name} (--set KEY=VALUE)", title_justify="left")
    for column in ("key", "component", "value", "accepts", "division"):
        table.add_column(column, no_wrap=column in ("key", "value"))
    flat = bench.config.flat()
    for key, (part, _) in bench.config.flat_keys().items():
        value = flat[key]
        shown = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
        table.add_row(key, part, shown, bench.config.describe(key), _division(bench, key))
    return table


def _division(bench: AnyBenchmark, key: str) -> str:
    if isinstance(bench, MicroBenchmark) or key in bench.tunables:
        return "tunable"
    if key in FREE_KEYS:
        return "free"
    if key == "strategy":
        exact = [name for name in STRATEGIES.names() if name in EXACT_STRATEGIES]
        return f"closed among {', '.join(exact)}"
    return "open"


def headline(summary: Summary | None, status: JobStatus | None = None) -> str:
    """One line of result: the final metric and time to target (or that it was missed). A
    run that ended without succeeding has no time to target whatever its summary says (rank
    0 wrote it, then another rank failed): a miss, as the report counts it."""
    if summary is None:
        return "-"
    if isinstance(summary, MicroSummary):
        best = max(summary.results, key=lambda r: r.busbw_gbps, default=None)
        if best is None:
            return "no measurements"
        where = f"{best.dtype}, {best.elements:,} elements"
        return f"peak busbw {best.busbw_gbps:.2f} GB/s ({where})"
    value = summary.final.value if summary.final else float("nan")
    metric = f"{summary.target_metric} {value:.4f}"
    if summary.diverged:
        return f"{metric}, {summary.diverged}"
    ended = status.state if status is not None and status.state.finished else None
    if ended is not None and ended.value != "SUCCEEDED":
        return f"{metric}, no time to target: the run {ended.value}"
    if summary.target_reached and summary.time_to_target_s is not None:
        return f"{metric}, target in {summary.time_to_target_s:.1f} s"
    # A budget that ended the run is why its target was missed: said where the miss is.
    budget = ": the time budget stopped it" if summary.stopped_by_time_budget else ""
    learned = f"; {summary.did_not_learn}" if summary.did_not_learn else ""
    return f"{metric}, target {summary.target_value:g} not reached{budget}{learned}"


def state_text(status: JobStatus) -> str:
    """The state in its colour and, when there is one, why (as text, never as markup)."""
    style = STATE_STYLE[status.state]
    text = f"[{style}]{status.state.value}[/{style}]"
    return f"{text} ({plain(status.reason)})" if status.reason else text


DAMAGED = "DAMAGED"  # the state `runner runs` shows for a run directory it cannot read


def run_json(info: RunInfo) -> dict[str, Any]:
    """One entry of `runner runs --json`. Every entry has the same keys, a damaged run's
    too: its id is its directory's name, its status.state DAMAGED with the file and the
    problem as the reason (and as `damage`), and what could not be read is null."""
    if info.run is None or info.status is None:
        reason = info.damage or "cannot be read"
        return {
            "run_id": info.run_dir.name,
            "benchmark": None,
            "backend": None,
            "handle": None,
            "world_size": None,
            "division": None,
            # The contract's keys (schema_version, reason, ...), with a state of the listing's.
            "status": JobStatus(JobState.FAILED, reason).to_dict() | {"state": DAMAGED},
            "run_dir": str(info.run_dir),
            "summary": None,
            "summary_damage": None,
            "damage": reason,
        }
    return {
        "run_id": info.run.run_id,
        "benchmark": info.run.record.spec.benchmark,
        "backend": info.run.record.backend,
        "handle": info.run.handle,
        "world_size": info.run.record.spec.placement.world_size,
        "division": info.run.record.spec.division,
        "status": info.status.to_dict(),
        "run_dir": str(info.run.run_dir),
        "summary": info.summary.to_dict() if info.summary else None,
        "summary_damage": info.summary_damage,
        "damage": None,
    }


def lr_text(spec: JobSpec) -> str | None:
    """The learning rate the run will use, and how it got there from the benchmark's base LR
    ("lr 0.05 -> 0.1 (linear x 2 workers, ...)"); None for a benchmark without one."""
    from workloads.configuration.train_config import TrainConfig

    if not isinstance(spec.config, TrainConfig):
        return None
    plan = str(spec.config.lr_plan(spec.placement.world_size))
    warmup_epochs = getattr(spec.config.schedule, "warmup_epochs", 0.0)
    if warmup_epochs > spec.config.run.max_epochs:  # a quick check: said, not refused
        epochs = count(spec.config.run.max_epochs, "epoch")
        plan += f"; the run ends after {epochs}, on the ramp"
    return plan


def progress_for(console: Console, spec: JobSpec) -> TrainingProgress | MeasurementProgress:
    """The live view that fits the run's kind of benchmark."""
    from runner.cli.progress import MeasurementProgress, TrainingProgress
    from workloads.configuration.micro_config import AllReduceMicroConfig

    if isinstance(spec.config, AllReduceMicroConfig):
        return MeasurementProgress(console)
    return TrainingProgress(console, spec.config.run.max_epochs, spec.config.target_metric)


def print_outcome(console: Console, run: Run, outcome: Outcome) -> None:
    """The end of a followed run: its summary (when it has one), its state and its files."""
    from runner.results import rundir

    try:
        summary = rundir.read_summary(run.run_dir)
    except DamagedFile as err:
        console.print(f"[red]{plain(str(err))}[/red]")
        summary = None
    if isinstance(summary, MicroSummary):
        console.print(allreduce_table(summary))
    elif summary is not None:
        console.print(summary_table(summary, run.record.spec))
    if outcome.missing:
        console.print(f"[yellow]incomplete results[/yellow]: {plain('; '.join(outcome.missing))}")
    # A run at chance is said in the last line too, not only in the table above it.
    learned = summary.did_not_learn if isinstance(summary, TrainSummary) else None
    verdict = f"  [red]{learned}[/red]" if learned else ""
    console.print(f"{state_text(outcome.status)}{verdict}  results: {plain(str(run.run_dir))}")


def summary_table(summary: TrainSummary, spec: JobSpec | None = None) -> Table:
    """The end-of-run summary: outcome, throughput, and where the training time went (and
    the plugins the job says the run used, beside its division)."""
    title = f"Summary of {plain(summary.run_id)}"
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    direction = "<=" if summary.target_metric in LOWER_IS_BETTER else ">="
    outcome = "[green]reached[/green]" if summary.target_reached else "[red]not reached[/red]"
    if summary.did_not_learn:
        outcome += f", [red]{summary.did_not_learn}[/red]"
    table.add_row(
        "target", f"{summary.target_metric} {direction} {summary.target_value:g}: {outcome}"
    )
    if summary.diverged:
        table.add_row("diverged", f"[red]{plain(summary.diverged)}[/red]")
    if summary.stopped_by_time_budget:
        table.add_row("stopped", "by its time budget (--set time_budget_s)")
    if summary.target_reached and summary.time_to_target_s is not None:
        table.add_row("time to target", f"{summary.time_to_target_s:.2f} s")
    if summary.final:
        final = summary.final
        table.add_row(f"final {summary.target_metric}", f"{final.value:.4f} (epoch {final.epoch})")
    table.add_row(
        "run time",
        f"{summary.run_time_s:.2f} s ({summary.epochs} epochs, {summary.steps} steps; "
        f"init {summary.init_time_s:.2f} s outside)",
    )
    if summary.throughput_samples_per_s:
        tokens = summary.throughput_tokens_per_s
        table.add_row(
            "throughput",
            f"{summary.throughput_samples_per_s:,.0f} samples/s "
            + (f"({tokens:,.0f} tokens/s) " if tokens else "")
            + f"on {count(summary.world_size, 'worker')} (global batch "
            f"{summary.global_batch_size} {summary.batch_unit}"
            + (" at the start)" if summary.adaptive else ")"),
        )
    if summary.step_time_ms:
        table.add_row(
            "step time",
            f"{summary.step_time_ms:.2f} ms (warm-up step "
            f"{1000 * summary.warmup_time_s:.1f} ms, reported apart)",
        )
    for phase in (p for p in (*PHASES, OTHER_PHASE) if p in summary.phases_s):
        share = summary.phase_shares.get(phase, 0.0)
        table.add_row(f"  {phase}", f"{summary.phases_s[phase]:.3f} s  {100 * share:5.1f} %")
    table.add_row(
        "communication share", f"{100 * summary.communication_share:.1f} % of training time"
    )
    if summary.adaptive:
        table.add_row("adaptive", adaptive_text(summary.adaptive))
    if summary.precision != "fp32":  # a benchmark compares like with like: say when not
        table.add_row("precision", summary.precision)
    plugins = "".join(f"; plugin {plain(p.label)}" for p in (spec.plugins if spec else ()))
    table.add_row("division", summary.division + plugins)
    return table


def adaptive_text(adaptive: AdaptiveSummary) -> str:
    """What an adaptive run's policies did, in one line: "batch, sync: 4 decisions
    (global_batch 3, sync_mode 1); at the end global_batch 64, sync_mode average; B_noise 66"."""
    policies = ", ".join(adaptive.policies) or "monitors only"
    by_knob = ", ".join(f"{k} {n}" for k, n in sorted(adaptive.decisions_by_knob.items()))
    text = f"{policies}: {adaptive.decisions} decisions" + (f" ({by_knob})" if by_knob else "")
    if adaptive.final:
        final = ", ".join(f"{k} {v:g}" if not isinstance(v, str) else f"{k} {v}"
                          for k, v in sorted(adaptive.final.items()))  # fmt: skip
        text += f"; at the end {final}"
    if adaptive.b_noise is not None:
        text += f"; B_noise {adaptive.b_noise:,.0f}"
    return plain(text)


def allreduce_table(summary: MicroSummary) -> Table:
    """allreduce-micro's result: one row per tensor size and dtype, as nccl-tests prints."""
    title = (
        f"All-reduce on {summary.world_size} ranks, {summary.backend} "
        f"({plain(summary.device)}): {plain(summary.run_id)}"
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
    for r in summary.results:
        table.add_row(
            f"{r.elements:,}", _bytes_text(r.size_bytes), r.dtype, str(r.num_iters),
            f"{r.time_us:,.1f}", f"{r.algbw_gbps:.3f}", f"{r.busbw_gbps:.3f}",
        )  # fmt: skip
    return table


def plain_table(table: Any) -> Table:
    """A runner.results.export Table (title, header, rows, notes) as a rich table. Every
    text is plain, never markup: a label from a run directory (`[red]x[/]`, `![x](url)`) is
    shown as written, not styled nor missing its brackets."""
    title = Text(terminal_safe(table.title), "table.title")
    out = Table(title=title, title_justify="left", caption_justify="left")
    for i, name in enumerate(table.header):
        out.add_column(Text(terminal_safe(name)), no_wrap=i == 0)  # ids first: never wrapped
    for row in table.rows:
        style = "red" if any("NOT CONVERGED" in c for c in row) else None
        out.add_row(*(Text(terminal_safe(c)) for c in row), style=style)
    if table.notes:
        out.caption = Text("\n".join(map(terminal_safe, table.notes)), "table.caption")
    return out


def _bytes_text(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
