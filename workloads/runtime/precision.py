"""What a task's forward passes compute in: fp32, or bf16 under autocast.

Every task honours `precision=bf16`: the model's forward passes (training and evaluation) run
under bf16 autocast and the loss is taken in fp32, as the translation references train on
GPUs; bf16 needs no loss scaling (fp16 would). "auto" means bf16 for the translation models on
CUDA and fp32 everywhere else: the image and linear references, and AWD-LSTM's, train in fp32,
and a benchmark compares like with like. A CPU with bf16 dot products (AVX-512 BF16, AMX) runs
ResNet-20 about 1.3-1.7x as fast in bf16 as in fp32 (1.85-1.98x MLBench's fp32 reference,
bench/mlbench_compare.py --precision bf16), a CPU without them slower: that is a choice for
the user, not a default. The resolved choice is
recorded in the run summary, so two runs that differ in it are never compared unknowingly.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch


def resolve(configured: str, task: str, device: torch.device) -> str:
    """ "fp32" or "bf16" for ExecutionConfig.precision `configured`, a model trained by
    `task` (its kind), on `device`."""
    if configured != "auto":
        return configured
    return "bf16" if device.type == "cuda" and task == "translation" else "fp32"


def autocast(precision: str, device: torch.device) -> AbstractContextManager[object]:
    """The context forward passes run in: bf16 autocast, or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
