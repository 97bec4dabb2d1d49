"""The environment a run ran in: code version, packages, hardware, network, seeds, world size.

Enough to tell two runs apart that should not be compared, and to rebuild the setting. The
network is what the launcher says it is (contract/network.py): a worker cannot tell.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from contract import network
from contract.manifest import Manifest, PluginRecord

PACKAGES = ("torch", "numpy", "scikit-learn", "sentencepiece", "sacrebleu", "stackbench")


def build(
    run_id: str,
    world_size: int,
    backend: str,
    device: torch.device,
    seed: int,
    plugins: tuple[PluginRecord, ...] = (),
) -> Manifest:
    """`plugins`: code from outside stackbench the run uses (workloads/plugins/provenance.py)."""
    return Manifest(
        run_id=run_id,
        code_version=code_version(),
        image=os.environ.get("STACKBENCH_IMAGE"),
        python=sys.version.split()[0],
        packages={name: _version(name) for name in PACKAGES},
        hardware=hardware(device),
        network=network.from_environ(os.environ),
        world_size=world_size,
        dist_backend=backend,
        seed=seed,
        torch_threads=torch.get_num_threads(),
        hostname=socket.gethostname(),
        plugins=plugins,
    )


def code_version() -> str:
    """The commit the workload code came from: baked into images, or asked of git here."""
    baked = os.environ.get("STACKBENCH_CODE_VERSION")
    if baked:
        return baked
    here = Path(__file__).resolve().parent
    try:
        commit = _git(here, "rev-parse", "HEAD")
        dirty = bool(_git(here, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return f"stackbench {_version('stackbench')}"
    return commit + ("-dirty" if dirty else "")


def hardware(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "device": device.type,
        **cpu_kernels(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
        info["cuda"] = torch.version.cuda
    return info


def cpu_kernels() -> dict[str, Any]:
    """Which vector instructions torch's CPU kernels use here (AVX2, AVX512 ...) and whether
    the CPU has bf16 dot products (AVX-512 BF16 or AMX): what speed and rounding figures
    depend on, read from this machine rather than assumed (an AVX2 CPU sums in another order
    than an AVX-512 one, and bf16 autocast is fast only with the latter's bf16 units)."""
    cpu = getattr(torch, "cpu", None)
    bf16 = [
        getattr(cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    ]
    return {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16_dot": any(bool(check()) for check in bf16 if callable(check)),
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):  # not Linux: fall back to platform
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=5
    ).stdout.strip()


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
