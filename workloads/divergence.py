"""Divergence: a step whose loss or averaged gradient is not finite ends the run, at once.

Checked after the step's gradients are synchronised and before the optimizer applies them, so
the weights never take a non-finite update. Under an exact strategy every rank holds the same
averaged gradient, and a rank's non-finite loss makes it non-finite everywhere: every rank
stops at the same step, and rank 0 can record the run. (Under model averaging or a compressed
strategy the gradients are local: a rank may stop alone, and its peers fail when it goes.)
The cost is one fused pass over the gradients a step, on the gradients already in memory.
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
    """Diverged when the step's loss or any synchronised gradient the optimizer is about to
    apply is not finite. `epoch` counts from 1, `step` is the run's optimizer step, counting
    from 1. (The optimizer's flat parameter lists, not module.parameters(): walking the
    module tree every step cost more than the check's own kernels on small models.)"""
    if not _all_finite([loss.detach().reshape(1).float(), *_gradients(optimizer)]):
        value = float(loss.detach().float())
        what = f"loss {value}" if not math.isfinite(value) else "gradient not finite"
        raise Diverged(f"diverged at epoch {epoch}, step {step}: {what}")


def _gradients(optimizer: Optimizer) -> list[torch.Tensor]:
    return [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]


def _all_finite(tensors: list[torch.Tensor]) -> bool:
    """Whether every element is finite, by GradScaler's own fused check: one pass over the
    tensors of each device and dtype, about half the time of per-tensor norms on CPU (see
    bench/overhead.py). It scales them by 1.0 in place, which leaves every value as it was."""
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.device, tensor.dtype), []).append(tensor)
    flags = {device: torch.zeros(1, device=device) for device, _ in groups}
    for (device, _), group in groups.items():
        one = torch.ones(1, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(group, flags[device], one)
    return not any(bool(flag) for flag in flags.values())
