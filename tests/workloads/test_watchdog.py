"""A collective that can never complete ends the run within about dist_timeout_s, with one
line naming the rank, the collective and the step (workloads/runtime/watchdog.py): real gloo ranks,
one of them stopped (SIGSTOP), or a real deadlock of torch's own PowerSGD hook on gloo."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runner.job.benchmarks import BENCHMARKS
from tests.distributed import HANG_GUARD_S, free_port
from tests.workloads.entry import torchrun

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _rank_pids(launcher: int) -> dict[int, int]:
    """The launcher's worker processes by the RANK their environment holds (ours: we set it)."""
    pids = subprocess.run(["pgrep", "-P", str(launcher)], capture_output=True, text=True)
    ranks = {}
    for pid in map(int, pids.stdout.split()):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        for var in environ:
            if var.startswith(b"RANK="):
                ranks[int(var[5:])] = pid
    return ranks


def _wait_for(condition, timeout_s: float = HANG_GUARD_S, shown=lambda: "") -> None:
    """A hang guard, not a speed limit (tests/distributed.py): two ranks importing torch on a
    loaded machine took past the 120 s this waited once (CI, load 6). `shown`: what the
    failure prints, the ranks' logs."""
    give_up = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < give_up, f"the run never got there\n{shown()}"
        time.sleep(0.1)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


@pytest.mark.parametrize("strategy", ["ddp", "allreduce"])
def test_a_rank_that_stops_answering_ends_its_peer_with_one_line_naming_where(tmp_path, strategy):
    config = BENCHMARKS["cnn-digits"].config.replace(
        strategy=strategy, dist_timeout_s=8.0, max_epochs=1000, stop_at_target=False
    )
    out = tmp_path / "out"
    cmd = [
        *torchrun(out, workers=2), "-m", "workloads.train", "--config", config.to_json(),
        "--run-id", "test", "--output-dir", str(out), "--open-division",
    ]  # fmt: skip
    env = dict(os.environ, OMP_NUM_THREADS="1")
    launcher = subprocess.Popen(
        cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    ranks: dict[int, int] = {}
    try:
        events = out / "events.jsonl"
        _wait_for(lambda: events.exists() and "epoch_start" in events.read_text())
        ranks = _rank_pids(launcher.pid)
        os.kill(ranks[1], signal.SIGSTOP)  # it stops answering mid-training, alive
        _wait_for(lambda: _gone(ranks[0]))  # without a watchdog: never
    finally:
        for pid in ranks.values():
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        if launcher.poll() is None and not ranks:
            launcher.kill()
        output, _ = launcher.communicate(timeout=120)
    rank0 = [line for line in output.splitlines() if line.startswith("[rank0]:")]
    assert not [line for line in rank0 if "Traceback" in line], "\n".join(rank0[-20:])
    lines = [line for line in output.splitlines() if line.startswith("stackbench: ")]
    assert lines, output[-3000:]
    assert lines[0].startswith("stackbench: rank 0: collective timed out after 8 s in "), lines
    assert ", at epoch " in lines[0], lines  # where: a step, an epoch's end or an evaluation


# Two gloo ranks train through DdpStrategy; on rank 1, at its third step, the completion
# callback of the all-reduce (which runs on one of gloo's worker threads, as torch's PowerSGD
# hook's does) blocks: the collective itself completed on both ranks, so no wait on the
# network, hence no gloo timeout, is left to end rank 1, whose DDP reducer waits for the
# hook's future for ever. (torch's PowerSGD hook on gloo blocks so, when its callbacks wait
# for all-reduces queued behind them; one_bucket_at_a_time avoids that, but not every cause.)
_STALLED_CALLBACK = textwrap.dedent("""
    import datetime, os, sys, time
    import torch, torch.distributed as dist
    from torch import nn
    from workloads.runtime import watchdog
    from workloads.strategies.base import Collectives
    from workloads.strategies.ddp import DdpStrategy, all_reduce_hook
    from workloads.telemetry.timing import StepTimer, clock_for

    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    # gloo's timeout long, so that a slow start on a busy machine is no failure; the
    # watchdog's short: it alone can end what gloo's timeout does not bound.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    watchdog.arm(rank, 2.0)
    torch.manual_seed(0)
    hook, calls = all_reduce_hook(Collectives()), []

    def stalling(state, bucket):
        calls.append(1)
        future = hook(state, bucket)
        if rank == 1 and len(calls) == 3:
            return future.then(lambda done: time.sleep(3600) or done.value())
        return future

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    clock = clock_for(torch.device("cpu"))
    strategy = DdpStrategy(model, clock, Collectives(), stalling)
    timer = StepTimer(clock)
    for step in range(1, 6):
        watchdog.at(f"epoch 1, step {step}")
        timer.start()
        loss = strategy.module(torch.randn(4, 8)).square().mean()
        timer.lap("forward")
        strategy.backward(loss, timer)
        timer.finish()
    print("every step completed", flush=True)
""")


def _two_ranks(program: str, tmp_path) -> tuple[list[subprocess.Popen[bytes]], list]:
    """Two gloo ranks running `program`, each writing its own log."""
    port = free_port()
    procs, logs = [], [tmp_path / f"rank-{rank}.log" for rank in range(2)]
    for rank, log in enumerate(logs):
        env = dict(
            os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port), OMP_NUM_THREADS="1",
        )  # fmt: skip
        with log.open("w") as out:
            command = [sys.executable, "-c", program]
            procs.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=out))
    return procs, logs


def test_a_collective_whose_completion_never_comes_ends_its_rank_without_a_gloo_timeout(
    tmp_path,
):
    procs, logs = _two_ranks(_STALLED_CALLBACK, tmp_path)
    ended: list[int] = []  # ranks in the order they exited
    try:
        _wait_for(lambda: _note_exits(procs, ended),  # without a watchdog: rank 1 never
                  shown=lambda: "\n".join(f"rank {r}:\n{log.read_text()[-2000:]}"
                                          for r, log in enumerate(logs)))  # fmt: skip
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    stalled = logs[1].read_text()
    assert procs[1].returncode == 1, stalled[-3000:]
    assert (
        "stackbench: rank 1: collective timed out after 2 s in the gradient exchange of DDP's "
        "communication hook, at epoch 1, step 3 (a peer stopped, or it needs longer: --set "
        "dist_timeout_s=SECONDS)\n"
    ) in stalled, stalled[-3000:]
    assert "Traceback" not in stalled
    # Its peer went on to a step rank 1 never joined, and ended (its own watchdog, or rank 1
    # leaving, ended it).
    assert procs[0].returncode != 0
    assert "every step completed" not in logs[0].read_text()


def _note_exits(procs: list[subprocess.Popen[bytes]], ended: list[int]) -> bool:
    for rank, p in enumerate(procs):
        if rank not in ended and p.poll() is not None:
            ended.append(rank)
    return len(ended) == len(procs)


def test_compute_outside_collectives_is_no_stall():
    # Armed with a tiny timeout, a process that waits on no collective lives on.
    code = (
        "import time\nfrom workloads.runtime import watchdog\nwatchdog.arm(0, 0.1)\n"
        "time.sleep(1.0)\nprint('alive', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout == "alive\n", done.stdout + done.stderr


def test_a_peer_that_never_joins_ends_the_rendezvous_in_one_line(tmp_path):
    config = BENCHMARKS["cnn-digits"].config.replace(dist_timeout_s=2.0)
    env = dict(
        os.environ, RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1",
    )  # fmt: skip
    cmd = [
        sys.executable, "-m", "workloads.train", "--config", config.to_json(), "--run-id",
        "test", "--output-dir", str(tmp_path / "out"), "--open-division",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert "stackbench: collective timed out in the rendezvous of the process group" in done.stdout


def test_only_torch_distributeds_timeouts_are_taken_for_a_collectives():
    """A timeout that is no collective's (a loader's, a lock's) keeps its own traceback rather
    than passing as "collective timed out": the line would send the user after the network."""
    import torch.distributed as dist

    from workloads.runtime import watchdog

    gloo = RuntimeError(
        "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
        "3000ms for recv operation to complete"
    )
    reason = watchdog.timeout_reason(gloo)
    assert reason is not None and reason.startswith("collective timed out in a collective, at ")
    store = dist.DistStoreError("Timed out after 3 seconds waiting for clients. 1/2 clients")
    assert watchdog.timeout_reason(store) is not None
    assert watchdog.timeout_reason(RuntimeError("DataLoader timed out after 5 seconds")) is None
    assert watchdog.timeout_reason(ValueError("recv operation timed out")) is None


# Rank 0 issues COUNT all-reduces at once (as DDP issues its buckets); rank 1 answers each one
# DELAY_S after the last, so the queue moves all along but its last all-reduce is outstanding
# COUNT * DELAY_S from its issue: longer than the watchdog's timeout and grace.
_QUEUE = textwrap.dedent("""
    import datetime, os, time
    import torch, torch.distributed as dist
    from workloads.runtime import watchdog
    from workloads.strategies.base import Collectives

    COUNT, DELAY_S = 16, 0.5
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    watchdog.arm(rank, 1.0)
    watchdog.at("epoch 1, step 1")
    assert COUNT * DELAY_S > 1.0 + watchdog.GRACE_S
    collectives = Collectives()
    if rank == 0:
        futures = [collectives.all_reduce_mean_async(torch.ones(4)) for _ in range(COUNT)]
        torch.futures.wait_all(futures)
    else:
        for _ in range(COUNT):
            time.sleep(DELAY_S)
            collectives.all_reduce_mean(torch.ones(4))
    watchdog.disarm()
    dist.destroy_process_group()
    print("every all-reduce completed", flush=True)
""")


def test_collectives_queued_behind_a_slow_peer_are_no_stall(tmp_path):
    procs, logs = _two_ranks(_QUEUE, tmp_path)
    try:
        for p in procs:
            p.wait(timeout=120)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, log in zip(procs, logs, strict=True):
        said = log.read_text()
        assert p.returncode == 0 and "every all-reduce completed" in said, said[-3000:]
