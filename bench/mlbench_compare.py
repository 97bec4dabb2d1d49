"""stackbench against MLBench's own reference code, side by side on this machine.

MLBench is not part of stackbench and nothing here installs it. Put the pinned version in a
directory of its own (it pins an old torch, hence --no-deps; it stays out of the project's
environment) and on PYTHONPATH:

    pip install --no-deps --target /tmp/mlbench mlbench-core==3.0.0.dev23
    PYTHONPATH=$PWD:/tmp/mlbench python bench/mlbench_compare.py [--workloads resnet20,logreg]

(3.0.0.dev23, not 3.0.0: the 3.0.0 release's CentralizedSGD cannot be built, its constructor
calls super(CentralizedSGD).__init__ with keywords and raises TypeError.)

What runs, per batch size and process layout (on CPU: 1 process x all cores' threads, 2 gloo
processes sharing them; with --device cuda: one GPU per process, NCCL):
- MLBench: their model (ResNetCIFAR(20, version=1); LogisticRegression with
  BCELossRegularized) and their optimizer step (CentralizedSGD: one all-reduce of the
  flattened gradients, then torch's SGD), in the loop of their train_round (zero_grad,
  forward, loss, backward, step) over batches made once and kept in memory. Their data
  loading, augmentation, per-batch metrics and tracker are left out: in their favour.
- stackbench: workloads.training.run, the entry every run goes through, with the registry's
  config (our defaults) on CIFAR-format files / an epsilon cache of random data, its
  summary's throughput: steady steps over the training loop's wall time, augmentation and
  everything between steps included, evaluation excluded.
  With --precision bf16 our forward passes run under bf16 autocast (workloads/runtime/precision.py)
  while MLBench's stay in fp32: no longer like for like, and the report says so.
Both report samples/s over all processes. Rounds alternate which side goes first; the ratio
is of medians. A speed benchmark, not a test: nothing passes or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.one_process import run_quietly, steady
from bench.spawned import run_ranks
from tests.datagen import write_cifar10
from workloads.telemetry.manifest import cpu_kernels

INSTALL = "pip install --no-deps --target /tmp/mlbench mlbench-core==3.0.0.dev23"
MLBENCH_VERSION = "3.0.0-dev23"
CORES = os.cpu_count() or 1
RESNET_IMAGES_PER_FILE = 1024  # 5,120 training images
LOGREG_TRAIN_ROWS, LOGREG_TEST_ROWS = 20_000, 1_000
WARMUP_STEPS = 3  # MLBench's side; stackbench's summary leaves out its first step


def mlbench_version() -> str:
    try:
        import mlbench_core
    except ImportError:
        raise SystemExit(
            f"MLBench's reference code is not importable: {INSTALL}, then run with "
            "PYTHONPATH=$PWD:/tmp/mlbench"
        ) from None
    if mlbench_core.__version__ != MLBENCH_VERSION:
        raise SystemExit(
            f"mlbench_core {mlbench_core.__version__} found, {MLBENCH_VERSION} expected: {INSTALL}"
        )
    return mlbench_core.__version__


# ---- MLBench's side ------------------------------------------------------------------------


def mlbench_samples_per_s(
    workload: str, batch: int, steps: int, world: int, device: torch.device
) -> float:
    """Their model and CentralizedSGD in their train_round's step, timed on this rank."""
    from mlbench_core.optim.pytorch.centralized import CentralizedSGD

    torch.manual_seed(0)
    cuda = device.type == "cuda"
    if workload == "resnet20":
        from mlbench_core.models.pytorch.resnet import ResNetCIFAR

        model = ResNetCIFAR(20, False, 10, version=1).to(device)
        loss_fn: Any = torch.nn.CrossEntropyLoss()
        xs = torch.randn(4, batch, 3, 32, 32, device=device)
        ys = torch.randint(0, 10, (4, batch), device=device)
        # mlbench-benchmarks' cifar10-resnet20-all-reduce settings
        optimizer = CentralizedSGD(
            world_size=world, model=model, lr=0.1, momentum=0.9, weight_decay=1e-4, use_cuda=cuda
        )
    else:
        from mlbench_core.evaluation.pytorch.criterion import BCELossRegularized
        from mlbench_core.models.pytorch.linear_models import LogisticRegression

        model = LogisticRegression(2000).to(device)
        loss_fn = BCELossRegularized(l2=2.5e-6, model=model)
        xs = torch.randn(4, batch, 2000, device=device)
        ys = torch.randint(0, 2, (4, batch), device=device).float()
        optimizer = CentralizedSGD(world_size=world, model=model, lr=200.0, use_cuda=cuda)
    sync = torch.cuda.synchronize if cuda else lambda: None
    model.train()
    for i in range(WARMUP_STEPS + steps):
        if i == WARMUP_STEPS:
            sync()
            dist.barrier()
            t0 = time.perf_counter()
        optimizer.zero_grad()
        output = model(xs[i % 4])
        loss = loss_fn(output.squeeze(1) if workload == "logreg" else output, ys[i % 4])
        loss.backward()
        optimizer.step()
    sync()
    dist.barrier()
    return world * steps * batch / (time.perf_counter() - t0)


# ---- stackbench's side ---------------------------------------------------------------------


def write_data(root: Path) -> None:
    """CIFAR-format files and an epsilon cache of random data under `root`."""
    write_cifar10(root, RESNET_IMAGES_PER_FILE, 256)
    from workloads.data.epsilon import cache_dir

    cache = cache_dir(root)
    cache.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = {"train": LOGREG_TRAIN_ROWS, "test": LOGREG_TEST_ROWS}
    for split, n in rows.items():
        rng.standard_normal((n, 2000), dtype=np.float32).tofile(cache / f"{split}.x.f32")
        rng.choice(np.array([-1, 1], dtype=np.int8), n).tofile(cache / f"{split}.y.i8")
    meta = {"format": "stackbench-libsvm-dense-v1", "num_features": 2000}
    meta["splits"] = {split: {"rows": n, "source": "random"} for split, n in rows.items()}
    (cache / "meta.json").write_text(json.dumps(meta))


def stackbench_config(
    workload: str, batch: int, world: int, data_dir: str, precision: str = "auto"
) -> Any:
    from runner.job.benchmarks import LOGREG_EPSILON, RESNET20_CIFAR10

    if workload == "resnet20":
        images = 5 * RESNET_IMAGES_PER_FILE // world
        epochs = max(1, -(-48 * batch // images))  # at least 48 steps a rank
        changes = {"warmup_epochs": 0.0, "lr_milestones": ()}  # no effect on speed
        base = RESNET20_CIFAR10.config
    else:
        epochs, changes, base = 10, {}, LOGREG_EPSILON.config
    return base.replace(
        **changes, batch_size=batch, max_epochs=epochs, data_dir=data_dir,
        stop_at_target=False, eval_every_epochs=epochs, precision=precision,
    )  # fmt: skip


def stackbench_samples_per_s(config: Any, rank: int, world: int, device: str) -> float | None:
    from workloads.runtime.dist import DistEnv

    env = DistEnv(rank, rank, world)
    summary = run_quietly(config, "--open-division", "--device", device, env=env)
    return None if summary is None else steady(summary.throughput_samples_per_s)


# ---- processes -----------------------------------------------------------------------------


def _rank(rank: int, world: int, job: dict[str, Any]) -> float | None:
    torch.set_num_threads(max(1, CORES // world))
    device = torch.device(job["device"])
    if device.type == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    value: float | None
    if job["side"] == "mlbench":
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        args = (job["workload"], job["batch"], job["steps"], world, device)
        value = mlbench_samples_per_s(*args)
        dist.destroy_process_group()
    else:
        config = stackbench_config(
            job["workload"], job["batch"], world, job["data_dir"], job["precision"]
        )
        value = stackbench_samples_per_s(config, rank, world, job["device"])
    return value  # rank 0's; the others' None


def measure(job: dict[str, Any], world: int, timeout_s: float = 900.0) -> float:
    return float(run_ranks(_rank, world, job, timeout_s, f"{job} x{world}")[0])


def compare(job: dict[str, Any], world: int, rounds: int, key: str) -> dict[str, Any]:
    figures: dict[str, list[float]] = {"mlbench": [], "stackbench": []}
    for i in range(rounds):
        for side in ("mlbench", "stackbench") if i % 2 == 0 else ("stackbench", "mlbench"):
            figures[side].append(measure(job | {"side": side}, world))
        # Progress as it comes: a round of ResNet-20 takes minutes on a busy machine.
        print(f"{key}, round {i}: {figures['stackbench'][-1] / figures['mlbench'][-1]:.3f}",
              f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr)  # fmt: skip
    medians = {side: statistics.median(v) for side, v in figures.items()}
    return {
        "samples_per_s": {k: round(v, 1) for k, v in medians.items()},
        "per_round": {k: [round(x, 1) for x in v] for k, v in figures.items()},
        "ratio_stackbench_to_mlbench": round(medians["stackbench"] / medians["mlbench"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="resnet20,logreg")
    parser.add_argument("--resnet-batches", default="32,128")
    parser.add_argument("--logreg-batches", default="100")
    parser.add_argument("--processes", default="1,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--resnet-steps", type=int, default=48)
    parser.add_argument("--logreg-steps", type=int, default=1000)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto")
    args = parser.parse_args()
    report: dict[str, Any] = {"mlbench_core": mlbench_version(), "torch": torch.__version__}
    report["device"] = args.device
    report["precision"] = {"mlbench": "fp32", "stackbench": args.precision}
    if args.precision == "bf16":
        report["like_for_like"] = False  # MLBench computes in fp32
    report["machine"] = {"logical_cpus": CORES, "load_average_1m_at_start": os.getloadavg()[0],
                         **cpu_kernels()}  # fmt: skip
    with tempfile.TemporaryDirectory() as data_dir:
        write_data(Path(data_dir))
        for workload in args.workloads.split(","):
            batches = args.resnet_batches if workload == "resnet20" else args.logreg_batches
            steps = args.resnet_steps if workload == "resnet20" else args.logreg_steps
            for batch in map(int, batches.split(",")):
                for world in map(int, args.processes.split(",")):
                    job = {"workload": workload, "batch": batch, "steps": steps}
                    job |= {"device": args.device, "precision": args.precision}
                    layout = (
                        f"{world} GPUs" if args.device == "cuda" else f"{CORES // world} threads"
                    )
                    key = f"{workload} batch {batch}, {world} x {layout}"
                    report[key] = compare(job | {"data_dir": data_dir}, world, args.rounds, key)
                    print(f"{key}: {report[key]['ratio_stackbench_to_mlbench']}", file=sys.stderr)
    report["rounds"] = args.rounds
    report["load_average_1m_at_end"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
