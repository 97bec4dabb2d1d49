"""A finished two-node run as the Kubernetes backend's tests replay it: rank 0's output written
by mllog itself, each pod's log with torchrun's rank prefix, the pods as the controller and
kubelet show them, and each job API's word for success."""

from __future__ import annotations

import io
from pathlib import Path

from contract import events as keys
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, pod
from tests.runner.rundirs import env_manifest
from tests.runner.rundirs import summary as summary_record
from workloads.telemetry import mllog

APIS = ["trainjob", "pytorchjob"]
UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


MANIFEST = env_manifest(RUN_ID, 4, image="img", seed=7)
SUMMARY = summary_record(RUN_ID, 4, 12.5, steps=100) | {"run_time_s": 30.0}


def rank0_stdout(run_dir: Path | None = None) -> str:
    """What rank 0 prints (and, given run_dir, writes as a local run does), via mllog itself."""
    out = io.StringIO()
    events = mllog.EventLog(str(run_dir / rundir.EVENTS) if run_dir else None, echo=out)
    events.point(keys.SUBMISSION_BENCHMARK, "cnn-digits")
    events.point(keys.MANIFEST, MANIFEST)
    events.start(keys.RUN_START)
    events.point(keys.EVAL_ACCURACY, 0.96, epoch_num=3)
    events.end(keys.RUN_STOP, status="success")
    events.point(keys.SUMMARY, SUMMARY)
    events.close()
    return "starting torchrun\n" + out.getvalue()


def pod_log(ranks: range, rank0: str) -> str:
    """One pod's log: torchrun's own line, then each rank's lines with torchrun's prefix."""
    lines = ["launcher: starting workers"]
    for rank in ranks:
        text = rank0 if rank == 0 else f"rank {rank} training\nrank {rank} done\n"
        lines += [f"[rank{rank}]:{line}" for line in text.splitlines()]
    return "\n".join(lines) + "\n"


def run_pods(cluster: FakeCluster, job_api: str, phase: str = "Running") -> None:
    """Two nodes with two ranks each, as the controller and kubelet would show them."""
    for node in (0, 1):
        ranks = range(node * 2, node * 2 + 2)
        cluster.add_pod(pod(job_api, RUN_ID, node, phase), log=pod_log(ranks, rank0_stdout()))


SUCCESS = {"trainjob": "Complete", "pytorchjob": "Succeeded"}
