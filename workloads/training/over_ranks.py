"""The training run's own reductions over its ranks, which run.py takes at an epoch's end
and at the run's end: what the summary reports is the run's, not rank 0's alone. Each is a
collective every rank takes at the same point (an elastic run's inside its guard, so it is
taken again on the re-formed group when a worker left during it)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workloads.telemetry.timing import LOOP_PHASES
from workloads.training.loop import EpochStats


def epoch_sums(stats: EpochStats, device: torch.device) -> tuple[int, int, float]:
    """Samples and tokens over all ranks, and the epoch's mean training loss. Summed, not
    rank 0's times the ranks: length-batched ranks see different amounts."""
    samples, tokens = _sum([stats.samples, stats.tokens], device)
    return samples, tokens, _mean_loss(stats.loss_sum, stats.steps, device)


def mean_phases(phases: dict[str, float], device: torch.device) -> dict[str, float]:
    """Phase totals averaged over ranks: ranks wait for each other in different phases."""
    values = torch.tensor([phases[p] for p in LOOP_PHASES], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    world = dist.get_world_size()
    return {p: float(v) / world for p, v in zip(LOOP_PHASES, values, strict=True)}


def _mean_loss(loss_sum: float, steps: int, device: torch.device) -> float:
    """The epoch's mean training loss over every rank's batches, not rank 0's alone."""
    sums = torch.tensor([loss_sum, float(steps)], dtype=torch.float64, device=device)
    dist.all_reduce(sums)
    return float(sums[0] / sums[1]) if sums[1] > 0 else 0.0


def _sum(counts: list[int], device: torch.device) -> list[int]:
    values = torch.tensor(counts, dtype=torch.int64, device=device)
    dist.all_reduce(values)
    return [int(v) for v in values]
