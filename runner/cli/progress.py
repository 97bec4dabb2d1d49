"""Live progress of a followed run: what it is doing, a bar, the latest figures, elapsed time.

Each view is a context manager holding a rich Progress, fed by runner.api's callbacks (events
and status changes); it never reads files or asks a backend itself.
"""

from __future__ import annotations

import abc
import math
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.markup import escape
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

from contract import events as keys
from contract.rundir import JobState, JobStatus
from runner.words import count

# How a followed run labels its quality metric (the eval_accuracy events carry it).
METRIC_LABELS = {"top1_accuracy": "acc", "bleu": "BLEU", "perplexity": "ppl"}


MAX_REASON = 120  # of a pending reason in the live view: `runner status` says all of it


def metric_label(metric: str) -> str:
    return METRIC_LABELS.get(metric, metric)


def status_text(status: JobStatus) -> str:
    """A running run's state as the live view says it: a pending one with why, as `runner
    status` says it (unschedulable, an image that cannot be pulled, no controller ...), cut to
    a line. The reason may be a server's words: escaped, never read as markup."""
    text = status.state.value.lower()
    if status.state is JobState.PENDING and status.reason:
        reason = (
            status.reason
            if len(status.reason) <= MAX_REASON
            else status.reason[: MAX_REASON - 3] + "..."
        )
        text += f": {escape(reason)}"
    return text


def bar(console: Console) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(), console=console, transient=False,
    )  # fmt: skip


class _View(abc.ABC):
    def __init__(self, console: Console, total: float | None, description: str) -> None:
        self.progress = bar(console)
        self.task = self.progress.add_task(description, total=total, info="")

    def __enter__(self) -> _View:
        self.progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.progress.stop()

    def on_status(self, status: JobStatus) -> None:
        if not status.state.finished:
            self.progress.update(self.task, description=status_text(status))

    @abc.abstractmethod
    def on_event(self, event: dict[str, Any]) -> None:
        """Take in one event of the run (each view reads its own keys)."""


class TrainingProgress(_View):
    """Epoch progress with the latest loss and quality metric, and for an adaptive run the
    latest noise scale, global batch and worker count (its monitor and decision events)."""

    def __init__(self, console: Console, max_epochs: int, metric: str) -> None:
        super().__init__(console, max_epochs, "starting")
        self.max_epochs, self.metric = max_epochs, metric
        self.epoch = 0
        self.loss: float | None = None
        self.quality: float | None = None
        self.adaptive = AdaptiveFigures()

    def on_event(self, event: dict[str, Any]) -> None:
        key, value = event.get("key"), event.get("value")
        meta = keys.metadata(event)
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if key == keys.EPOCH_START:
            self.epoch = int(meta.get("epoch_num") or 0)
        elif key == keys.EPOCH_STOP:
            self.progress.update(self.task, completed=meta.get("epoch_num") or 0)
        elif key == keys.TRAIN_LOSS and number is not None:
            self.loss = float(number)
        elif key == keys.EVAL_ACCURACY and number is not None:
            self.quality = float(number)
        elif key == keys.PROGRESS and isinstance(value, dict):
            done = value.get("epoch", 1) - 1 + value.get("step", 0) / max(1, value.get("steps", 1))
            self.progress.update(self.task, completed=done)
        else:
            self.adaptive.take(key, value)
        parts = [
            f"loss {self.loss:.3f}" if self.loss is not None else "",
            f"{metric_label(self.metric)} {self.quality:.4f}" if self.quality is not None else "",
            self.adaptive.text(),
        ]
        self.progress.update(
            self.task,
            description=f"epoch {self.epoch}/{self.max_epochs}",
            info="  ".join(p for p in parts if p),
        )


class AdaptiveFigures:
    """The newest B_noise, global batch and worker count of an adaptive run, from its
    stackbench_monitors and stackbench_decision events (values of the wrong type ignored)."""

    def __init__(self) -> None:
        self.b_noise: float | None = None
        self.global_batch: int | None = None
        self.workers: int | None = None

    def take(self, key: object, value: object) -> None:
        if not isinstance(value, dict):
            return
        if key == keys.MONITORS:
            self.b_noise = _number(value.get("b_noise"), self.b_noise)
            self.global_batch = _integer(value.get("global_batch"), self.global_batch)
            self.workers = _integer(value.get("world_size"), self.workers)
        elif key == keys.DECISION and value.get("knob") == "global_batch":
            self.global_batch = _integer(value.get("new"), self.global_batch)
        elif key == keys.DECISION and value.get("knob") == "workers":
            self.workers = _integer(value.get("new"), self.workers)

    def text(self) -> str:
        parts = [
            f"B_noise {self.b_noise:.0f}" if self.b_noise is not None else "",
            f"batch {self.global_batch}" if self.global_batch is not None else "",
            count(self.workers, "worker") if self.workers is not None else "",
        ]
        return "  ".join(p for p in parts if p)


def _number(value: object, default: float | None) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return default


def _integer(value: object, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


class MeasurementProgress(_View):
    """allreduce-micro: one step per measured size and dtype."""

    def __init__(self, console: Console) -> None:
        super().__init__(console, None, "measuring")

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("key") != keys.ALLREDUCE_RESULT or not isinstance(event.get("value"), dict):
            return
        r = event["value"]
        meta = keys.metadata(event)
        busbw = r.get("busbw_gbps", 0.0)
        info = f"{r.get('dtype')} {r.get('elements', 0):,} elements: busbw {busbw:.3f} GB/s"
        self.progress.update(self.task, total=meta.get("total"), advance=1, info=info)


def download_bar(console: Console) -> Progress:
    """`runner data fetch`'s bars: one a download or conversion, with bytes or counts."""
    columns = (TextColumn("{task.description}"), BarColumn(), _AmountColumn())
    return Progress(*columns, TimeElapsedColumn(), console=console)


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
