"""Image classification and logistic regression (tasks 1a, 2a, the CS744 study, cnn-digits).

The training mechanics are workloads/training/loop.py's (a Trainer over tensors prepared once), or
under adaptive policies and monitors workloads/adaptive/training.py's; this builds them and
scores by top-1 accuracy over the whole test split.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from contract import events
from contract.summary import CHANCE
from workloads import data, models, strategies
from workloads.adaptive import training
from workloads.adaptive.run import Adaptive
from workloads.data.config import LoadContext
from workloads.runtime import precision
from workloads.tasks import Context, Evaluation
from workloads.telemetry.timing import StepTimer
from workloads.training.loop import (
    EVAL_BATCH_SIZE,
    EpochStats,
    Trainer,
    evaluate_metrics,
    train_epoch,
)


@dataclass
class ClassificationTask:
    trainer: Trainer | None
    num_train: int
    num_eval: int
    precision: str = "fp32"
    adaptive: Adaptive | None = None
    num_classes: int = 0  # 0: unknown (no chance level said)

    @classmethod
    def build(cls, ctx: Context) -> ClassificationTask:
        config, device = ctx.config, ctx.device
        memory_format = config.execution.memory_format
        where = LoadContext(device, ctx.rank, ctx.world_size, config.run.seed, memory_format)
        splits = config.data.load(where)
        model = models.build(
            config.model, splits.num_classes, splits.sample_shape, memory_format
        ).to(device)
        objective = config.model.objective(model)
        computes_in = precision.resolve(config.execution.precision, config.model.task, device)
        # A compiled model trains through the compiled graph, and a bf16 forward through
        # autocast's kernels: a closed form (fp32, uncompiled) would compute something else.
        closed_form = None
        if config.execution.compile_model:
            model = _compiled(model, ctx, splits, computes_in)
        elif computes_in == "fp32":
            closed_form = config.model.closed_form(model, objective)
        monitor = ctx.adaptive.monitor if ctx.adaptive is not None else None
        strategy = strategies.build(
            config.strategy, config.run.seed, model, ctx.clock, monitor=monitor
        )
        trainer = Trainer(
            config,
            ctx.rank,
            ctx.world_size,
            device,
            splits,
            strategy,
            config.build_optimizer(model.parameters()),
            StepTimer(ctx.clock),
            torch.Generator(device).manual_seed(config.run.seed * 1_000_003 + ctx.rank),
            objective,
            closed_form,
            computes_in,
        )
        if ctx.adaptive is not None:
            training.attach(ctx.adaptive, trainer)
        return cls(
            trainer, splits.num_train, splits.num_test, computes_in, ctx.adaptive,
            splits.num_classes,
        )  # fmt: skip

    def train_epoch(
        self,
        epoch: int,
        out_of_time: Callable[[], bool] | None = None,
        on_step: Callable[[int, int], None] | None = None,
    ) -> EpochStats:
        assert self.trainer is not None, "the task is closed"
        if self.adaptive is not None:
            return training.train_epoch(self.adaptive, epoch, out_of_time, on_step)
        return train_epoch(self.trainer, epoch, out_of_time, on_step)

    def evaluate(self, epoch: int) -> Evaluation:
        metrics = evaluate_metrics(self.current_trainer())
        # Guessing one class's top-1 accuracy: where a run that did not learn ends, which the
        # runner names as such (a run "not reached" at 0.96 and at 0.10 are not alike).
        details = {CHANCE: 1 / self.num_classes} if self.num_classes > 0 else {}
        return Evaluation(value=metrics.accuracy, loss=metrics.loss, details=details)

    def current_trainer(self) -> Trainer:
        """The trainer as it stands: an elastic change replaces the adaptive run's."""
        assert self.trainer is not None, "the task is closed"
        return self.adaptive.trainer if self.adaptive is not None else self.trainer

    def close(self) -> None:
        self.trainer = None
        if self.adaptive is not None:
            del self.adaptive.trainer  # no strategy may outlive the process group


def _compiled(
    model: torch.nn.Module, ctx: Context, splits: data.Splits, computes_in: str
) -> torch.nn.Module:
    """The model compiled for every batch shape this rank will see, before the clock; the
    eager model, and the reason in the event log, where the backend cannot compile."""
    from torch._dynamo.exc import BackendCompilerFailed

    from workloads.data.sampling import eval_shard
    from workloads.runtime import cachedir, compiling

    config = ctx.config
    compiled = compiling.compile_model(model, cachedir.compile_cache_dir())  # never the data's
    per_rank = (
        splits.num_train if splits.train_is_rank_shard else splits.num_train // ctx.world_size
    )
    num_eval = int(eval_shard(splits.num_test, ctx.world_size, ctx.rank).numel())
    channels_last = config.execution.memory_format == "channels_last"
    try:
        seconds = compiling.precompile(
            compiled,
            splits.sample_shape,
            compiling.batch_sizes(per_rank, config.data.batch_size),
            compiling.batch_sizes(num_eval, EVAL_BATCH_SIZE),
            torch.channels_last if channels_last else torch.contiguous_format,
            # Under the autocast the steps run in: it is part of what a graph was compiled for.
            lambda: precision.autocast(computes_in, ctx.device),
        )
    except BackendCompilerFailed as err:  # e.g. no C++ compiler in the image
        reason = str(err).strip().splitlines()[0]
        print(f"workloads.train: training the eager model: torch.compile failed: {reason}")
        ctx.log.point(events.COMPILE_TIME, None, compiled=False, reason=reason)
        return model
    ctx.log.point(events.COMPILE_TIME, seconds, compiled=True)
    return compiled
