"""torch.compile, with every compilation done before the benchmark clock starts, once.

A compiled model compiles again for each new input shape and for evaluation mode; left to
happen on the fly, that would put tens of seconds of compilation inside the clock at the
first step, at the first short last batch of an epoch and at the first evaluation. So
`precompile` runs the shapes a run will see (the training batch and the epoch's last, short
batch; the evaluation batch and its remainder) through the compiled model on random inputs,
before run_start and without touching the data, then restores the model's state (BatchNorm
statistics move in training mode). What it cost is reported as compile time.

Compiling ResNet-20's shapes from nothing takes minutes on a small CPU; inductor keeps what
it compiled in a cache keyed to the graph, its input shapes and the torch version, so a
machine pays the full cost once and later runs only trace (seconds). That cache is code (the
Python modules and pickles inductor loads back), so it lives in the user's private cache,
checked before each use (workloads/runtime/cachedir.py), never beside the data sets. Without a C++
compiler (slim images) inductor cannot build its kernels: the run then trains the eager model
and says so (workloads/tasks/classification).
It does not choose whether compiling pays: bench/resnet_throughput.py measures that.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import torch
from torch import nn

from workloads.runtime import cachedir


def compile_model(model: nn.Module, kernel_cache: Path | None = None) -> nn.Module:
    """`model` compiled, its kernels cached in `kernel_cache` (a cachedir.compile_cache_dir,
    made and checked first: CacheRefused when it is not safe; default: inductor's own, under
    /tmp). Inductor reads the place from TORCHINDUCTOR_CACHE_DIR whenever it looks there,
    and importing torch._dynamo already set it to its default: hence overwritten."""
    if kernel_cache is not None:
        private = cachedir.prepare(kernel_cache)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(private)
        _private_headers(private / "precompiled_headers")
    return torch.compile(model)  # type: ignore[return-value]


def _private_headers(folder: Path) -> None:
    """Inductor precompiles its C++ kernels' headers into a folder it fixes at import from the
    temp dir, not TORCHINDUCTOR_CACHE_DIR (/tmp/torchinductor_<user>/precompiled_headers): a
    folder anyone on the machine may have made first, whose headers the compiler would take.
    They go beside the kernels in the private cache; where this torch has no such module
    variables, precompiled headers are switched off rather than read from /tmp."""
    from torch._inductor import codecache, config

    if isinstance(getattr(codecache, "_HEADER_DIR", None), str) and isinstance(
        getattr(codecache, "_HEADER_LOCK_DIR", None), str
    ):
        codecache._HEADER_DIR = str(folder)
        codecache._HEADER_LOCK_DIR = str(folder / "locks")
    else:
        config.cpp_cache_precompile_headers = False


def precompile(
    compiled: nn.Module,
    sample_shape: tuple[int, ...],
    train_batch_sizes: set[int],
    eval_batch_sizes: set[int],
    memory_format: torch.memory_format = torch.contiguous_format,
    forward_context: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
) -> float:
    """Compile `compiled` for every given batch size, training and evaluation, its forward
    passes in `forward_context` (the run's autocast: a graph compiled outside it would compile
    again at the first step); returns the seconds it took. Parameters, buffers and gradients
    are as they were before."""
    t0 = time.perf_counter()
    state = copy.deepcopy(compiled.state_dict())
    device = next(compiled.parameters()).device
    was_training = compiled.training

    def batch(n: int) -> torch.Tensor:
        x = torch.randn(n, *sample_shape, device=device)
        return x.contiguous(memory_format=memory_format) if x.dim() == 4 else x

    try:
        compiled.train()
        for n in sorted(train_batch_sizes, reverse=True):
            with forward_context():
                output = compiled(batch(n))
            output.float().sum().backward()
        compiled.eval()
        with torch.no_grad():
            for n in sorted(eval_batch_sizes, reverse=True):
                with forward_context():
                    compiled(batch(n))
    finally:  # compiled or not, the model is as it was
        compiled.load_state_dict(state)
        compiled.zero_grad(set_to_none=True)
        compiled.train(was_training)
    return time.perf_counter() - t0


def batch_sizes(num_samples: int, batch_size: int) -> set[int]:
    """The batch sizes `num_samples` samples split into: full batches and the remainder."""
    sizes = {min(batch_size, num_samples)} if num_samples else set()
    if num_samples % batch_size and num_samples > batch_size:
        sizes.add(num_samples % batch_size)
    return sizes
