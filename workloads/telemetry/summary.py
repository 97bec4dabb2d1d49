"""The run's outcome (summary.json's record, contract/summary.py), from what the loop measured.

Throughput and step time come from the training loop's wall time (the run's wall time less
evaluation), not from the sum of the step timers: the time between steps (bookkeeping, the
epoch's shuffling and reductions) is part of what a user waits for. The phase split keeps
every step phase and shows that remainder as its own share, `other`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contract.summary import AdaptiveSummary, Evaluation, TrainLoss, TrainSummary
from workloads.configuration.train_config import TrainConfig
from workloads.tasks import best_of
from workloads.telemetry.timing import (
    LOOP_PHASES,
    OTHER_PHASE,
    PHASES,
    add_phases,
    shares,
    zero_phases,
)

if TYPE_CHECKING:
    from workloads.training.loop import EpochStats

STEP_TIMES_KEPT = 100  # the run's first steps, timed one by one (rank 0's)
# The CS744 study's figure: the mean step time over steps 2 to 40 (1-based), which leaves
# out the first, warm-up step.
ITERATION_WINDOW = (2, 40)


@dataclass
class RunTally:
    """What the run accumulates as it goes (rank-local until `reduce`d)."""

    steps: int = 0
    samples: int = 0  # global: train_samples (see summarize)
    tokens: int = 0  # global target tokens (sequence tasks)
    epochs: int = 0
    phases: dict[str, float] = field(default_factory=zero_phases)  # + `other` once closed
    first_step_s: float = 0.0
    eval_s: float = 0.0
    evals: list[dict[str, float]] = field(default_factory=list)  # {epoch, value, time_s}
    time_to_target_s: float | None = None
    out_of_time: bool = False
    diverged: str | None = None  # why the run stopped diverged (workloads/training/divergence.py)
    step_times_s: list[float] = field(default_factory=list)  # the first STEP_TIMES_KEPT
    train_losses: list[dict[str, float]] = field(default_factory=list)  # {epoch, value, time_s}

    def add_step_times(self, times_s: list[float]) -> None:
        self.step_times_s.extend(times_s[: STEP_TIMES_KEPT - len(self.step_times_s)])

    def add_epoch(
        self, phases: dict[str, float], steps: int, samples: int, tokens: int = 0
    ) -> None:
        add_phases(self.phases, phases)
        self.steps += steps
        self.samples += samples
        self.tokens += tokens
        self.epochs += 1

    def add_diverged_epoch(self, partial: EpochStats, world_size: int) -> None:
        """The epoch a divergence cut short, from this rank alone: no collective runs after a
        divergence (a peer may be gone). Its steps and phases as every rank's; its samples
        and tokens this rank's times the world (each rank's shard of a step is the same size,
        workloads/data/sampling.py; length-batched ranks' are about the same). Not an epoch."""
        add_phases(self.phases, partial.phases)
        self.add_step_times(partial.step_times_s)
        if partial.first_step_s is not None:
            self.first_step_s = partial.first_step_s
        self.steps += partial.steps
        self.samples += partial.samples * world_size
        self.tokens += partial.tokens * world_size

    def close_loop(self, train_wall_s: float) -> None:
        """Book the loop's wall time not covered by step phases as `other`."""
        self.phases[OTHER_PHASE] = max(0.0, train_wall_s - sum(self.phases[p] for p in PHASES))


def summarize(
    config: TrainConfig,
    tally: RunTally,
    *,
    run_id: str,
    benchmark: str,
    division: str,
    strategy: str,
    world_size: int,
    device: str,
    precision: str,
    run_time_s: float,
    init_time_s: float,
    adaptive: AdaptiveSummary | None = None,
    start_world_size: int | None = None,
) -> TrainSummary:
    """The run's summary. `world_size` is the world at its end, `start_world_size` (default:
    the same) at its start, which the global batch is given for."""
    loop = {p: tally.phases.get(p, 0.0) for p in LOOP_PHASES}
    train_s = sum(loop.values())  # the loop's wall time once close_loop has run
    # Steady state exists from the second step on; before it there is no rate to report (a
    # run that diverged in its first epoch, whose steps were never tallied, is not 0/s).
    steady_s = train_s - tally.first_step_s if tally.steps > 1 else 0.0
    steady_samples = tally.samples - tally.samples / max(1, tally.steps)  # minus ~one step
    steady_tokens = tally.tokens - tally.tokens / max(1, tally.steps)
    evals = [_evaluation(e) for e in tally.evals]
    best = best_of(config.target_metric, tally.evals)
    reached = tally.time_to_target_s is not None
    return TrainSummary(
        run_id=run_id,
        benchmark=benchmark,
        division=division,
        strategy=strategy,
        world_size=world_size,
        device=device,
        precision=precision,  # what forward passes computed in (workloads/runtime/precision.py)
        status="diverged" if tally.diverged else ("success" if reached else "aborted"),
        diverged=tally.diverged,
        target_metric=config.target_metric,
        target_value=config.target.target_value,
        target_reached=reached,
        time_to_target_s=tally.time_to_target_s,
        stopped_by_time_budget=tally.out_of_time,
        final=evals[-1] if evals else None,
        best=_evaluation(best) if best else None,
        epochs=tally.epochs,
        steps=tally.steps,
        # Samples that completed optimizer steps trained on, over all workers and the whole
        # run. Under elasticity: every worker's, a worker that left included, each sample of
        # a step counted once whoever completed it; a step in flight when a worker left, taken
        # again on the new group, counts once (adaptive/training.epoch_samples_share).
        train_samples=tally.samples,
        global_batch_size=config.start_global_batch(start_world_size or world_size),
        batch_unit=config.data.batch_unit,
        run_time_s=run_time_s,
        init_time_s=init_time_s,
        train_time_s=train_s,
        eval_time_s=tally.eval_s,
        warmup_steps=1 if tally.steps else 0,
        warmup_time_s=tally.first_step_s,
        # Steady state: the first (warm-up) step is reported above, not averaged in.
        throughput_samples_per_s=steady_samples / steady_s if steady_s > 0 else None,
        throughput_tokens_per_s=steady_tokens / steady_s if steady_s > 0 and tally.tokens else None,
        step_time_ms=1000 * steady_s / (tally.steps - 1) if tally.steps > 1 else None,
        phases_s=loop,
        phase_shares=shares(loop),  # of the loop's wall time
        communication_share=shares(loop)["communication"],
        first_step_times_ms=tuple(1000 * t for t in tally.step_times_s),
        iteration_time_ms_2_to_40=window_mean_ms(tally.step_times_s, *ITERATION_WINDOW),
        adaptive=adaptive,
        train_loss=train_loss_report(tally.train_losses, config.target.target_train_loss),
    )


def _evaluation(record: dict[str, Any]) -> Evaluation:
    details = {k: v for k, v in record.items() if k not in ("epoch", "value", "loss", "time_s")}
    return Evaluation(
        int(record["epoch"]), record["value"], record["time_s"], record.get("loss"), details
    )


def train_loss_report(losses: list[dict[str, float]], target: float | None) -> TrainLoss:
    """The last epoch's mean training loss and, given a target, when it was first reached."""
    reached = [e for e in losses if target is not None and e["value"] <= target]
    return TrainLoss(
        final=losses[-1]["value"] if losses else None,
        target=target,
        time_to_target_s=reached[0]["time_s"] if reached else None,
        target_epoch=int(reached[0]["epoch"]) if reached else None,
    )


def window_mean_ms(step_times_s: list[float], first: int, last: int) -> float | None:
    """Mean of steps first..last (1-based, inclusive) in ms; of those there are when the run
    was shorter; None without any."""
    window = step_times_s[first - 1 : last]
    return 1000 * sum(window) / len(window) if window else None
