"""A Kubernetes run's directory has the same files, with the same schema, as a local run's.

The local side is a real run (tests/conftest.py: 2 gloo workers). The
Kubernetes side replays that run's rank logs as pod logs through kmock, the way torchrun's
rank prefix shows them, and is fetched without a results store, so every result file is
rebuilt from rank 0's log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract import files
from contract.rundir import rank_log
from runner.backends.local.backend import SUPERVISOR_FILE
from runner.backends.local.launch import LAUNCH_FILE
from runner.job.spec import JobSpec
from runner.results import rundir
from tests.runner.k8s_helpers import make_backend, make_spec, pod, submit

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]
# The local supervisor's own files, and each rank's console before it opens its log; on a
# cluster those are in the pod log.
LOCAL_ONLY = {SUPERVISOR_FILE, LAUNCH_FILE, "logs/supervisor.log", "logs/launcher-0.log",
              "logs/launcher-1.log"}  # fmt: skip


def file_names(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}


def test_kubernetes_run_directory_matches_a_local_one(finished_run, cluster, tmp_path):
    _, local = finished_run
    local_dir = local.run_dir
    workers = local.record.spec.placement.world_size
    backend = make_backend(cluster, tmp_path / "k8s", "trainjob")
    # The same run id: the rebuilt summary and manifest must name the run they belong to.
    spec = JobSpec.from_dict(
        {**make_spec(nodes=1, procs=workers).to_dict(), "run_id": local.run_id}
    )
    handle, k8s_dir = submit(backend, tmp_path / "k8s", spec)
    log = "".join(
        f"[rank{r}]:{line}\n"
        for r in range(workers)
        for line in rank_log(local_dir, r).read_text().splitlines()
    )
    cluster.add_pod(pod("trainjob", local.run_id, 0, "Succeeded"), log=log)
    cluster.set_job_condition("trainjob", local.run_id, "Complete")

    assert backend.fetch(handle, k8s_dir) == []

    assert file_names(k8s_dir) == file_names(local_dir) - LOCAL_ONLY
    for name in (rundir.JOB, rundir.STATE):
        local_keys = set(files.read_json(local_dir / name))
        assert set(files.read_json(k8s_dir / name)) - {"cluster"} == local_keys, name
    # Rebuilt from the log, the results are the very files the workload wrote.
    for name in (rundir.EVENTS, rundir.SUMMARY, rundir.MANIFEST):
        assert (k8s_dir / name).read_bytes() == (local_dir / name).read_bytes(), name
    for rank in range(workers):
        local_log = rank_log(local_dir, rank).read_text()
        assert rank_log(k8s_dir, rank).read_text() == local_log
    assert rundir.missing_results(k8s_dir, workers) == []
    assert json.loads((k8s_dir / rundir.JOB).read_text())["cluster"]["stack"] == "gke-gpu-8"
