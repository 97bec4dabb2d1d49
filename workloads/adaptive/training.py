"""The classification loop's epoch and step with the adaptive machinery (run.py) in them.

A step, timed as workloads/training/loop.py times one, with what adaptation adds booked where it
happens:

    start
    controller.before_step           a collective only where a policy decides here  -> communication
    draw rank's samples              the cursor at the agreed global batch          -> data
    monitor.begin_step               arms the probe on monitoring steps
    forward, backward, optimizer     the strategy's exchange read by the probe     -> as loop.py
    monitor.exchange                 one all-gather of a row per rank (monitoring steps)
    controller.after_step            one broadcast of the agreed knobs (decision points)
    strategy.switch                  a sync decision (to exact: weights averaged)  -> communication
    finish; then monitor.record_time and the events, outside the clock

Decisions taken after step s apply from step s + 1 on every rank: the global batch to the
next draw, the LR factor to the next LR, the synchronisation mode and period at once. The LR
is the schedule's at the epoch's fraction done (the batch changes the steps per epoch, not
the epochs) on the run's initial worker count, times the batch policy's factor.

Samples: where every rank holds the training set, each step takes the next global batch of
the epoch's order from the cursor (sampler.py), so the batch (and the world) can change
mid-epoch; data split into static per-rank shards (epsilon) keep loop.py's batches, and only
the monitors and the sync policy apply there (workloads/configuration/train_config.py refuses the
rest). Not here: building the machinery (run.py), the event log, the run's own reductions
(workloads/training/over_ranks.py).
"""

from __future__ import annotations

from collections.abc import Callable

from workloads.adaptive.batch import fit_to_world
from workloads.adaptive.policy import Decision
from workloads.adaptive.run import Adaptive
from workloads.adaptive.sampler import Cursor, epoch_order
from workloads.adaptive.sync import AdaptiveSyncStrategy, SyncMode, SyncState
from workloads.data.sampling import slice_batches
from workloads.strategies.base import trainable
from workloads.training.loop import (
    Batch,
    EpochStats,
    StepResult,
    Trainer,
    batch_len,
    load_batch,
    optimize,
    timed_steps,
)

SYNC_KNOBS = ("sync_mode", "averaging_period")


def attach(run: Adaptive, tr: Trainer) -> None:
    """Give the run the trainer it drives (an elastic change replaces it), and connect the
    monitor to the model it watches (|theta|^2, for the sync policy)."""
    run.trainer, run.world_size = tr, tr.world_size
    if run.monitor is not None and "sync" in tr.config.adaptive.policy:
        run.monitor.params = trainable(tr.strategy.inner)


def train_epoch(
    run: Adaptive,
    epoch: int,
    out_of_time: Callable[[], bool] | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> EpochStats:
    """Train epoch `epoch` (1-based) under the run's policies."""
    tr = run.trainer
    tr.strategy.module.train()
    if tr.splits.train_is_rank_shard:
        stats = _shard_epoch(run, epoch, out_of_time, on_step)
    else:
        stats = _shared_epoch(run, epoch, out_of_time, on_step)
    stats.loss_sum += run.trainer.objective.penalty_sum()
    return stats


def _shared_epoch(
    run: Adaptive,
    epoch: int,
    out_of_time: Callable[[], bool] | None,
    on_step: Callable[[int, int], None] | None,
) -> EpochStats:
    """Every rank holds the data: each step is the cursor's next global batch. The world
    may change between two steps (elastic workers); each step reads it afresh."""
    tr = run.trainer
    num = tr.splits.num_train
    if run.cursor.epoch != epoch - 1:  # a new epoch (an adopted cursor is mid-epoch already)
        run.cursor = Cursor(epoch - 1)
    order = epoch_order(num, epoch - 1, tr.config.run.seed).to(tr.device)

    def global_batch() -> int:
        return fit_to_world(run.global_batch, run.trainer.world_size)

    def draw() -> Batch:
        t = run.trainer
        return run.cursor.step_indices(order, global_batch(), t.world_size, t.rank)

    def once() -> StepResult | None:
        if run.cursor.epoch_done(num, run.trainer.world_size):
            return None  # an adopted cursor finished the epoch
        result = adaptive_step(run, draw, run.cursor.fraction(num))
        world = run.trainer.world_size
        run.cursor = run.cursor.advance(num, result.samples * world, world)
        return result

    def num_steps(done: int) -> int:
        if _budget_spent(run):  # after the step whose check found it spent, on every worker
            return done
        return done + run.cursor.steps_left(num, global_batch(), run.trainer.world_size)

    stats = timed_steps(
        tr.timer, epoch, num_steps, lambda i: _guarded_step(run, epoch, once), out_of_time, on_step,
        run_after(run),
    )  # fmt: skip
    stats.out_of_time = stats.out_of_time or _budget_spent(run)
    stats.samples = epoch_samples_share(run)
    return stats


def _budget_spent(run: Adaptive) -> bool:
    """An elastic run's agreed budget check (session.py): its workers count an epoch's steps
    differently (a joiner enters mid-epoch), so it is taken at the run's step count, in the
    step's decisions, not at timed_steps' per-epoch count."""
    return run.elastic is not None and run.elastic.out_of_time


def epoch_samples_share(run: Adaptive) -> int:
    """This rank's part of the epoch's sample count, which training/run.py sums over the ranks: all
    of it on rank 0, none elsewhere. Counted rank by rank, an elastic epoch loses the steps
    of a worker that left (its count leaves with it) and the step a survivor skipped when it
    adopted a state a step ahead. The cursor, handed over from the most advanced state at
    every change, holds exactly the positions of the epoch's order that completed steps
    trained on, whoever computed them; rank 0 is the run's writer, there from the start of
    every epoch to the run's end (its departure ends the run: session.WriterLeft)."""
    return run.cursor.consumed if run.trainer.rank == 0 else 0


def _shard_epoch(
    run: Adaptive,
    epoch: int,
    out_of_time: Callable[[], bool] | None,
    on_step: Callable[[int, int], None] | None,
) -> EpochStats:
    """Static per-rank shards: loop.py's batches (no batch policy and no elastic workers
    here: workloads/configuration/train_config.py refuses them, so the size and the world are
    fixed)."""
    tr = run.trainer
    cfg = tr.config
    batches = slice_batches(tr.splits.num_train, cfg.data.batch_size, tr.rank, epoch - 1,
                            cfg.run.seed)  # fmt: skip

    def step(i: int) -> StepResult:
        return adaptive_step(run, lambda: batches[i], epoch - 1 + i / len(batches))

    return timed_steps(
        tr.timer, epoch, lambda done: len(batches), step, out_of_time, on_step, run_after(run)
    )


def _guarded_step(
    run: Adaptive, epoch: int, once: Callable[[], StepResult | None]
) -> StepResult | None:
    """A step; in an elastic run, a step whose collective failed because a worker left is
    taken again once the survivors have re-formed and adopted the most advanced state (None:
    that state had finished the epoch). The re-formation is outside every step's clock: the
    step taken again starts its clock afresh."""
    if run.elastic is None:
        return once()
    return run.elastic.guard(once, (epoch, 0))  # 0: session.STEPS (it imports this module)


def adaptive_step(run: Adaptive, draw: Callable[[], Batch], epochs_done: float) -> StepResult:
    """One timed step under the run's policies (see the module docstring) on the samples
    `draw` gives once the step's first decisions are taken. The caller (timed_steps)
    finishes the step's clock."""
    step = run.steps_done
    timer = run.trainer.timer
    # Only after_step decisions change the factor: the LR is fixed before the step starts.
    lr = run.config.lr_at(run.initial_world, epochs_done, step) * run.lr_factor
    timer.start()
    # An elastic run's session takes them: a change of workers admits joiners in them.
    decide = run.controller.before_step if run.elastic is None else run.elastic.before_step
    run.record_decisions(decide(step, lr))
    timer.lap("communication")
    tr = run.trainer  # after a change of workers, the one on the new group
    index = draw()
    x, y = load_batch(tr, index)
    if run.monitor is not None:
        run.monitor.begin_step(step)
    loss = optimize(tr, x, y, lr, int(epochs_done) + 1, step + 1)
    snapshot = None
    if run.monitor is not None:
        snapshot = run.monitor.exchange(step, batch_len(index))
        if snapshot is not None:  # with the knobs this step trained with
            batch = fit_to_world(run.global_batch, tr.world_size)
            run.record_snapshot(snapshot, batch, batch_len(index) * tr.world_size, lr)
    decisions = run.controller.after_step(step, lr, snapshot)
    _apply_sync(tr, decisions, run)
    timer.lap("communication")
    run.record_decisions(decisions)
    run.steps_done += 1
    return StepResult(loss, batch_len(index))


def _apply_sync(tr: Trainer, decisions: list[Decision], run: Adaptive) -> None:
    """A sync decision takes effect now, on every rank (the switch may communicate)."""
    if not any(d.knob in SYNC_KNOBS for d in decisions):
        return
    strategy = tr.strategy
    if isinstance(strategy, AdaptiveSyncStrategy):
        strategy.switch(sync_state(run), tr.optimizer)


def sync_state(run: Adaptive) -> SyncState:
    """The synchronisation the sync policy's knobs say."""
    values = run.controller.values
    mode: SyncMode = "averaging" if values["sync_mode"] == "averaging" else "exact"
    return SyncState(mode, int(values["averaging_period"]))


def run_after(run: Adaptive) -> Callable[[dict[str, float]], None]:
    """What follows each step outside its clock: its time to the monitor, its records out."""

    def after(phases: dict[str, float]) -> None:
        if run.monitor is not None:
            run.monitor.record_time(phases)
        run.flush()

    return after
