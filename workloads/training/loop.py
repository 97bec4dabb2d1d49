"""One epoch of training and one evaluation, timed per docs/design.md, "Timing".

Pure training mechanics: no event logging and no file output here (run.py does that), so
the same functions serve the entry point, the tests and the overhead benchmark.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from workloads.data import Splits
from workloads.data.sampling import batches, epoch_shard, eval_shard, slice_batches
from workloads.optimization.objectives import ClosedForm, CrossEntropy, Objective
from workloads.optimization.sgd import Optimizer
from workloads.runtime import precision, watchdog
from workloads.strategies.base import LocalGradients, Strategy
from workloads.telemetry.timing import StepTimer, add_phases, zero_phases
from workloads.training import divergence

if TYPE_CHECKING:
    from workloads.configuration.train_config import TrainConfig

EVAL_BATCH_SIZE = 1024
# A training batch: indices of the split's samples, or a contiguous range of a shuffled shard.
Batch = torch.Tensor | slice
BUDGET_CHECK_EVERY_STEPS = 20  # a tiny broadcast, only when a time budget is set


@dataclass
class EpochStats:
    steps: int = 0
    samples: int = 0  # this rank's (the adaptive loop's: see training.epoch_samples_share)
    tokens: int = 0  # this rank's target tokens (sequence tasks; 0 for the others)
    loss_sum: float = 0.0
    phases: dict[str, float] = field(default_factory=zero_phases)
    first_step_s: float | None = None  # the first step of the run (warm-up), when in this epoch
    step_times_s: list[float] = field(default_factory=list)  # this rank's, in order
    out_of_time: bool = False

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / max(1, self.steps)


@dataclass(frozen=True)
class Trainer:
    """Everything a step needs; built once per run."""

    config: TrainConfig
    rank: int
    world_size: int
    device: torch.device
    splits: Splits
    strategy: Strategy
    optimizer: Optimizer
    timer: StepTimer
    augment_generator: torch.Generator
    objective: Objective = field(default_factory=CrossEntropy)
    # The model's loss and gradient without autograd, where it has them (see optimize).
    closed_form: ClosedForm | None = None
    precision: str = "fp32"  # what forward passes compute in (workloads/runtime/precision.py)


@dataclass(frozen=True)
class EvalMetrics:
    accuracy: float
    loss: float  # mean per-sample loss over the test split (no regularizer)


def train_epoch(
    tr: Trainer,
    epoch: int,
    out_of_time: Callable[[], bool] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> EpochStats:
    """Train one epoch (1-based). `out_of_time` is polled (collectively) to stop early."""
    cfg = tr.config
    steps: Sequence[Batch]
    if tr.splits.train_is_rank_shard:  # the rank's own samples, shuffled when loaded
        steps = slice_batches(
            tr.splits.num_train, cfg.data.batch_size, tr.rank, epoch - 1, cfg.run.seed
        )
    else:
        shard = epoch_shard(tr.splits.num_train, tr.world_size, tr.rank, epoch - 1, cfg.run.seed)
        steps = list(batches(shard.to(tr.device), cfg.data.batch_size))
    tr.strategy.module.train()
    positions = cfg.data.batch_size * tr.world_size  # of the epoch's order a step takes

    def epochs_done(i: int) -> float:
        """Where step i stands in the run, for epoch-based schedules. Shared data: samples
        consumed over the data set, as the adaptive loop's cursor counts them (a run with
        monitors on then trains with the same LRs as one without, bit for bit, and a short
        last batch does not stretch the epoch); static shards: steps over the epoch's."""
        if tr.splits.train_is_rank_shard:
            return epoch - 1 + i / len(steps)
        return epoch - 1 + (i * positions) / tr.splits.num_train

    def step(i: int) -> StepResult:
        # Every epoch has the same number of steps, so this is the run's step count so far.
        steps_done = (epoch - 1) * len(steps) + i
        loss = train_step(tr, steps[i], epochs_done(i), steps_done)
        return StepResult(loss, batch_len(steps[i]))

    stats = timed_epoch(tr.timer, epoch, len(steps), step, out_of_time, on_step)
    stats.loss_sum += tr.objective.penalty_sum()  # the L2 penalty's part of the reported loss
    return stats


@dataclass(frozen=True)
class StepResult:
    loss: torch.Tensor  # detached, this rank's mean over the step's samples or tokens
    samples: int  # this rank's
    tokens: int = 0


def timed_epoch(
    timer: StepTimer,
    epoch: int,
    num_steps: int,
    step: Callable[[int], StepResult],
    out_of_time: Callable[[], bool] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> EpochStats:
    """Run `step(i)` for the epoch's steps, each timed by `timer` (the step starts and laps
    it; this finishes it), and account them: the bookkeeping every task shares."""
    return timed_steps(timer, epoch, lambda done: num_steps, step, out_of_time, on_step)


def timed_steps(
    timer: StepTimer,
    epoch: int,
    num_steps: Callable[[int], int],
    step: Callable[[int], StepResult | None],
    out_of_time: Callable[[], bool] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    after_step: Callable[[dict[str, float]], None] | None = None,
) -> EpochStats:
    """timed_epoch for an epoch whose length is known only as it goes: `num_steps(i)` is the
    step count as it stands after i steps (an adaptive batch size or a change of workers
    changes it mid-epoch); `step` returns None when no step was taken (an elastic run
    adopted a state that had finished the epoch). `after_step` gets each finished step's
    phases (outside the step's clock)."""
    stats = EpochStats()
    losses = []  # summed once at the end: one op an epoch instead of one a step
    i = 0
    while i < num_steps(i):
        try:
            result = step(i)
        except divergence.Diverged as err:
            # No epoch end will count this epoch (run.py): the steps it completed go with
            # the error. The diverged step is not one of them: its time is the loop's other.
            err.partial = stats
            raise
        if result is None:
            continue
        losses.append(result.loss)
        step_phases = timer.finish()
        step_s = sum(step_phases.values())
        stats.step_times_s.append(step_s)
        if epoch == 1 and i == 0:
            stats.first_step_s = step_s
        add_phases(stats.phases, step_phases)
        stats.steps += 1
        stats.samples += result.samples
        stats.tokens += result.tokens
        i += 1
        if after_step is not None:
            after_step(step_phases)
        if on_step is not None:
            on_step(i, num_steps(i))
        if out_of_time is not None and i % BUDGET_CHECK_EVERY_STEPS == 0 and out_of_time():
            stats.out_of_time = True
            break
    stats.loss_sum = float(torch.stack(losses).sum()) if losses else 0.0
    return stats


def batch_len(index: Batch) -> int:
    return index.stop - index.start if isinstance(index, slice) else int(index.numel())


def train_step(tr: Trainer, index: Batch, epochs_done: float, steps_done: int) -> torch.Tensor:
    """One timed step on the samples `index`; returns the loss (detached)."""
    tr.timer.start()
    x, y = load_batch(tr, index)
    lr = tr.config.lr_at(tr.world_size, epochs_done, steps_done)
    return optimize(tr, x, y, lr, int(epochs_done) + 1, steps_done + 1)


def load_batch(tr: Trainer, index: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's inputs and labels, augmented; ends the data lap."""
    x, y = tr.splits.train_x[index], tr.splits.train_y[index]
    if tr.splits.augment is not None:
        x = tr.splits.augment(x, tr.augment_generator)
    tr.timer.lap("data")
    return x, y


def optimize(
    tr: Trainer, x: torch.Tensor, y: torch.Tensor, lr: float, epoch: int, step: int
) -> torch.Tensor:
    """Forward, backward with the strategy's exchange, the optimizer at `lr`, the divergence
    check, and what the strategy communicates after it; the step's laps from forward on.
    `epoch` and `step` (both counting from 1) name where a divergence happened. Returns the
    loss."""
    timer = tr.timer
    watchdog.at(f"epoch {epoch}, step {step}")  # where a stalled collective stalled
    for group in tr.optimizer.param_groups:
        group["lr"] = lr
    strategy, closed_form = tr.strategy, tr.closed_form
    if closed_form is not None and isinstance(strategy, LocalGradients):
        loss = closed_form.forward(x, y)
        timer.lap("forward")
        closed_form.backward()
        timer.lap("backward")
        strategy.synchronize(timer)
    else:  # autograd; DDP's exchange runs in its hooks
        with precision.autocast(tr.precision, tr.device):
            output = strategy.module(x)
        loss = tr.objective.loss(output.float(), y)  # the loss in fp32 whatever the forward's
        timer.lap("forward")
        strategy.backward(loss, timer)
    tr.optimizer.step()
    divergence.check(loss, tr.optimizer, epoch, step)
    tr.optimizer.zero_grad(set_to_none=True)
    timer.lap("optimizer")
    tr.strategy.after_step(timer)  # model averaging communicates here
    return loss.detach()


def evaluate(tr: Trainer) -> float:
    """Top-1 accuracy over the whole test split (see evaluate_metrics)."""
    return evaluate_metrics(tr).accuracy


@torch.no_grad()
def evaluate_metrics(tr: Trainer) -> EvalMetrics:
    """Accuracy and loss over the whole test split: each rank scores a disjoint part, then the
    sums are added up, so the result is exact and identical on every rank."""
    tr.strategy.sync_buffers()
    model = tr.strategy.inner
    model.eval()
    index = eval_shard(tr.splits.num_test, tr.world_size, tr.rank).to(tr.device)
    sums = torch.zeros(3, dtype=torch.float64, device=tr.device)  # loss, correct, samples
    for part in batches(index, EVAL_BATCH_SIZE):
        with precision.autocast(tr.precision, tr.device):
            output = model(tr.splits.test_x[part])
        loss_sum, correct = tr.objective.eval_sums(output.float(), tr.splits.test_y[part])
        sums += torch.stack([loss_sum.double(), correct.double(), sums.new_tensor(part.numel())])
    dist.all_reduce(sums)
    model.train()
    return EvalMetrics(accuracy=float(sums[1] / sums[2]), loss=float(sums[0] / sums[2]))


def agreed_flag(flag: bool, device: torch.device) -> bool:
    """Rank 0's decision, on every rank (so no rank leaves a loop its peers stay in)."""
    tensor = torch.tensor([1 if flag else 0], device=device)
    dist.broadcast(tensor, 0)
    return bool(tensor.item())


class Deadline:
    """The run's time budget, agreed collectively; never expires when there is none."""

    def __init__(self, budget_s: float | None, start: float, device: torch.device) -> None:
        self._budget_s, self._start, self._device = budget_s, start, device

    def expired(self) -> bool:
        if self._budget_s is None:
            return False
        return agreed_flag(time.perf_counter() - self._start >= self._budget_s, self._device)
