"""Divergence: a step whose loss or averaged gradient is not finite ends the run, at once.

Checked right after the optimizer's update, on the step's loss and the parameters it has just
written: a non-finite gradient makes every parameter it reaches non-finite (NaN and infinity
survive every update rule here: SGD with momentum and weight decay, Adam, and clipping before
either; tests/workloads/test_divergence.py holds each), so this sees what a check of the
gradients would, at the same step, and reads
memory the update has just written instead of gradients backward wrote long before: on
cnn-digits 40-75 us in place against about 130 us for the gradients (bench/overhead.py). The
diverged step's weights are then not finite, and nothing reads them: the run ends there.
Under an exact strategy every rank holds the same averaged gradient, so the same weights,
and a rank's non-finite loss makes the gradient non-finite everywhere: every rank stops at
the same step, and rank 0 can record the run. (Under model averaging or a compressed
strategy the gradients are local: a rank may stop alone, and its peers fail when it goes.)
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from workloads.loop import EpochStats
    from workloads.sgd import Optimizer

# The exit code of a process whose run diverged (documented with `runner submit`'s).
DIVERGED_EXIT = 3


class Diverged(Exception):
    """The run diverged; the message says where and what ("... at epoch 3, step 41: loss
    nan"). `partial` is what the epoch it cut short had trained, this rank's (the epoch loop
    attaches it; none for a divergence in evaluation)."""

    partial: EpochStats | None = None


def check(loss: torch.Tensor, optimizer: Optimizer, epoch: int, step: int) -> None:
    """Call right after optimizer.step(): Diverged when the step's loss or any parameter
    the optimizer holds is not finite. `epoch` counts from 1, `step` is the run's optimizer
    step, counting from 1."""
    flags = _flags(optimizer)
    with torch.no_grad():  # it writes the parameters in place, times 1.0: every value stays
        for group, flag, one in flags:
            torch._amp_foreach_non_finite_check_and_unscale_(group, flag, one)
    value = loss.item()
    if math.isfinite(value) and not any(flag.item() for _, flag, _ in flags):
        return
    what = f"loss {value}" if not math.isfinite(value) else "weights not finite after the update"
    raise Diverged(f"diverged at epoch {epoch}, step {step}: {what}")


# Per optimizer, its parameters by device and dtype, each group with its flag and a 1.0:
# GradScaler's fused check takes one device and dtype a call. Found once: in place, after
# the pass over the weights, Python's own work was most of the check (the optimizer's
# parameters do not change during a run). A flag is set only when something is not finite,
# and then the run ends, so it is never reset.
_Groups = list[tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]]
_GROUPS: weakref.WeakKeyDictionary[Optimizer, _Groups] = weakref.WeakKeyDictionary()


def _flags(optimizer: Optimizer) -> _Groups:
    groups = _GROUPS.get(optimizer)
    if groups is None:
        by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                # The parameters themselves, not detached aliases: an alias would keep
                # reading the old storage if a parameter's .data were ever replaced.
                by_kind.setdefault((p.device, p.dtype), []).append(p)
        groups = [
            (tensors, torch.zeros(1, device=device), torch.ones(1, device=device))
            for (device, _), tensors in by_kind.items()
        ]
        _GROUPS[optimizer] = groups
    return groups
