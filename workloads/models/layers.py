"""A ModuleList's modules with their class: nn.ModuleList types every element as nn.Module,
so a model reaching a layer's own attributes (`layer.self_attn`) asks for them here.

Not here: building layers (each model's file).
"""

from __future__ import annotations

from typing import TypeVar

from torch import nn

M = TypeVar("M", bound=nn.Module)


def layers_of(modules: nn.ModuleList, kind: type[M]) -> list[M]:
    """The modules of `modules` in order, each checked to be a `kind`."""
    typed = [module for module in modules if isinstance(module, kind)]
    if len(typed) != len(modules):
        raise TypeError(f"expected only {kind.__name__} modules in {modules!r}")
    return typed
