"""The cluster path as an operator meets it, through the CLI against the kmock-based fake API
server (k8s_fake.py): the live view says why a job is pending, as `runner status` does; `runner
logs` on a run with no pod says why in one line and exits non-zero; a run that never had a pod
suggests no `runner logs` that could not help."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner
from rich.console import Console

from contract.rundir import JobState, JobStatus
from runner.cli import main
from runner.cli.progress import TrainingProgress, status_text
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import IMAGE

pytestmark = pytest.mark.timeout(60)


def invoke(results, *args):
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["--results-dir", str(results), *args], catch_exceptions=False
    )


def test_the_live_view_says_why_a_job_is_pending():
    reason = "node 0 (pod p) cannot be scheduled: 0/3 nodes are available: [bold]3 Insufficient"
    console = Console(record=True, width=200, force_terminal=False)
    view = TrainingProgress(console, 3, "top1_accuracy")
    with view:
        view.on_status(JobStatus(JobState.PENDING, reason))
    shown = console.export_text()
    assert f"pending: {reason}" in shown  # the server's brackets shown, never read as markup
    assert status_text(JobStatus(JobState.RUNNING)) == "running"
    assert len(status_text(JobStatus(JobState.PENDING, "x" * 500))) < 140


@pytest.fixture
def cluster():
    fake = FakeCluster(namespace="bench")
    fake.emulator.now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # created now
    yield fake
    fake.close()


def submit(tmp_path, cluster, *args):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(cluster.kubeconfig())
    results = tmp_path / "results"
    result = invoke(results, "submit", "cnn-digits", "--kubeconfig", str(kubeconfig),
                    "--image", IMAGE, "--workers", "1", *args)  # fmt: skip
    return result, results


def test_logs_of_a_run_with_no_pod_say_why_and_fail(tmp_path, cluster):
    submitted, results = submit(tmp_path, cluster, "--detach")
    assert submitted.exit_code == 0, submitted.output
    (run_dir,) = rundir.list_dirs(results)
    shown = invoke(results, "logs", run_dir.name, "--rank", "0")
    assert shown.exit_code == 1
    (line,) = shown.output.strip().splitlines()
    assert "its pod has not started" in line and "PENDING" in line


def test_a_run_that_never_had_a_pod_suggests_no_logs(tmp_path, cluster):
    """Pending past --pending-timeout with no pod ever made: CANCELLED with the reason, exit 1,
    and no `runner logs RUN --rank 0`, which has nothing to show."""
    result, results = submit(tmp_path, cluster, "--pending-timeout", "1")
    assert result.exit_code == 1, result.output
    assert "CANCELLED" in result.output and "runner logs" not in result.output
    (run_dir,) = rundir.list_dirs(results)
    assert json.loads((run_dir / rundir.STATE).read_text())["state"] == "CANCELLED"


def test_runtime_names_the_trainjobs_runtime_and_the_record_keeps_it(tmp_path, cluster):
    submitted, results = submit(tmp_path, cluster, "--runtime", "team-torch", "--detach")
    assert submitted.exit_code == 0, submitted.output
    (run_dir,) = rundir.list_dirs(results)
    job = cluster.job("trainjob", run_dir.name)
    assert job is not None and job["spec"]["runtimeRef"]["name"] == "team-torch"
    recorded = json.loads((run_dir / rundir.JOB).read_text())["cluster"]
    assert recorded["training_runtime"] == "team-torch"


def test_the_default_runtime_of_a_cluster_made_elsewhere_is_recorded(tmp_path, cluster):
    submitted, results = submit(tmp_path, cluster, "--detach")
    assert submitted.exit_code == 0, submitted.output
    (run_dir,) = rundir.list_dirs(results)
    recorded = json.loads((run_dir / rundir.JOB).read_text())["cluster"]
    assert recorded["training_runtime"] == "torch-distributed"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--job-api", "pytorchjob", "--runtime", "x"], "a pytorchjob has none"),
        (["--runtime", "Not_A_Name"], "not a Kubernetes object name"),
    ],
)
def test_a_runtime_that_cannot_apply_is_bad_input(tmp_path, cluster, args, message):
    result, _ = submit(tmp_path, cluster, *args, "--dry-run")
    assert result.exit_code == 2 and message in result.output


def test_runtime_without_a_cluster_is_bad_input(tmp_path):
    result = invoke(tmp_path, "submit", "cnn-digits", "--runtime", "x", "--dry-run")
    assert result.exit_code == 2 and "--runtime" in result.output
