"""Divergence: a step whose loss or averaged gradient is not finite ends the run, at once.

Checked after the step's gradients are synchronised and before the optimizer applies them, so
the weights never take a non-finite update. Under an exact strategy every rank holds the same
averaged gradient, and a rank's non-finite loss makes it non-finite everywhere: every rank
stops at the same step, and rank 0 can record the run. (Under model averaging or a compressed
strategy the gradients are local: a rank may stop alone, and its peers fail when it goes.)
The cost is one fused norm over the gradients a step, on the gradients already in memory.
"""

from __future__ import annotations

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
    grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    values = [loss.detach().float().reshape(1)]
    if grads:
        values.append(torch.stack(torch._foreach_norm(grads)).float())
    if bool(torch.isfinite(torch.cat(values)).all()):
        return
    value = float(loss.detach().float())
    what = f"loss {value}" if not torch.isfinite(loss.detach()).all() else "gradient not finite"
    raise Diverged(f"diverged at epoch {epoch}, step {step}: {what}")
