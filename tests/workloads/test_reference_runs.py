"""Short 2-worker runs of the real entry point (torchrun -m workloads.train) on generated
files in the canonical formats: the whole path from files to a lower loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract.events import read_events
from runner.job.benchmarks import BENCHMARKS
from tests.datagen import write_cifar10, write_epsilon
from tests.workloads.entry import run_entry, succeeded
from workloads.configuration.train_config import TrainConfig

pytestmark = pytest.mark.slow


def torchrun(
    config: TrainConfig,
    out: Path,
    workers: int = 2,
    benchmark: str = "",
    open_division: bool = False,
    timeout_s: float = 240.0,
) -> dict:
    """A run on generated data: open division where its sizes are not the canonical ones."""
    args = [*(["--benchmark", benchmark] if benchmark else []),
            *(["--open-division"] if open_division else [])]  # fmt: skip
    succeeded(run_entry(config, out, *args, workers=workers, timeout_s=timeout_s))
    return json.loads((out / "summary.json").read_text())


def train_losses(out: Path) -> list[float]:
    return [e["value"] for e in read_events(out / "events.jsonl") if e["key"] == "train_loss"]


def _small_resnet20(data_dir: Path, **changes: object) -> TrainConfig:
    write_cifar10(data_dir, per_train_batch=32, num_test=40)
    return BENCHMARKS["resnet20-cifar10"].config.replace(
        data_dir=str(data_dir),
        max_epochs=3,
        batch_size=16,
        warmup_epochs=1.0,
        lr_milestones=(),
        stop_at_target=False,
        **changes,
    )


@pytest.fixture(scope="module")
def eager_resnet20(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One eager 2-worker ResNet-20 run on generated CIFAR-format files: the next two tests
    read the same run (it was run twice, once for each: about a minute on 2 cores)."""
    root = tmp_path_factory.mktemp("eager-resnet20")
    config = _small_resnet20(root / "data", compile_model=False)
    return root / "out", torchrun(config, root / "out", open_division=True)


def test_two_worker_resnet20_run_on_cifar_format_files_lowers_the_loss(eager_resnet20):
    # Eager: what compiling changes is the next test's.
    out, summary = eager_resnet20
    losses = train_losses(out)
    assert len(losses) == 3 and losses[-1] < 0.8 * losses[0]
    assert summary["steps"] == 3 * 5  # 160 images, 80 per worker, batches of 16
    assert summary["final"]["loss"] > 0 and 0.0 <= summary["final"]["value"] <= 1.0


# Compiling ResNet-20 forward and backward takes minutes on 2 loaded cores (past pytest's 300
# s there, with the eager run it shares): the guard is the compiled run's own 600 s, and more.
@pytest.mark.timeout(900)
def test_the_compiled_default_trains_as_the_eager_model_does_on_two_ddp_workers(
    tmp_path, eager_resnet20
):
    compiled = _small_resnet20(tmp_path / "data")  # the same files: write_cifar10 is seeded
    assert compiled.execution.compile_model  # the registry's default
    torchrun(compiled, tmp_path / "compiled", open_division=True, timeout_s=600)
    eager_out, _ = eager_resnet20  # the same config but compile_model
    compiled_losses, eager_losses = train_losses(tmp_path / "compiled"), train_losses(eager_out)
    # Inductor's C++ kernels compute the same fp32 graph as ATen's but sum in another order,
    # with vectors as wide as the CPU has (AVX-512 or AVX2): each step's loss agrees to fp32
    # rounding (about 1e-6 relative), and every SGD step with BatchNorm feeds the gap back into
    # the weights, so it grows epoch by epoch. On an AVX2 CPU (ATEN_CPU_CAPABILITY=avx2 and
    # ONEDNN_MAX_CPU_ISA=AVX2 reproduce it) the epochs' losses were 1.2e-4, 4e-4 and 2.1e-3
    # apart (1.8091 vs 1.8128 failed the one rel=1e-3 this had). So: the first epoch, before
    # the gap compounds, within 1e-3; the last within 1e-2. A compiled graph that computed
    # anything else (an op dropped, a layout mixed up) is tens of percent off from the start.
    assert compiled_losses[0] == pytest.approx(eager_losses[0], rel=1e-3)
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-2)
    events = read_events(tmp_path / "compiled" / "events.jsonl")
    (compile_event,) = [e for e in events if e["key"] == "stackbench_compile_time_s"]
    assert compile_event["metadata"] == {"compiled": True}  # before run_start: init time
    assert [e["key"] for e in events].index(compile_event["key"]) < [
        e["key"] for e in events
    ].index("run_start")


def test_two_worker_logreg_run_trains_each_rank_on_its_shard_to_high_accuracy(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    write_epsilon(root, 400, 100)
    config = BENCHMARKS["logreg-epsilon"].config.replace(
        data_dir=str(root),
        max_epochs=4,
        lr=5.0,  # alpha 10 on 2 workers
        stop_at_target=False,
    )
    summary = torchrun(config, tmp_path / "out", open_division=True)
    losses = train_losses(tmp_path / "out")
    assert losses[-1] < losses[0]
    assert summary["steps"] == 4 * 2  # 200 samples in each rank's shard, batches of 100
    assert summary["final"]["value"] >= 0.9
    assert summary["train_loss"]["final"] == losses[-1]  # the mean over both ranks
    assert summary["train_loss"]["target"] == 0.2828


def test_a_closed_division_run_refuses_a_cifar_directory_of_the_wrong_size(tmp_path):
    """A CIFAR-format directory of 64 images a file is not CIFAR-10: it may train in the open
    division only, and the closed division says why before anything starts."""
    config = BENCHMARKS["resnet20-cifar10"].config.replace(data_dir=str(tmp_path))
    write_cifar10(tmp_path, per_train_batch=64, num_test=64)
    done = run_entry(config, tmp_path / "out", omp_threads=None)
    assert done.returncode != 0
    assert "canonical data set only" in done.stdout + done.stderr
    assert "fewer than CIFAR-10's 10,000 images" in done.stdout + done.stderr
    assert not (tmp_path / "out" / "events.jsonl").exists()  # refused before init


def test_a_test_split_holding_nan_ends_the_run_diverged_at_its_evaluation(tmp_path):
    """Finite weights scored on a damaged test row give a NaN loss: no measurement. The run
    ends FAILED at that evaluation, its reason in one line and in the summary, and it never
    reports the accuracy it computed beside it."""
    root = tmp_path / "data"
    root.mkdir()
    write_epsilon(root, 400, 100)
    test_x = root / "epsilon" / "cache" / "test.x.f32"
    values = bytearray(test_x.read_bytes())
    values[4 * 2000 * 7 : 4 * 2000 * 7 + 4] = b"\x00\x00\xc0\x7f"  # row 8's first value: NaN
    test_x.write_bytes(bytes(values))
    config = BENCHMARKS["logreg-epsilon"].config.replace(
        data_dir=str(root), max_epochs=2, lr=5.0, stop_at_target=False
    )
    out = tmp_path / "out"
    done = run_entry(config, out, "--open-division", workers=2)
    assert done.returncode != 0
    reason = "diverged at epoch 1, in evaluation: loss nan"
    assert f"stackbench: {reason}" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged"] == reason
    assert summary["final"] is None and summary["best"] is None
    keys = [e["key"] for e in read_events(out / "events.jsonl")]
    assert "eval_accuracy" not in keys
