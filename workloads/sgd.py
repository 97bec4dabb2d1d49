"""SGD (momentum, Nesterov, weight decay): torch.optim.SGD(fused=True)'s update, without
torch.optim around it.

Why not torch.optim.SGD itself: every torch.optim step imports torch._dynamo on its first call
(torch/optim/optimizer.py, `_use_grad`), a second of every run's start-up on this 2-core
machine for a run that compiles nothing, and wraps each step in a profiler range, hooks and
checks: about 25 us a step, a tenth of a logistic-regression step (bench/startup.py,
bench/mlbench_compare.py). The update is torch's own fused kernel (torch._fused_sgd_), called
as torch.optim.SGD(fused=True) calls it, and the state is torch's (`state[p]
["momentum_buffer"]`, the same state_dict layout), so tests/workloads/test_sgd.py holds it to
torch's optimizer bit for bit. What the loops need of an optimizer is `Optimizer` below.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any, Protocol

import torch


class Optimizer(Protocol):
    """What the training loops use of an optimizer (torch.optim's optimizers have it too):
    the LR is set on `param_groups` each step; `state` holds per-parameter tensors (model
    averaging averages them); state_dict crosses to a joining elastic worker."""

    param_groups: list[dict[str, Any]]

    @property
    def state(self) -> Any: ...

    def step(self) -> Any: ...

    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class FusedSGD:
    """SGD over one parameter group, with torch.optim.SGD's hyperparameters (dampening 0,
    no maximize) and update rule."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        if nesterov and momentum <= 0:
            raise ValueError("Nesterov momentum needs momentum > 0")
        group = {"lr": lr, "momentum": momentum, "dampening": 0.0,
                 "weight_decay": weight_decay, "nesterov": nesterov}  # fmt: skip
        self.defaults = dict(group)
        self.param_groups: list[dict[str, Any]] = [{"params": list(params), **group}]
        self.state: defaultdict[torch.Tensor, dict[str, torch.Tensor]] = defaultdict(dict)

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            # One kernel call per device and dtype, as torch groups them for it.
            by_kind: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
            for p in group["params"]:
                if p.grad is not None:
                    by_kind.setdefault((p.device, p.dtype), []).append(p)
            for params in by_kind.values():
                self._update(params, group)

    def _update(self, params: list[torch.Tensor], group: dict[str, Any]) -> None:
        grads = [p.grad for p in params if p.grad is not None]  # all of them (step chose)
        momentum = group["momentum"]
        buffers: list[torch.Tensor] = []
        first = False
        if momentum != 0:
            found = [self.state[p].get("momentum_buffer") for p in params]
            first = all(b is None for b in found)
            if first:  # the kernel starts each buffer at its gradient
                for p, g in zip(params, grads, strict=True):
                    self.state[p]["momentum_buffer"] = torch.empty_like(g)
            elif any(b is None for b in found):
                raise RuntimeError("some parameters have a momentum buffer and others none")
            buffers = [self.state[p]["momentum_buffer"] for p in params]
        torch._fused_sgd_(
            params, grads, buffers,
            weight_decay=group["weight_decay"], momentum=momentum, lr=group["lr"],
            dampening=group["dampening"], nesterov=group["nesterov"], maximize=False,
            is_first_step=first,
        )  # fmt: skip

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: parameters by their position over the groups."""
        index: dict[torch.Tensor, int] = {}
        groups = []
        for group in self.param_groups:
            ids = [index.setdefault(p, len(index)) for p in group["params"]]
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {index[p]: dict(s) for p, s in self.state.items() if p in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
            len(g["params"]) != len(mine["params"])
            for g, mine in zip(groups, self.param_groups, strict=True)
        ):
            raise ValueError("the state is of an optimizer over other parameters")
        params = [p for group in self.param_groups for p in group["params"]]
        by_id = dict(zip((i for g in groups for i in g["params"]), params, strict=True))
        self.state = defaultdict(dict)
        for key, values in state_dict["state"].items():
            p = by_id[int(key)]
            # Copies: the state must not alias the optimizer (or message) it came from.
            self.state[p] = {k: v.to(p.device, p.dtype, copy=True) for k, v in values.items()}
        for group, saved in zip(self.param_groups, groups, strict=True):
            group.update({k: v for k, v in saved.items() if k != "params"})
