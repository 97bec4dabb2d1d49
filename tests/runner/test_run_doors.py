"""What a local run opens to others: every socket its processes listen on is on loopback (the
rendezvous store of a fixed group, the elastic supervisor's store, gloo's), seen in the
kernel's own table while a real run goes on; and a process outside an elastic run that
writes a forged membership record into its store changes nothing."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import time
from pathlib import Path

import psutil
import pytest
from torch.distributed import PrefixStore, TCPStore

from contract.rundir import SUMMARY, rank_log
from runner import api
from runner.backends.local.backend import LocalBackend
from runner.backends.local.launch import LAUNCH_FILE, digest, read_request
from runner.job.spec import Placement, resolve
from tests.conftest import submit_local
from tests.runner.members import worker_process
from workloads.adaptive.elastic.signing import SECRET_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _listening_until_done(results: Path, run: api.Run) -> set[tuple[str, int]]:
    """Every (address, port) a process this test started (the supervisor, the workers)
    listened on while the run went on, polled until it ended."""
    seen: set[tuple[str, int]] = set()
    while api.status(results, run).state.value in {"PENDING", "RUNNING"}:
        ours = {p.pid for p in psutil.Process().children(recursive=True)}
        for conn in psutil.net_connections(kind="inet"):
            if conn.pid in ours and conn.status == psutil.CONN_LISTEN:
                seen.add((conn.laddr.ip, conn.laddr.port))
        time.sleep(0.2)  # the store listens for the whole run: seen at any poll
    return seen


def _request(run: api.Run):
    return read_request(run.run_dir, digest((run.run_dir / LAUNCH_FILE).read_bytes()))


def _wildcards(seen: set[tuple[str, int]]) -> list[tuple[str, int]]:
    return [(ip, port) for ip, port in seen if not ipaddress.ip_address(ip).is_loopback]


def test_a_two_worker_run_listens_on_loopback_only(tmp_path):
    run = submit_local(tmp_path, [])
    seen = _listening_until_done(tmp_path, run)
    assert api.wait(tmp_path, run).state.value == "SUCCEEDED"
    port = int(_request(run).processes[0].env["MASTER_PORT"])
    assert ("127.0.0.1", port) in seen  # rank 0's store was seen: the check can fail
    assert _wildcards(seen) == []


def _foreign_client(port: int) -> PrefixStore:
    """A client of the run's store from outside the run: no secret, a port it learned."""
    client = TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=30))
    return PrefixStore("elastic/", client)  # workloads/adaptive/elastic/launch.py's prefix


def _secret_of(run: api.Run) -> str:
    """The run's secret, as worker w0's own environment holds it (once it has started)."""
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(AssertionError, psutil.Error):
            return worker_process(run, "w0").environ()[SECRET_ENV]
        assert time.monotonic() < deadline, "worker w0 did not start"
        time.sleep(0.05)


def test_a_forged_generation_in_an_elastic_runs_store_changes_no_membership(tmp_path):
    spec = resolve("cnn-digits", ["strategy=allreduce", "max_epochs=1"],
                   Placement(procs_per_node=2, min_workers=1))  # fmt: skip
    run = api.submit(spec, LocalBackend(tmp_path), tmp_path)
    port = _request(run).store_port
    assert port is not None
    # Before the workers (still importing torch) decide: generation 0 with an intruder
    # in w1's place; written first, it is what compare_set hands every proposer back.
    forged = json.dumps({"number": 0, "members": ["w0", "intruder"], "source": 0,
                         "admitted": 2, "step": 0, "reason": "start", "departed": [],
                         "joined": ["w0", "intruder"]})  # fmt: skip
    assert _foreign_client(port).compare_set("gen/0", "", forged) == forged.encode()
    secret = _secret_of(run)
    seen = _listening_until_done(tmp_path, run)
    status = api.wait(tmp_path, run)
    assert status.state.value == "SUCCEEDED", status
    assert json.loads((run.run_dir / SUMMARY).read_text())["world_size"] == 2
    logs = [rank_log(run.run_dir, rank).read_text() for rank in (0, 1)]
    # Said by whichever worker proposed while the forged record stood.
    assert any("elastic: ignored record 'gen/0'" in log for log in logs)
    assert "elastic: w1 ended at step" in logs[1]  # a member to the end
    # The secret reached the workers through their environment, never a file of the run.
    files = [f for f in run.run_dir.rglob("*") if f.is_file()]
    assert len(secret) == 64 and files
    assert not [f for f in files if secret.encode() in f.read_bytes()]
    assert ("127.0.0.1", port) in seen and _wildcards(seen) == []
