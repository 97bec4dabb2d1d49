"""What a local run needs, checked before anything starts: the workload's Python packages, the
device, the data set, and a compiled run's private kernel cache. Each check answers in
milliseconds (no torch import) and fails with one line naming what is missing and the command
that fixes it, instead of a worker's traceback seconds later.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from runner import install
from runner.errors import BackendUnavailable, DataUnavailable, SpecError
from runner.job.spec import JobSpec


def check(spec: JobSpec) -> None:
    check_packages()
    check_device(spec.placement.device, spec.placement.procs_per_node)
    check_data(spec)
    check_compile_cache(spec)


def check_packages() -> None:
    for module in ("torch", "numpy"):
        if importlib.util.find_spec(module) is None:
            raise BackendUnavailable(
                f"running here needs {module}, which this environment lacks: "
                f"{install.extra('workloads')} (or run `make demo`)"
            )


def check_device(device: str, procs_per_node: int) -> None:
    if device != "cuda":
        return
    gpus = visible_gpus()
    if gpus == 0:
        raise SpecError(
            "--device",
            "cuda asked, but no NVIDIA GPU is visible on this machine (no /dev/nvidia0, or "
            "CUDA_VISIBLE_DEVICES hides them all); use --device cpu",
        )
    if procs_per_node > gpus:
        raise SpecError(
            "--workers",
            f"one process per GPU: {procs_per_node} asked, {gpus} GPU(s) visible here",
        )


def check_data(spec: JobSpec) -> None:
    """The data set is here; in the closed division, the canonical one (its split sizes those
    of docs/benchmarks.md). Both checks are quick (workloads/data/canonical.py)."""
    from workloads.configuration.train_config import TrainConfig

    if not isinstance(spec.config, TrainConfig):
        return  # a micro-benchmark reads no data
    from runner.datasets import folder
    from runner.datasets.registered import DATASETS
    from workloads.data import DATA_DIR_ENV, canonical, data_root

    data = spec.config.data
    root = data_root(data.data_dir)
    named_by = (
        "data_dir" if data.data_dir else (DATA_DIR_ENV if os.environ.get(DATA_DIR_ENV) else "")
    )
    unusable = folder.problem(root, data.name, named_by) if data.name in DATASETS else None
    if unusable is not None:
        raise BackendUnavailable(f"{spec.benchmark}: {unusable}")
    if spec.division == "closed":
        problem = canonical.problem(root, data.name)
        if problem is not None:
            raise DataUnavailable(f"{spec.benchmark}: {problem}")
    else:
        problem = canonical.missing(root, data.name)
        if problem is not None:
            raise DataUnavailable(f"{spec.benchmark}: {problem}")


def check_compile_cache(spec: JobSpec) -> None:
    """A compiled run's kernel cache is made, private to this user, and safe to run code from
    (workloads/runtime/cachedir.py); the workers check it again before they use it."""
    from workloads.configuration.train_config import TrainConfig

    if not isinstance(spec.config, TrainConfig) or not spec.config.execution.compile_model:
        return
    from workloads.runtime import cachedir

    try:
        cachedir.prepare(cachedir.compile_cache_dir())
    except cachedir.CacheRefused as err:
        raise BackendUnavailable(f"{spec.benchmark}: {err}") from None


def visible_gpus() -> int:
    """NVIDIA GPUs this process may use: the device nodes, narrowed by CUDA_VISIBLE_DEVICES."""
    nodes = [p for p in Path("/dev").glob("nvidia[0-9]*") if p.name[len("nvidia") :].isdigit()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return len(nodes)
    wanted = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    return min(len(nodes), len(wanted))
