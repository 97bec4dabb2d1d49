"""The per-task seam of the training loop: what one epoch of training and one evaluation are.

training/run.py owns the clock, the event log and the results; a Task owns its data, model,
communication strategy and optimizer, and is built outside the clock (MLPerf's init phase).
- classification.py: image classification and logistic regression, scored by top-1 accuracy;
- language_model.py: AWD-LSTM on WikiText-2, scored by validation perplexity;
- translation.py: GNMT and the Transformer on WMT en-de, scored by sacreBLEU.
Which task a config trains follows from its model (ModelConfig.task); its config, with how
it is scored, is in config.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from workloads.tasks.metrics import LOWER_IS_BETTER

if TYPE_CHECKING:
    import torch

    from workloads.adaptive.run import Adaptive
    from workloads.configuration.train_config import TrainConfig
    from workloads.optimization.sgd import Optimizer
    from workloads.strategies.base import Strategy
    from workloads.telemetry.mllog import EventLog
    from workloads.telemetry.timing import Clock
    from workloads.training.loop import EpochStats


@dataclass(frozen=True)
class Evaluation:
    value: float  # the target metric (accuracy, perplexity or BLEU)
    loss: float  # mean loss per scored unit (sample or token), without regularizers
    details: Mapping[str, Any] = field(default_factory=dict)  # e.g. sacreBLEU's signature


@dataclass(frozen=True)
class Context:
    """What every task is built from."""

    config: TrainConfig
    rank: int
    world_size: int
    device: torch.device
    clock: Clock
    log: EventLog
    output_dir: Path | None = None  # the run's results directory, on the writing rank only
    # The run's policies and monitors (workloads/adaptive/run.py), for the tasks that drive
    # them (config validation refuses them elsewhere).
    adaptive: Adaptive | None = None


class Task(Protocol):
    num_train: int  # training samples per epoch over all ranks (MLPerf's train_samples)
    num_eval: int  # evaluation samples
    precision: str  # "fp32" or "bf16": what the forward passes compute in
    # (workloads/runtime/precision)

    def train_epoch(
        self,
        epoch: int,
        out_of_time: Callable[[], bool] | None = None,
        on_step: Callable[[int, int], None] | None = None,
    ) -> EpochStats:
        """Train epoch `epoch` (1-based); `out_of_time` is polled collectively to stop early."""
        ...

    def evaluate(self, epoch: int) -> Evaluation:
        """Score the model; identical on every rank."""
        ...

    def close(self) -> None:
        """Drop the model, strategy and optimizer: no DDP reducer may outlive the group."""
        ...


T = TypeVar("T")


def narrow(value: object, kind: type[T], what: str) -> T:
    """`value` as the class a task needs: a TrainConfig types its data and task by their base
    class and a strategy its model as an nn.Module, while each task reads its own fields. Any
    other class is a bug (the config pairs each task with its data and model)."""
    if not isinstance(value, kind):
        raise TypeError(f"{what}: expected a {kind.__name__}, got a {type(value).__name__}")
    return value


class Trains:
    """The strategy and optimizer a task trains with, released by close() (a mixin of the
    sequence tasks; classification keeps them in its Trainer)."""

    strategy: Strategy | None
    optimizer: Optimizer | None

    def _strategy(self) -> Strategy:
        assert self.strategy is not None, "the task is closed"
        return self.strategy

    def _optim(self) -> Optimizer:
        assert self.optimizer is not None, "the task is closed"
        return self.optimizer

    def close(self) -> None:
        self.strategy = self.optimizer = None


def build(ctx: Context) -> Task:
    return ctx.config.task.build(ctx)


def reached(metric: str, value: float, target: float) -> bool:
    """Whether `value` of `metric` meets `target` (at or below it for perplexity)."""
    return value <= target if metric in LOWER_IS_BETTER else value >= target


def best_of(metric: str, values: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The best of evaluation records {"value": ...} by `metric`'s direction."""
    if not values:
        return None
    pick = min if metric in LOWER_IS_BETTER else max
    return pick(values, key=lambda e: e["value"])
