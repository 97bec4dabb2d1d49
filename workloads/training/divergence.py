"""Divergence: a step whose loss or averaged gradient is not finite ends the run.

Checked right after the optimizer's update, each step, on two things that cost a few
microseconds: the step's loss, and one weight the update has just written (the sentinel, of
the output layer). A rank whose loss is not finite sends a gradient that is NaN wherever its
backward reaches, all of the output layer included, and the average carries it to every rank,
and the update into the weights (NaN and infinity survive every update rule here: SGD with
momentum and weight decay, Adam, and clipping before either; tests/workloads/
test_divergence.py holds each, and the sentinel of every benchmark model): so under an exact
strategy every rank, its own loss finite or not, stops at the same step, and rank 0 can record
the run. (Under model averaging or a compressed strategy the gradients are local: a rank may
stop alone, and its peers fail when it goes.)

Every weight is read only every WEIGHTS_EVERY_STEPS steps, and once more before the run's
record is written (check_all_weights): a pass over the weights is worth more than it costs
only now and then (on cnn-digits 75-90 us inside a 3-4.5 ms step, 25-37 us alone: it runs on
caches the step has just filled; the sentinel and the loss cost about 25 us there; README,
bench/overhead.py). What only that pass sees, a gradient overflowing within backward under a
finite loss, mostly reaches the next step's loss first (a non-finite weight makes the forward
non-finite); where it does not (an embedding row no batch reads), the run ends at the next
pass, whose message says so. No run whose weights are not finite is recorded as anything but
diverged.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from workloads.optimization.sgd import Optimizer
    from workloads.training.loop import EpochStats

# The exit code of a process whose run diverged (documented with `runner submit`'s).
DIVERGED_EXIT = 3


class Diverged(Exception):
    """The run diverged; the message says where and what ("... at epoch 3, step 41: loss
    nan"). `partial` is what the epoch it cut short had trained, this rank's (the epoch loop
    attaches it; none for a divergence in evaluation)."""

    partial: EpochStats | None = None


# A pass over every weight each this many steps (and at the run's end): see the module doc.
WEIGHTS_EVERY_STEPS = 16


def check(loss: torch.Tensor, optimizer: Optimizer, epoch: int, step: int) -> None:
    """Call right after optimizer.step(): Diverged when the step's loss or its sentinel
    weight is not finite, or, every WEIGHTS_EVERY_STEPS steps, any weight the optimizer
    holds. `epoch` counts from 1, `step` is the run's optimizer step, counting from 1."""
    value = loss.item()
    if not math.isfinite(value):
        raise Diverged(f"diverged at epoch {epoch}, step {step}: loss {value}")
    watch = _watch(optimizer)
    if not math.isfinite(watch.sentinel.item()):
        what = "weights not finite after the update"
        raise Diverged(f"diverged at epoch {epoch}, step {step}: {what}")
    if step % WEIGHTS_EVERY_STEPS == 0 and not watch.all_finite():
        raise Diverged(
            f"diverged at epoch {epoch}, step {step}: weights not finite (found by the pass over "
            f"every weight each {WEIGHTS_EVERY_STEPS} steps)"
        )


def forget() -> None:
    """Start a run: check_all_weights reads only the optimizers `check` sees from now on (a
    process may hold an earlier run's, in tests and benches)."""
    _WATCHES.clear()


def check_all_weights(where: str) -> None:
    """Diverged when a weight of any optimizer `check` saw since forget() is not finite:
    call before the run's record is written. `where` says when ("by the end of training")."""
    for watch in list(_WATCHES.values()):
        if not watch.all_finite():
            raise Diverged(f"diverged {where}: weights not finite")


@dataclass(frozen=True)
class _Watch:
    """What the check reads of one optimizer's parameters, found once (Python's own work was
    most of a check that looked each step; the optimizer's parameters do not change during a
    run)."""

    # By device and dtype, each group with its flag and a 1.0: GradScaler's fused check takes
    # one device and dtype a call. The parameters themselves, not detached aliases: an alias
    # would keep reading the old storage if a parameter's .data were ever replaced. A flag is
    # set only when something is not finite, and then the run ends, so it is never reset.
    groups: list[tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]]
    # The first element of the optimizer's last parameter: the output layer's (or a norm
    # after every block), which every sample's gradient reaches all of, where an embedding's
    # rows get only the gradients of the tokens a batch holds. A view, made once (a step's
    # indexing cost ten times its read); should .data ever be replaced, it would read the old
    # storage, and the pass over the parameters themselves still finds what it missed.
    sentinel: torch.Tensor

    def all_finite(self) -> bool:
        with torch.no_grad():  # it writes the parameters in place, times 1.0: values stay
            for group, flag, one in self.groups:
                torch._amp_foreach_non_finite_check_and_unscale_(group, flag, one)
        return not any(flag.item() for _, flag, _ in self.groups)


_WATCHES: weakref.WeakKeyDictionary[Optimizer, _Watch] = weakref.WeakKeyDictionary()


def _watch(optimizer: Optimizer) -> _Watch:
    watch = _WATCHES.get(optimizer)
    if watch is None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
        for p in params:
            by_kind.setdefault((p.device, p.dtype), []).append(p)
        groups = [
            (tensors, torch.zeros(1, device=device), torch.ones(1, device=device))
            for (device, _), tensors in by_kind.items()
        ]
        # The last parameter that has an element: one of none (a zero-size tensor) would
        # leave the sentinel a constant, and every step's weight check blind.
        held = [p for p in params if p.numel()]
        last = held[-1].detach() if held else torch.zeros(1)
        watch = _Watch(groups, last[(0,) * last.dim()])
        _WATCHES[optimizer] = watch
    return watch
