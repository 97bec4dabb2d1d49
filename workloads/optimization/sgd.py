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

import math
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
        if group["momentum"] == 0:
            self._fused(params, [], group, first=False)
            return
        # A parameter's gradient may first appear at any step (a branch the forward takes
        # only later): its buffer starts at its gradient then, as torch.optim.SGD's does,
        # while the others go on from theirs. The kernel takes one kind per call.
        fresh = [p for p in params if "momentum_buffer" not in self.state[p]]
        going = [p for p in params if "momentum_buffer" in self.state[p]]
        for p in fresh:  # the kernel's first step fills each buffer from its gradient
            self.state[p]["momentum_buffer"] = torch.empty_like(_grad(p))
        for kind, first in ((fresh, True), (going, False)):
            if kind:
                buffers = [self.state[p]["momentum_buffer"] for p in kind]
                self._fused(kind, buffers, group, first=first)

    @staticmethod
    def _fused(
        params: list[torch.Tensor], buffers: list[torch.Tensor], group: dict[str, Any], first: bool
    ) -> None:
        torch._fused_sgd_(
            params, [_grad(p) for p in params], buffers,
            weight_decay=group["weight_decay"], momentum=group["momentum"], lr=group["lr"],
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
        """Take a state_dict of an optimizer over the same parameters: all of it, or (a
        ValueError) none. It may come from another worker (an elastic joiner's): checked like
        anything received, since the fused kernel trusts every buffer to be its parameter's
        size and writes past the end of a smaller one."""
        groups, saved_state = _checked_layout(state_dict)
        if len(groups) != len(self.param_groups) or any(
            len(g["params"]) != len(mine["params"])
            for g, mine in zip(groups, self.param_groups, strict=True)
        ):
            raise ValueError("the state is of an optimizer over other parameters")
        params = [p for group in self.param_groups for p in group["params"]]
        by_id = dict(zip((i for g in groups for i in g["params"]), params, strict=True))
        state: defaultdict[torch.Tensor, dict[str, torch.Tensor]] = defaultdict(dict)
        for key, values in saved_state.items():
            p = by_id.get(int(key)) if _is_index(key) else None
            if p is None or not isinstance(values, dict):
                raise ValueError(f"the state of parameter {key} is of no parameter here")
            # Copies: the state must not alias the optimizer (or message) it came from.
            state[p] = {name: _checked_buffer(key, name, v, p) for name, v in values.items()}
        hyper = [_checked_hyperparameters(saved) for saved in groups]
        self.state = state
        for group, saved in zip(self.param_groups, hyper, strict=True):
            group.update(saved)


def _checked_layout(state_dict: object) -> tuple[list[dict[str, Any]], dict[Any, Any]]:
    """The groups and the per-parameter state of a state_dict, refused (ValueError) unless
    they are a list of groups, each a dict with a list of parameter indices, and a dict."""
    if not isinstance(state_dict, dict):
        raise ValueError("the state is not an optimizer's state_dict")
    groups, state = state_dict.get("param_groups"), state_dict.get("state")
    if not isinstance(groups, list) or not isinstance(state, dict):
        raise ValueError("the state has no list of param_groups and dict of state")
    for group in groups:
        ids = group.get("params") if isinstance(group, dict) else None
        if not isinstance(ids, list) or not all(_is_index(i) for i in ids):
            raise ValueError("a group of the state has no list of parameter indices")
    return groups, state


def _is_index(key: object) -> bool:
    """An index of a parameter as a state_dict holds it: an int, or its decimal digits."""
    if isinstance(key, bool):
        return False
    return isinstance(key, int) or (isinstance(key, str) and key.isascii() and key.isdigit())


def _checked_buffer(key: object, name: str, value: object, p: torch.Tensor) -> torch.Tensor:
    if name != "momentum_buffer" or not isinstance(value, torch.Tensor):
        raise ValueError(f"the state of parameter {key} has an unknown entry {name!r}")
    # The fused kernel takes dense real values only (a sparse buffer failed at the next step,
    # a meta one has no values to copy).
    if value.layout != torch.strided or value.is_meta or not value.is_floating_point():
        raise ValueError(
            f"the momentum buffer of parameter {key} is not dense real numbers "
            f"({value.layout}, {value.dtype}, {value.device})"
        )
    if value.shape != p.shape:
        raise ValueError(
            f"the momentum buffer of parameter {key} is {list(value.shape)}, "
            f"the parameter {list(p.shape)}"
        )
    return value.to(p.device, p.dtype, copy=True)


def _checked_hyperparameters(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved group's hyperparameters (its "params" left out), refused unless each is one
    FusedSGD has, of its type and finite."""
    out = {k: v for k, v in saved.items() if k != "params"}
    for k, v in out.items():
        if k == "nesterov":
            ok = isinstance(v, bool)
        elif k in _TORCH_FLAGS:  # torch.optim.SGD's, at the values that are this update
            ok = any(v is allowed for allowed in _TORCH_FLAGS[k])
        else:
            number = isinstance(v, int | float) and not isinstance(v, bool)
            # torch.optim.SGD refuses a negative one too (a negative momentum or weight
            # decay is no SGD: it amplifies what it should damp).
            ok = k in _NUMBERS and number and math.isfinite(v) and v >= 0
        if not ok:
            raise ValueError(f"the state's {k} is not an SGD hyperparameter: {v!r}")
    if out.get("nesterov") and not out.get("momentum", 0) > 0:
        raise ValueError("the state's Nesterov momentum has no momentum")
    return out


_NUMBERS = frozenset({"lr", "momentum", "dampening", "weight_decay"})
_TORCH_FLAGS = {"maximize": (False,), "differentiable": (False,),
                "foreach": (None, False, True), "fused": (None, False, True)}  # fmt: skip


def _grad(p: torch.Tensor) -> torch.Tensor:
    """The gradient of a parameter that step() chose for having one."""
    assert p.grad is not None
    return p.grad
