"""What a task's forward passes compute in: fp32, or bf16 under autocast.

shared/BENCHMARKS.md's translation references train in mixed precision on GPUs; bf16 needs no
loss scaling (fp16 would), so "auto" means bf16 autocast for the translation models on CUDA
and fp32 everywhere else: CPUs have no fast bf16 path here, the image and linear references
are fp32, and AWD-LSTM's reference trains in fp32. The resolved choice is recorded in the run
summary, so two runs that differ in it are never compared unknowingly.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch

from workloads.config import TrainConfig


def resolve(config: TrainConfig, device: torch.device) -> str:
    """ "fp32" or "bf16" for `config` on `device`."""
    if config.execution.precision != "auto":
        return config.execution.precision
    return "bf16" if device.type == "cuda" and config.model.task == "translation" else "fp32"


def autocast(precision: str, device: torch.device) -> AbstractContextManager[object]:
    """The context forward passes run in: bf16 autocast, or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
