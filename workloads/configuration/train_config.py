"""The resolved training configuration: one frozen value saying exactly what a run trains.

It is the contract between the runner, which resolves it from the benchmark registry plus
`--set key=value` overrides, and the workload, which receives it as JSON. A TrainConfig is
its components, each beside the code it configures:

    model      workloads/models/<family>/config.py   (MODELS, key `model`)
    data       workloads/data/config.py              (DATASETS, key `dataset`)
    task       workloads/tasks/config.py             (follows from the model)
    optimizer  workloads/optimization/optim.py                    (OPTIMIZERS, key `optimizer`)
    schedule   workloads/optimization/schedule.py                 (SCHEDULES, key `lr_schedule`)
    strategy   workloads/strategies/config.py        (STRATEGIES, key `strategy`)
    adaptive   workloads/adaptive/config.py          (policies and monitors; open division)
    execution, run, target                           (here: how a step runs, how a run is
                                                      driven, what it aims for)

Each component validates its own fields (declared ranges, workloads/configuration/fields.py); this
module adds the rules between components. How keys, JSON and overrides work for any config made of
components is workloads/configuration/components.py. Not the registry (runner/job/benchmarks.py);
imports no torch (the runner loads it on its start-up path).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from workloads.adaptive.config import AdaptiveConfig
from workloads.configuration.components import Choice, Component, Composite
from workloads.configuration.fields import ConfigError, setting
from workloads.configuration.run_config import ExecutionConfig, RunConfig, RunLimits
from workloads.data.config import DATASETS, DataConfig
from workloads.models import MODELS, ModelConfig
from workloads.optimization.optim import OPTIMIZERS, OptimizerConfig
from workloads.optimization.schedule import SCHEDULES, LrPlan, ScheduleConfig, lr_plan
from workloads.plugins import points
from workloads.strategies.config import (
    DDP_STRATEGIES,
    STRATEGIES,
    PlainStrategy,
    StrategyConfig,
)
from workloads.tasks.config import METRIC_RANGES, TaskConfig

if TYPE_CHECKING:
    from torch import nn

    from workloads.optimization.sgd import Optimizer

__all__ = [
    "ConfigError",
    "ExecutionConfig",
    "RunConfig",
    "RunLimits",
    "TargetConfig",
    "TrainConfig",
]


@dataclass(frozen=True, kw_only=True)
class TargetConfig(Component):
    """What a run aims for, in its task's metric (TrainConfig.target_metric)."""

    target_value: float = setting(gt=0, le=1e6)
    # A training-loss goal reported next to the quality target (2a: 0.2828); never stops a run.
    target_train_loss: float | None = setting(None, gt=0, le=1e6)


@dataclass(frozen=True, kw_only=True)
class TrainConfig(Composite):
    """Model, data, algorithm and hyperparameters of one run (per worker unless named global)."""

    VERSION: ClassVar[int] = 2  # 1 was one flat object of 62 keys
    RENAMED: ClassVar[Mapping[str, str]] = {
        "resnet_depth": "depth",
        "resnet_variant": "variant",
        "hidden_dim": "d_model",  # the Transformer's; AWD-LSTM and GNMT keep hidden_dim
        "lstm_dropout_hidden": "dropout_hidden",
        "lstm_dropout_input": "dropout_input",
        "lstm_dropout_embedding": "dropout_embedding",
        "lstm_weight_drop": "weight_drop",
    }
    CHOICES: ClassVar[Mapping[str, Choice]] = {
        "model": MODELS,
        "data": DATASETS,
        "optimizer": OPTIMIZERS,
        "schedule": SCHEDULES,
        "strategy": STRATEGIES,
    }

    model: ModelConfig
    data: DataConfig
    task: TaskConfig
    optimizer: OptimizerConfig
    schedule: ScheduleConfig
    strategy: StrategyConfig = field(default_factory=PlainStrategy)
    # Absent from configs written before it: no policy, no monitors (Composite.from_dict).
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    run: RunConfig
    target: TargetConfig

    @property
    def target_metric(self) -> str:
        return self.task.metric

    def start_global_batch(self, world_size: int) -> int:
        """Units (data.batch_unit) the run's first update holds over all workers, reached by
        accumulation when global_batch is set (the translation tasks): the configured batch,
        or the one a batch policy's bounds made of it (a max_global_batch below it caps it
        from the first step on). What the summary and the MLPerf log state."""
        configured = self.data.global_batch_size(world_size)
        return self.adaptive.start_global_batch(configured, world_size)

    def lr_plan(self, world_size: int) -> LrPlan:
        """The base LR, the scaling rule and the peak LR on `world_size` workers; a batch
        policy whose bounds move the first global batch scales the peak as its rule says."""
        plan = lr_plan(self.schedule, world_size)
        configured = self.data.global_batch_size(world_size)
        factor = self.adaptive.start_lr_factor(configured, world_size)
        if factor == 1.0:
            return plan
        start = self.start_global_batch(world_size)
        return dataclasses.replace(
            plan,
            rule=f"{plan.rule}, x {factor:g}: the batch policy starts at {start} of {configured}",
            peak_lr=plan.peak_lr * factor,
        )

    # ---- composing the builders, each of which takes its own slice ----

    def build_optimizer(self, params: Iterable[nn.Parameter]) -> Optimizer:
        """The optimizer over `params`, at the schedule's base LR, with the model's own L2
        penalty added to its weight decay (ModelConfig.optimizer_weight_decay)."""
        return self.optimizer.build(params, self.schedule.lr, self.model.optimizer_weight_decay())

    def lr_at(self, world_size: int, epochs_done: float, steps_done: int = 0) -> float:
        """The schedule's LR for the step after `epochs_done` epochs, `steps_done` steps."""
        return self.schedule.lr_at(world_size, epochs_done, steps_done, self.run.max_epochs)

    def validate(self) -> None:
        model, data = self.model, self.data
        if data.name not in model.datasets:
            raise ConfigError(
                "dataset", f"model {model.name} trains on {' or '.join(model.datasets)}"
            )
        if type(self.task).kind != model.task:
            raise ConfigError("model", f"{model.name} is trained by the {model.task} task")
        if self.execution.memory_format == "channels_last" and not model.image_input:
            raise ConfigError("memory_format", "channels_last applies to image models only")
        if self.execution.compile_model and not self.task.compiles:
            raise ConfigError(
                "compile_model", f"torch.compile is not wired into the {self.task.kind} task"
            )
        self.schedule.check_run(self.run.max_epochs)
        self._check_adaptive()
        bounds = METRIC_RANGES.get(self.target_metric)
        if bounds is None:
            raise ConfigError("model", f"its task's metric {self.target_metric} is not one of "
                              f"{', '.join(METRIC_RANGES)}")  # fmt: skip
        if self.target.target_value not in bounds:
            raise ConfigError("target_value", f"must be in {bounds} for {self.target_metric}")

    def _check_adaptive(self) -> None:
        """What the adaptive policies are wired into (workloads/adaptive/training.py)."""
        adaptive, strategy = self.adaptive, self.strategy.name
        if "sync" in adaptive.policy and strategy != "adaptive-sync":
            raise ConfigError(
                "policy", "the sync policy switches the adaptive-sync strategy: add "
                "--set strategy=adaptive-sync"
            )  # fmt: skip
        if strategy == "adaptive-sync" and "sync" not in adaptive.policy:
            raise ConfigError(
                "strategy", "adaptive-sync is switched by the sync policy: add sync to "
                "--set policy=..."
            )  # fmt: skip
        if adaptive.monitored and self.task.kind != "classification":
            raise ConfigError(
                "policy", "the adaptive policies and monitors drive the classification "
                f"loop only, not the {self.task.kind} task"
            )  # fmt: skip
        if "batch" in adaptive.policy and self.execution.compile_model:
            raise ConfigError(
                "compile_model", "policy=batch changes the batch shape mid-run, and each new "
                "shape would compile inside the clock: --set compile_model=false"
            )  # fmt: skip
        if "batch" in adaptive.policy and not self.data.samples_shared:
            raise ConfigError(
                "policy", "policy=batch re-shards each epoch over the workers; "
                f"{self.data.name} is split into static per-rank shards"
            )  # fmt: skip

    def check_elastic(self) -> None:
        """Rules for a run whose workers may leave and join (runner --workers MIN:MAX)."""
        if self.strategy.name in DDP_STRATEGIES:
            raise ConfigError(
                "strategy", f"{self.strategy.name} keeps its process group open after a "
                "worker leaves (docs/adaptive-elastic.md): --set strategy=allreduce (or "
                "allreduce-per-param, gather-scatter, model-averaging)"
            )  # fmt: skip
        if self.task.kind != "classification" or not self.data.samples_shared:
            raise ConfigError(
                "dataset", "elastic workers re-shard each epoch: they drive the "
                "classification loop on data every worker holds"
            )  # fmt: skip
        if self.execution.compile_model:
            raise ConfigError(
                "compile_model", "a change of workers changes the batch shape, and each new "
                "shape would compile inside the clock: --set compile_model=false"
            )  # fmt: skip

    @classmethod
    def _part_class(
        cls, name: str, data: Mapping[str, Any], built: Mapping[str, Component]
    ) -> type[Component]:
        if name == "task":  # the task follows from the model, read before it
            kind = typing.cast(ModelConfig, built["model"]).task
            try:
                return typing.cast(type[Component], points.TASKS.get(kind))
            except KeyError:
                raise ConfigError("model", f"no task {kind!r} is registered") from None
        return super()._part_class(name, data, built)
