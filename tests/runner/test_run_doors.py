"""What a local run opens to others: every socket its processes listen on is on loopback (the
rendezvous store of a fixed group, the elastic supervisor's store, gloo's), seen in the
kernel's own table while a real run goes on; and a process outside an elastic run that
writes a forged membership record into its store changes nothing."""

from __future__ import annotations

import datetime
import ipaddress
import json
import time
from pathlib import Path

import psutil
import pytest
from torch.distributed import PrefixStore, TCPStore

from contract.rundir import STATE, rank_log
from runner import api
from runner.backends.local.backend import LocalBackend
from runner.backends.local.launch import LAUNCH_FILE, digest, read_request
from runner.job.spec import Placement, resolve
from tests.conftest import submit_local

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
        time.sleep(0.05)
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
