"""Exporting the stack outputs contract/stack.py declares, and the GPU pool's taint pair.

`export_outputs` takes exactly the declared names (anything else is a bug in the program, so
it raises) and marks the declared secrets secret. The taint and its toleration live together
here because the pool's taint and the exported toleration must agree. Creates no resources.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.stack import OUTPUT_NAMES, SECRET_OUTPUTS

# One taint on every GPU node, so that only pods asking for GPUs land there.
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "present"
GPU_TAINT_EFFECT = "NoSchedule"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
# On every node of a cloud stack's training pool, so jobs never land on the system pool
# (which would skew a CPU scaling study); kind has one pool and needs no selector.
TRAIN_POOL_LABEL = "stackbench/pool"


def export_outputs(values: Mapping[str, Any]) -> None:
    """pulumi.export every contract output; values are plain values or pulumi Outputs."""
    import pulumi

    if set(values) != set(OUTPUT_NAMES):
        missing, extra = set(OUTPUT_NAMES) - set(values), set(values) - set(OUTPUT_NAMES)
        raise ValueError(f"stack outputs off contract: missing {missing}, extra {extra}")
    for name in OUTPUT_NAMES:
        value = values[name]
        pulumi.export(name, pulumi.Output.secret(value) if name in SECRET_OUTPUTS else value)


def gpu_tolerations(has_gpus: bool) -> list[dict[str, str]]:
    """The toleration a job needs for the GPU pool's taint (none for CPU-only stacks)."""
    if not has_gpus:
        return []
    return [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": GPU_TAINT_EFFECT}]
