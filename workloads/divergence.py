"""Divergence: a step whose loss or averaged gradient is not finite ends the run, at once.

Checked right after the optimizer's update, on the step's loss and the parameters it has just
written: a non-finite gradient makes every parameter it reaches non-finite (NaN and infinity
survive every update rule: SGD with momentum and weight decay, Adam, ASGD, a clipped
gradient), so this sees what a check of the gradients would, at the same step, and reads
memory the update left in the cache instead of gradients backward wrote long before: on
cnn-digits about 30 us in place against 130 us for the gradients (bench/overhead.py). The
diverged step's weights are then not finite, and nothing reads them: the run ends there.
Under an exact strategy every rank holds the same averaged gradient, so the same weights,
and a rank's non-finite loss makes the gradient non-finite everywhere: every rank stops at
the same step, and rank 0 can record the run. (Under model averaging or a compressed
strategy the gradients are local: a rank may stop alone, and its peers fail when it goes.)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from workloads.sgd import Optimizer

# The exit code of a process whose run diverged (documented with `runner submit`'s).
DIVERGED_EXIT = 3


class Diverged(Exception):
    """The run diverged; the message says where and what ("... at epoch 3, step 41: loss
    nan")."""


def check(loss: torch.Tensor, optimizer: Optimizer, epoch: int, step: int) -> None:
    """Call right after optimizer.step(): Diverged when the step's loss or any parameter
    the optimizer holds is not finite. `epoch` counts from 1, `step` is the run's optimizer
    step, counting from 1. (The optimizer's flat parameter lists, not module.parameters():
    walking the module tree every step cost more than the check's own kernels.)"""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if _all_finite([loss.detach().reshape(1).float(), *params]):
        return
    value = float(loss.detach().float())
    what = f"loss {value}" if not math.isfinite(value) else "weights not finite after the update"
    raise Diverged(f"diverged at epoch {epoch}, step {step}: {what}")


@torch.no_grad()  # the check's in-place pass over leaf parameters
def _all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every element is finite, by GradScaler's own fused check: one pass over the
    tensors of each device and dtype (per-tensor norms take longer on CPU). It scales them
    by 1.0 in place, which leaves every value, finite or not, as it was."""
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    flags = {device: torch.zeros(1, device=device) for device, _ in groups}
    for (device, _), group in groups.items():
        one = torch.ones(1, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(group, flags[device], one)
    return not any(bool(flag) for flag in flags.values())
