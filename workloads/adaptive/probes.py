"""Reading |g_local|^2 and |g_mean|^2 out of the gradient exchange a step already does.

The noise scale (noise.py) needs each worker's local gradient norm and the norm of the
all-reduced gradient. No strategy keeps the local gradient after its exchange, so the probe
sits where both exist, on the steps it is armed for (monitoring steps), and nowhere else:

- DDP and its compression hooks (`wrap_comm_hook`): DDP hands each bucket of local gradients
  to the communication hook before any communication. The wrapper reads the bucket's squared
  norm, calls the hook, and reads the squared norm of the bucket the hook's future returns
  (the averaged gradient DDP copies into .grad), in a `then` callback that DDP waits for
  before backward returns. Sums over buckets are the whole model's norms. Cost on an armed
  step: two reads of the gradient memory (one norm kernel per bucket before its
  collective, one after), no extra collective and no host synchronisation here; unarmed
  steps pay one attribute test per bucket.
- Strategies that exchange after backward (`wrap_exchange`: allreduce, allreduce-per-param,
  gather-scatter): the norms of the gradient list before and after the exchange, one fused
  norm over the list each.
The norms are reduced in the gradients' own precision (float32 sums in a tree, on GPU and
CPU alike) and accumulated in float64: the estimator subtracts them, not their elements.
For a compressed strategy (fp16/bf16, PowerSGD) the "mean" norm is that of what the workers
apply, the decompressed approximation, so B_noise then describes the compressed training.
Not here: the formulas (noise.py) or communicating the readings (monitors.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from workloads.strategies.base import Collectives

CommHook = Callable[[Any, Any], torch.futures.Future[torch.Tensor]]
GradientExchange = Callable[[list[torch.Tensor], Collectives], None]


@dataclass(frozen=True)
class ProbeReading:
    """One armed step's squared norms (0-d float64 tensors on the gradients' device)."""

    local_sq_norm: torch.Tensor
    mean_sq_norm: torch.Tensor
    parts: int  # buckets (DDP) or gradient lists (exchanges) read


def sq_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """sum_i |t_i|^2 as a 0-d float64 tensor (one fused norm kernel over the list)."""
    norms = torch._foreach_norm(tensors)
    return torch.stack(norms).double().square().sum()


class GradientProbe:
    """Collects the norms of the local and the averaged gradient while armed.

    Parts are appended to lists rather than summed in place: DDP completes bucket futures on
    the communication library's threads, and list.append is atomic under the GIL."""

    def __init__(self) -> None:
        self.armed = False
        self._local: list[torch.Tensor] = []
        self._mean: list[torch.Tensor] = []

    def arm(self) -> None:
        self.armed = True
        self._local, self._mean = [], []

    def disarm(self) -> ProbeReading | None:
        """Stop reading; the step's reading, or None when no gradient was exchanged (a step
        without gradients, or only no_sync micro-batches)."""
        self.armed = False
        if not self._local or len(self._local) != len(self._mean):
            return None
        return ProbeReading(
            torch.stack(self._local).sum(), torch.stack(self._mean).sum(), len(self._local)
        )

    def wrap_comm_hook(self, hook: CommHook) -> CommHook:
        """A DDP communication hook that reads the bucket before and after `hook`."""

        # No annotations: DDP inspects a hook's annotations at runtime.
        def probed(state, bucket):  # type: ignore[no-untyped-def]
            if not self.armed:
                return hook(state, bucket)
            self._local.append(sq_norm([bucket.buffer()]))
            return hook(state, bucket).then(self._read_mean)

        return probed

    def _read_mean(self, fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        reduced = fut.value()
        self._mean.append(sq_norm([reduced]))
        return reduced

    def wrap_exchange(self, exchange: GradientExchange) -> GradientExchange:
        """A gradient exchange (strategies/gradients.py) that reads the list before and after."""

        def probed(grads: list[torch.Tensor], collectives: Collectives) -> None:
            if not self.armed or not grads:
                exchange(grads, collectives)
                return
            self._local.append(sq_norm(grads))
            exchange(grads, collectives)
            self._mean.append(sq_norm(grads))

        return probed
