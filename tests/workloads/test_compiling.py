import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from workloads.runtime.compiling import batch_sizes, compile_model, precompile


@pytest.mark.parametrize(
    ("num_samples", "batch_size", "expected"),
    [(100, 32, {32, 4}), (64, 32, {32}), (10, 32, {10}), (0, 32, set())],
)
def test_batch_sizes_are_the_full_batch_and_the_remainder(num_samples, batch_size, expected):
    assert batch_sizes(num_samples, batch_size) == expected


@pytest.mark.slow
def test_after_precompile_training_and_evaluation_compile_nothing_and_the_state_is_kept():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(72, 3))
    compiled = compile_model(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    precompile(compiled, (1, 8, 8), {16, 5}, {64, 7})
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters()) and compiled.training
    graphs = counters["stats"]["unique_graphs"]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for n in (16, 16, 5):  # an epoch: full batches, then the short one
        compiled(torch.randn(n, 1, 8, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    compiled.eval()
    with torch.no_grad():
        compiled(torch.randn(64, 1, 8, 8))
        compiled(torch.randn(7, 1, 8, 8))
    assert counters["stats"]["unique_graphs"] == graphs  # no compilation inside the clock


@pytest.mark.slow
def test_precompiled_under_the_runs_autocast_a_bf16_run_compiles_nothing_more():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(72, 3))
    compiled = compile_model(model)

    def bf16() -> torch.autocast:
        return torch.autocast("cpu", dtype=torch.bfloat16)

    precompile(compiled, (1, 8, 8), {16}, {64}, forward_context=bf16)
    graphs = counters["stats"]["unique_graphs"]
    with bf16():
        output = compiled(torch.randn(16, 1, 8, 8))
    assert output.dtype == torch.bfloat16
    output.float().sum().backward()
    compiled.eval()
    with torch.no_grad(), bf16():
        compiled(torch.randn(64, 1, 8, 8))
    assert counters["stats"]["unique_graphs"] == graphs


# A classification task built with compile_model in a fresh process of its own (dynamo's
# state and the inductor cache directory are per process): prints what it trains and where
# the compiled kernels went.
_BUILD_COMPILED = """
import json, os, sys, torch, torch.distributed as dist
from runner.job.benchmarks import CNN_DIGITS
from workloads import tasks
from workloads.telemetry.mllog import EventLog
from workloads.telemetry.timing import CpuClock
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
dist.init_process_group("gloo", rank=0, world_size=1)
# Batches of 719: the 1,438 training images in two full ones, so one training shape to compile
# (the default 32 compiles 32, then the 30 left over: twice the work, nothing more to check).
config = CNN_DIGITS.config.replace(compile_model=True, batch_size=719)  # data: $STACKBENCH_DATA
events = os.path.join(sys.argv[1], "events.jsonl")
task = tasks.build(tasks.Context(config, 0, 1, torch.device("cpu"), CpuClock(),
                                 EventLog(events, None)))
print(json.dumps({"module": type(task.trainer.strategy.module).__name__,
                  "cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR")}))
dist.destroy_process_group()
"""


def _build_compiled(data_dir, env):
    from tests.distributed import free_port

    done = subprocess.run(
        [sys.executable, "-c", _BUILD_COMPILED, str(data_dir), str(free_port())],
        env={**env, "STACKBENCH_DATA": str(data_dir)}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in (data_dir / "events.jsonl").read_text().splitlines()]
    return json.loads(done.stdout.strip().splitlines()[-1]), events


@pytest.mark.slow
def test_without_a_cpp_compiler_the_task_trains_the_eager_model_and_says_why(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["PATH"] = str(Path(sys.executable).parent)  # python, but no g++ or c++
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")  # not this user's own kernel cache
    built, events = _build_compiled(tmp_path, env)
    assert built["module"] == "DigitsCNN"
    (compile_event,) = [e for e in events if e["key"] == "stackbench_compile_time_s"]
    assert compile_event["value"] is None and compile_event["metadata"]["compiled"] is False
    assert "C++ compiler" in compile_event["metadata"]["reason"]


PLANTED = "open({marker!r}, 'a').write('ran')\n"


def _plant(cache: Path, marker: Path) -> None:
    """A line of code at the top of every Python file of a copied kernel cache."""
    sources = list(cache.rglob("*.py"))
    assert sources, "the cache holds no Python: nothing to plant in"
    for source in sources:
        source.write_text(PLANTED.format(marker=str(marker)) + source.read_text())


@pytest.mark.slow
@pytest.mark.timeout(900)  # a cold compile, then a warm one: minutes on a busy small CPU
def test_kernels_live_in_the_private_cache_and_code_planted_elsewhere_never_runs(tmp_path):
    data, xdg, other = tmp_path / "data", tmp_path / "xdg", tmp_path / "other"
    data.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    built, events = _build_compiled(data, {**env, "XDG_CACHE_HOME": str(xdg)})
    cache = xdg / "stackbench" / "compile"
    assert built["module"] == "OptimizedModule" and built["cache"] == str(cache)
    assert any(cache.rglob("*.py")) and stat.S_IMODE(cache.stat().st_mode) == 0o700
    (compile_event,) = [e for e in events if e["key"] == "stackbench_compile_time_s"]
    assert compile_event["value"] > 0 and compile_event["metadata"]["compiled"] is True
    # Planted where the cache used to be (the data folder), and in a copy open to others.
    marker = tmp_path / "planted-code-ran"
    shutil.copytree(cache, data / "torch-compile")
    _plant(data / "torch-compile", marker)
    shutil.copytree(cache, other / "stackbench" / "compile")
    _plant(other / "stackbench" / "compile", marker)
    (other / "stackbench" / "compile").chmod(0o755)
    built, _ = _build_compiled(data, {**env, "XDG_CACHE_HOME": str(xdg)})  # its own cache
    assert built["module"] == "OptimizedModule" and not marker.exists()
    refused = subprocess.run(
        [sys.executable, "-c", _BUILD_COMPILED, str(data), "0"], capture_output=True, text=True,
        env={**env, "STACKBENCH_DATA": str(data), "XDG_CACHE_HOME": str(other)}, timeout=600,
    )  # fmt: skip
    assert refused.returncode != 0 and not marker.exists()
    assert (
        "refusing the kernel cache" in refused.stderr and "is open to other users" in refused.stderr
    )
