"""SIGTERM and SIGHUP reaching `runner submit` on a cluster while its create hangs (a real socket
server on 127.0.0.1 that takes the request and never answers): the command exits 128 + N in one
line, the run is recorded FAILED "interrupted while submitting" (never left PENDING "submitting",
which `runner status` would later explain as a job deleted behind the runner's back), and the job
the create may have made is deleted. And a create whose answer never comes within its deadline:
recorded FAILED, the job withdrawn the same way."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading

import pytest
from click.testing import CliRunner

from contract.rundir import JobState, read_state
from runner.cli import main
from runner.results import rundir
from tests.runner.k8s_helpers import IMAGE
from tests.runner.k8s_socket import RawServer, Request, head

pytestmark = pytest.mark.timeout(60)


def hanging_create(created: threading.Event) -> RawServer:
    """POST: read, never answered. DELETE: 200, as the API server answers a delete."""

    def answer(request: Request, conn: socket.socket) -> None:
        if request.method == "POST":
            created.set()
            threading.Event().wait(30)  # held open, silent, until the client gives up
            return
        body = json.dumps({"kind": "Status", "status": "Success"}).encode()
        conn.sendall(head("200 OK", {"Content-Length": str(len(body))}) + body)

    return RawServer(answer)


def submit(tmp_path, server: RawServer, env: dict[str, str] | None = None):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(server.kubeconfig())
    results = tmp_path / "results"
    result = CliRunner(env={"COLUMNS": "200", **(env or {})}).invoke(
        main,
        ["--results-dir", str(results), "submit", "cnn-digits", "--kubeconfig", str(kubeconfig),
         "--image", IMAGE, "--workers", "1", "--detach"],
        catch_exceptions=False,
    )  # fmt: skip
    return result, results


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_a_hanging_create_is_recorded_and_the_job_withdrawn(tmp_path, signum):
    created = threading.Event()
    server = hanging_create(created)

    def signal_once_created() -> None:
        if created.wait(30):
            os.kill(os.getpid(), signum)

    threading.Thread(target=signal_once_created, daemon=True).start()
    try:
        result, _ = submit(tmp_path, server)
    finally:
        server.close()
    assert result.exit_code == 128 + signum, result.output
    assert "interrupted while submitting" in result.output and "recorded FAILED" in result.output
    (run_dir,) = rundir.list_dirs(tmp_path / "results")
    state = read_state(run_dir)
    assert state is not None and state.state is JobState.FAILED
    assert state.reason == "interrupted while submitting"
    # The controller's Deployment is read before the create (controller.py), then the create
    # that hangs, then the withdrawing delete.
    assert [r.method for r in server.requests] == ["GET", "POST", "DELETE"]
    assert "/deployments/" in server.requests[0].path
    assert server.requests[2].path.endswith(f"/trainjobs/{run_dir.name}")


def test_a_create_past_its_deadline_is_recorded_failed_and_withdrawn(tmp_path):
    server = hanging_create(threading.Event())
    try:
        result, results = submit(tmp_path, server, {"STACKBENCH_K8S_CALL_DEADLINE_S": "1"})
    finally:
        server.close()
    assert result.exit_code == 1
    assert f"{server.url} did not answer within the call's deadline of 1 s" in result.output
    (run_dir,) = rundir.list_dirs(results)
    state = read_state(run_dir)
    assert state is not None and state.state is JobState.FAILED
    assert state.reason.startswith("submit failed: cannot create TrainJob")
    assert [r.method for r in server.requests] == ["GET", "POST", "DELETE"]  # the controller
