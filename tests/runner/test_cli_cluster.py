"""The CLI's cluster path: option rules, --dry-run YAML from stack outputs (fake `pulumi`),
and a detached submit to a kmock API server followed by status and cancel, which reconnect
from the cluster recorded in job.json."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

import pytest
import yaml
from click.testing import CliRunner

from runner.cli import main
from runner.results import rundir
from tests.runner.k8s_fake import FakeCluster
from tests.runner.k8s_helpers import IMAGE, pod
from tests.runner.test_cluster import OUTPUTS, fake_pulumi  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(60)


def invoke(results, *args):
    return CliRunner(env={"COLUMNS": "200"}).invoke(
        main, ["--results-dir", str(results), *args], catch_exceptions=False
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--local", "--stack", "kind"], "--local runs here"),
        (["--image", IMAGE], "--image: applies to cluster runs"),
        (["--pending-timeout", "60"], "--pending-timeout: applies to cluster runs"),
        (["--per-node", "2"], "--per-node: applies to cluster runs"),
    ],
)
def test_cluster_options_without_a_cluster_are_usage_errors(tmp_path, args, message):
    result = invoke(tmp_path, "submit", "cnn-digits", *args)
    assert result.exit_code == 2
    assert message in result.output.replace("Invalid value for ", "")


def test_dry_run_on_a_stack_prints_the_trainjob_and_creates_nothing(tmp_path, fake_pulumi):  # noqa: F811
    args_file = fake_pulumi(OUTPUTS)
    result = invoke(
        tmp_path / "results", "submit", "cnn-digits", "--stack", "gke-gpu-8",
        "--workers", "8", "--per-node", "4", "--device", "cuda", "--dry-run",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest = yaml.safe_load(result.stdout)
    assert manifest["kind"] == "TrainJob"
    assert manifest["spec"]["trainer"]["numNodes"] == 2
    assert "--stack gke-gpu-8" in args_file.read_text()
    assert not (tmp_path / "results").exists()


def test_dry_run_refuses_more_nodes_than_the_stack_has(tmp_path, fake_pulumi):  # noqa: F811
    fake_pulumi(OUTPUTS)  # num_nodes: 2
    result = invoke(tmp_path, "submit", "cnn-digits", "--stack", "gke-gpu-8", "--workers", "3",
                    "--device", "cuda", "--dry-run")  # fmt: skip
    assert result.exit_code == 2
    assert "--workers" in result.output and "has 2 nodes, 3 asked" in result.output


def test_detached_submit_then_status_and_cancel_reconnect_from_job_json(tmp_path):
    cluster = FakeCluster(namespace="bench")
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(cluster.kubeconfig())
        results = tmp_path / "results"
        submitted = invoke(results, "submit", "cnn-digits", "--kubeconfig", str(kubeconfig),
                           "--image", IMAGE, "--workers", "1", "--detach")  # fmt: skip
        assert submitted.exit_code == 0, submitted.output
        (run_dir,) = rundir.list_dirs(results)
        record = json.loads((run_dir / rundir.JOB).read_text())
        assert record["handle"] == f"k8s://bench/{run_dir.name}"
        assert record["cluster"]["kubeconfig"] == str(kubeconfig)
        assert "token" not in json.dumps(record)  # no credentials in the run directory
        assert cluster.job("trainjob", run_dir.name) is not None

        assert "PENDING" in invoke(results, "status", run_dir.name).output
        cancelled = invoke(results, "cancel", run_dir.name, "--yes")
        assert "CANCELLED" in cancelled.output
        assert cluster.job("trainjob", run_dir.name) is None
        assert "CANCELLED" in invoke(results, "runs").output
    finally:
        cluster.close()


def test_pending_timeout_goes_from_the_cli_to_the_backend_and_cancels_with_the_reason(tmp_path):
    """--pending-timeout reaches the backend (and job.json, so that a later `runner status`
    applies it too): a job pending longer is deleted, and the run says why."""
    cluster = FakeCluster(namespace="bench")
    cluster.emulator.now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")  # created now
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(cluster.kubeconfig())
        results = tmp_path / "results"
        submitted = invoke(results, "submit", "cnn-digits", "--kubeconfig", str(kubeconfig),
                           "--image", IMAGE, "--workers", "1", "--pending-timeout", "1",
                           "--detach")  # fmt: skip
        assert submitted.exit_code == 0, submitted.output
        (run_dir,) = rundir.list_dirs(results)
        assert json.loads((run_dir / rundir.JOB).read_text())["cluster"]["pending_timeout_s"] == 1
        time.sleep(2.1)  # longer than the timeout, counted from the job's creation (whole seconds)
        status = invoke(results, "status", run_dir.name)
        assert "CANCELLED" in status.output and "--pending-timeout 1 s" in status.output
        assert cluster.job("trainjob", run_dir.name) is None
    finally:
        cluster.close()


def test_a_followed_submit_says_what_the_fetch_recorded_not_the_jobs_word(tmp_path):
    """The job reports success but rank 0 wrote no summary: fetch records FAILED, and
    `runner submit` (which followed the job to its success) must end saying so, exit 1."""
    cluster = FakeCluster(namespace="bench")
    results = tmp_path / "results"

    def controller() -> None:  # the operator's part: the job's one pod ends, and the job
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            dirs = rundir.list_dirs(results) if results.exists() else []
            if dirs and cluster.job("trainjob", dirs[0].name) is not None:
                name = dirs[0].name
                cluster.add_pod(pod("trainjob", name, 0, "Succeeded"), log="[rank0]:done\n")
                cluster.set_job_condition("trainjob", name, "Complete")
                return
            time.sleep(0.05)

    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(cluster.kubeconfig())
        threading.Thread(target=controller, daemon=True).start()
        result = invoke(results, "submit", "cnn-digits", "--kubeconfig", str(kubeconfig),
                        "--image", IMAGE, "--workers", "1")  # fmt: skip
        assert result.exit_code == 1, result.output
        assert "FAILED (every process exited 0, but rank 0 wrote no usable summary.json)" in (
            result.output
        )
        assert "SUCCEEDED" not in result.output
    finally:
        cluster.close()


def test_a_record_whose_handle_names_another_runs_job_never_reaches_that_job(tmp_path):
    """job.json is a file anyone may edit: a handle naming run B's job in run A's record is
    damage, so `runner cancel A` deletes nothing and B runs on."""
    cluster = FakeCluster(namespace="bench")
    try:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(cluster.kubeconfig())
        results = tmp_path / "results"
        for _ in range(2):
            submitted = invoke(results, "submit", "cnn-digits", "--kubeconfig", str(kubeconfig),
                               "--image", IMAGE, "--workers", "1", "--detach")  # fmt: skip
            assert submitted.exit_code == 0, submitted.output
        b, a = rundir.list_dirs(results)  # newest first
        record = json.loads((a / rundir.JOB).read_text())
        record["handle"] = f"k8s://bench/{b.name}"
        (a / rundir.JOB).write_text(json.dumps(record))
        cancelled = invoke(results, "cancel", a.name, "--yes")
        assert cancelled.exit_code == 1
        assert f"has the handle 'k8s://bench/{b.name}', not this run's" in cancelled.output
        assert cluster.job("trainjob", a.name) is not None
        assert cluster.job("trainjob", b.name) is not None
        assert "CANCELLED" not in invoke(results, "status", b.name).output
    finally:
        cluster.close()
