"""One worker of an elastic training run, as a real process for test_elastic.py to kill or to
start late: `python -m tests.workloads.adaptive.elastic_worker --port P --member ID ...`.

It trains a small classifier with the `allreduce` strategy (not DDP: docs/adaptive-elastic.md
says why), draws every step from the
cursor sampler, admits joiners through the ElasticPolicy at decision points, and on a failed
collective re-forms the group with the survivors and adopts the source worker's state (never
a checkpoint: there is none). It writes what it did to <out>/<member>.json at the end:
the per-step log of the steps that stand, the decisions, the state adopted at each
generation and the final weights. This is the phase-A prototype of what workloads/training/loop.py
will do; it is test support, not a test.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed import PrefixStore, Store, TCPStore

from workloads.adaptive.elastic.group import Change, ElasticConfig, ElasticGroup, ElasticPolicy
from workloads.adaptive.elastic.transfer import broadcast_state
from workloads.adaptive.policy import Controller, RankZeroDecides
from workloads.adaptive.sampler import Cursor, epoch_order
from workloads.strategies import gradients
from workloads.strategies.base import Collectives
from workloads.telemetry.timing import CpuClock, StepTimer

NUM_SAMPLES, DIM, GLOBAL_BATCH, SEED = 600, 8, 12, 3
CPU = torch.device("cpu")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--member", required=True)
    p.add_argument("--initial", type=int, required=True)
    p.add_argument("--workers", required=True, help="MIN:MAX")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--pace-s", type=float, default=0.0)
    p.add_argument("--hold-at", type=int, default=-1, help="before this step, wait for key 'go'")
    p.add_argument("--out", type=Path, required=True)
    return p.parse_args()


class Worker:
    def __init__(self, args: argparse.Namespace, group: ElasticGroup) -> None:
        self.args, self.group = args, group
        gen = torch.Generator().manual_seed(SEED)
        self.x = torch.randn(NUM_SAMPLES, DIM, generator=gen)
        self.y = (self.x[:, :2].sum(1) + 0.5 * torch.randn(NUM_SAMPLES, generator=gen) > 0).long()
        self.order = epoch_order(NUM_SAMPLES, 0, SEED)
        torch.manual_seed(SEED)
        self.model = nn.Sequential(nn.Linear(DIM, 16), nn.ReLU(), nn.Linear(16, 2))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.strategy: Any = None
        self.step, self.cursor = 0, Cursor(0)
        max_workers = group.config.max_workers
        policy = ElasticPolicy(group.pending_joiners, max_workers)
        self.controller = Controller(
            [policy], {"workers": 0}, RankZeroDecides(CPU), 2, time.perf_counter
        )
        self.log: list[dict[str, Any]] = []
        self.adopted: dict[int, dict[str, Any]] = {}
        self.failures: list[list[Any]] = []  # step, wall time, error: what the test reports

    def adopt(self, change: Change) -> None:
        """Take the source worker's state, then rebuild what holds the process group."""
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "cursor": [self.cursor.epoch, self.cursor.consumed],
            # The steps that stand are the source's: a worker whose collective failed at step
            # s while the source's completed goes on from s + 1, and s is in the source's log.
            "log": self.log,
        }
        received = broadcast_state(state, change.source_rank, CPU)
        self.model.load_state_dict(received["model"])
        self.optimizer.load_state_dict(received["optimizer"])
        self.step, self.cursor = received["step"], Cursor(*received["cursor"])
        self.log = [entry for entry in received["log"] if entry["step"] < self.step]
        self.controller.values["workers"] = self.group.world_size
        self.strategy = gradients.flat_all_reduce(self.model, Collectives())
        self.adopted[change.current.number] = {
            "step": self.step,
            "world_size": self.group.world_size,
            "weights": [p.detach().clone().tolist() for p in self.model.parameters()],
        }

    def train_step(self) -> None:
        world, rank = self.group.world_size, self.group.rank
        before = self.cursor.consumed
        index = self.cursor.step_indices(self.order, GLOBAL_BATCH, world, rank)
        timer = StepTimer(CpuClock())
        timer.start()
        loss = nn.functional.cross_entropy(self.strategy.module(self.x[index]), self.y[index])
        self.strategy.backward(loss, timer)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.cursor = self.cursor.advance(NUM_SAMPLES, GLOBAL_BATCH, world)
        self.log.append(
            {
                "step": self.step,
                "world_size": world,
                "rank": rank,
                "consumed": before,
                "taken": self.cursor.consumed - before,
                "indices": index.tolist(),
            }
        )
        self.step += 1

    def run(self, progress: Store, joined: bool) -> None:
        """Train to the last step. A joiner enters in the middle of the step the members
        admitted it at: they have taken that step's decisions already."""
        decide = not joined
        while self.step < self.args.steps:
            if self.step == self.args.hold_at and decide:  # the test's cue: a joiner waits
                progress.wait(["go"])
            try:
                if decide:
                    for decision in self.controller.before_step(self.step, 0.1):
                        self.adopt(self.group.grow(int(decision.new), self.step))
                decide = True
                self.train_step()
                progress.set(f"progress/{self.args.member}", str(self.step))
                time.sleep(self.args.pace_s)
            except Exception as err:  # a collective failed: a worker may have left
                self.failures.append([self.step, time.time(), str(err)[:300]])
                self.strategy = None  # nothing may hold the old process group open
                traceback.clear_frames(err.__traceback__)
                gc.collect()
                started = time.perf_counter()
                change = self.group.recover(self.step, err)
                self.controller.record(
                    "elastic", "workers", change.current.world_size, change.current.step,
                    change.reason,
                )  # fmt: skip
                self.adopt(change)
                self.adopted[change.current.number]["recovery_s"] = time.perf_counter() - started

    def result(self) -> dict[str, Any]:
        return {
            "member": self.args.member,
            "steps": self.step,
            "log": self.log,
            "decisions": [d.to_event() for d in self.controller.decisions],
            "adopted": self.adopted,
            "failures": self.failures,
            "weights": [p.detach().tolist() for p in self.model.parameters()],
        }


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    low, high = (int(n) for n in args.workers.split(":"))
    config = ElasticConfig(
        low, high, heartbeat_s=0.2, dead_after_s=3.0, rendezvous_timeout_s=60, pg_timeout_s=30
    )

    def connect() -> Store:
        timeout = datetime.timedelta(seconds=60)
        client = TCPStore("127.0.0.1", args.port, is_master=False, timeout=timeout)
        return PrefixStore("run/", client)

    group = ElasticGroup(connect, args.member, config)
    worker = Worker(args, group)
    change = group.start(args.initial)
    worker.adopt(change)
    worker.run(connect(), joined=change.current.number > 0)
    worker.strategy = None
    gc.collect()  # see workloads/runtime/dist.py shutdown(): collect, barrier, then destroy
    torch.distributed.barrier()
    group.close()
    out = args.out / f"{args.member}.json"
    out.write_text(json.dumps(worker.result()))


if __name__ == "__main__":
    main()
