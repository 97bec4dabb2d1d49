"""A Kubernetes run's directory has the same files, with the same schema, as a local run's.

The local run directory here is built the way a local run builds it (job.json from RunRecord,
state.json from JobStatus, events.jsonl and stdout from one mllog.EventLog, summary.json and
manifest.json as JSON objects, logs/rank-N.log) rather than by running torchrun: this machine
has no torch. The Kubernetes run replays the same rank-0 output through pod logs (kmock) and
is fetched without a results store, so every result file is rebuilt from the log.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import rundir
from runner.backends.base import JobState, JobStatus
from runner.backends.local import SUPERVISOR_FILE
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import RUN_ID, make_spec, pod
from tests.runner.test_kubernetes_backend import make_backend, submit
from workloads import mllog

pytestmark = pytest.mark.timeout(60)
LOCAL_ONLY = {SUPERVISOR_FILE, "logs/supervisor.log"}  # the local supervisor's own files
SUMMARY = {"target_reached": True, "time_to_target_s": 12.5, "throughput_samples_s": 900.0}
MANIFEST = {"world_size": 4, "seeds": {"seed": 7}, "packages": {"torch": "2.13.0"}}


@pytest.fixture
def cluster() -> Iterator[FakeCluster]:
    fake = FakeCluster(namespace="bench")
    yield fake
    fake.close()


def local_run(root: Path) -> tuple[Path, str]:
    """A finished local run's directory, and what its rank 0 printed."""
    spec = make_spec(nodes=2, procs=2)
    run_dir = rundir.create(root, rundir.RunRecord(spec, "local", f"local://{spec.run_id}"))
    out = io.StringIO()
    events = mllog.EventLog(str(run_dir / rundir.EVENTS), echo=out)
    events.point(mllog.MANIFEST, MANIFEST)
    events.start(mllog.RUN_START)
    events.point(mllog.EVAL_ACCURACY, 0.97, epoch_num=1)
    events.end(mllog.RUN_STOP, status="success")
    events.point(mllog.SUMMARY, SUMMARY)
    events.close()
    rundir.write_json(run_dir / rundir.SUMMARY, SUMMARY)
    rundir.write_json(run_dir / rundir.MANIFEST, MANIFEST)
    for rank in range(4):
        text = out.getvalue() if rank == 0 else f"rank {rank} done\n"
        rundir.rank_log(run_dir, rank).write_text(text)
    rundir.write_state(run_dir, JobStatus(JobState.SUCCEEDED, since="2030-01-01T00:10:00Z"))
    (run_dir / SUPERVISOR_FILE).write_text('{"pid": 1}\n')
    return run_dir, out.getvalue()


def files(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}


def test_kubernetes_run_directory_matches_a_local_one(cluster: FakeCluster, tmp_path: Path):
    local_dir, rank0_output = local_run(tmp_path / "local")
    backend = make_backend(cluster, tmp_path / "k8s", "trainjob")
    handle, k8s_dir = submit(backend, tmp_path / "k8s", make_spec(nodes=2, procs=2))
    for node in (0, 1):
        ranks = range(node * 2, node * 2 + 2)
        log = "".join(
            "".join(f"[rank{r}]:{line}\n" for line in (
                rank0_output if r == 0 else f"rank {r} done\n").splitlines())
            for r in ranks
        )  # fmt: skip
        cluster.add_pod(pod("trainjob", RUN_ID, node, "Succeeded"), log=log)
    cluster.set_job_condition("trainjob", RUN_ID, "Complete")

    assert backend.fetch(handle, k8s_dir) == []

    assert files(k8s_dir) == files(local_dir) - LOCAL_ONLY
    for name in (rundir.JOB, rundir.STATE):
        local_keys = set(rundir.read_json(local_dir / name))
        assert set(rundir.read_json(k8s_dir / name)) - {"cluster"} == local_keys, name
    # Rebuilt from the log, the results are the very files the workload wrote.
    for name in (rundir.EVENTS, rundir.SUMMARY, rundir.MANIFEST):
        assert (k8s_dir / name).read_bytes() == (local_dir / name).read_bytes(), name
    for rank in range(4):
        local_log = rundir.rank_log(local_dir, rank).read_text()
        assert rundir.rank_log(k8s_dir, rank).read_text() == local_log
    assert rundir.missing_results(k8s_dir, 4) == []
    assert json.loads((k8s_dir / rundir.JOB).read_text())["cluster"]["stack"] == "gke-gpu-8"
