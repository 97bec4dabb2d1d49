"""Live progress of a followed run in the terminal (rich), fed by the run's events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from contract.rundir import JobStatus
from runner import api

# How a followed run labels its quality metric (the eval_accuracy events carry it).
METRIC_LABELS = {"top1_accuracy": "acc", "bleu": "BLEU", "perplexity": "ppl"}


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def _bar(console: Console) -> Progress:
    """What a followed run shows: what it is doing, a bar, the latest figures, elapsed time."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), console=console, transient=False,
    )  # fmt: skip


def follow_training(
    console: Console, results_dir: Path, run: api.Run, max_epochs: int, metric: str
) -> JobStatus:
    """Epoch progress with the latest loss and quality metric, until the run ends."""
    progress = _bar(console)
    with progress:
        task = progress.add_task("starting", total=max_epochs, info="")
        state = {"epoch": 0, "acc": None, "loss": None}

        def on_event(event: dict[str, Any]) -> None:
            key, value, meta = event["key"], event.get("value"), event.get("metadata") or {}
            if key == "epoch_start":
                state["epoch"] = meta.get("epoch_num", 0)
            elif key == "epoch_stop":
                progress.update(task, completed=meta.get("epoch_num", 0))
            elif key == "train_loss":
                state["loss"] = value
            elif key == "eval_accuracy":
                state["acc"] = value
            elif key == "stackbench_progress":
                progress.update(task, completed=value["epoch"] - 1 + value["step"] / value["steps"])
            parts = [
                f"loss {state['loss']:.3f}" if state["loss"] is not None else "",
                f"{metric_label(metric)} {state['acc']:.4f}" if state["acc"] is not None else "",
            ]
            progress.update(
                task,
                description=f"epoch {state['epoch']}/{max_epochs}",
                info="  ".join(p for p in parts if p),
            )

        def on_status(status: Any) -> None:
            progress.update(task, description=status.state.value.lower())

        final = api.wait(results_dir, run, on_event, on_status)
        progress.update(task, total=max(1, state["epoch"]), completed=state["epoch"])
        return final


def follow_measurements(console: Console, results_dir: Path, run: api.Run) -> JobStatus:
    """Progress of allreduce-micro: one step per measured size and dtype."""
    progress = _bar(console)
    with progress:
        task = progress.add_task("measuring", total=None, info="")

        def on_event(event: dict[str, Any]) -> None:
            if event["key"] == "allreduce_result":
                r, meta = event["value"], event.get("metadata") or {}
                info = f"{r['dtype']} {r['elements']:,} elements: busbw {r['busbw_gbps']:.3f} GB/s"
                progress.update(task, total=meta.get("total"), advance=1, info=info)

        return api.wait(results_dir, run, on_event)
