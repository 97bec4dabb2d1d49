"""The launcher: a run's commands (pure), and starting a request's processes on its network
as the supervisor does, end to end with real ranks of workloads.train."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from contract.network import ENV
from runner.backends.base import LocalRequest, Process
from runner.backends.local.launch import check_placement, launch, worker_processes
from runner.errors import SpecError
from runner.job.spec import Placement, resolve, workload_args, workload_module

REPO = Path(__file__).resolve().parents[3]
ENTRY = ("-m", "workloads.train", "--config", "{}")


def test_each_shaped_rank_runs_alone_in_its_own_namespace_with_torchruns_variables() -> None:
    processes = worker_processes(3, ENTRY, {"OMP_NUM_THREADS": "1"}, "/runs/r", 29500,
                                 shaped=True, python="/py")  # fmt: skip
    assert [p.netns for p in processes] == [0, 1, 2]
    for rank, p in enumerate(processes):
        assert p.argv == ("/py", *ENTRY)
        assert p.env == {
            "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "veth0", "RANK": str(rank),
            "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "198.18.0.1", "MASTER_PORT": "29500",
        }  # fmt: skip
        assert p.cwd == "/runs/r"


def test_unshaped_ranks_share_the_loopback_and_rank_0s_store() -> None:
    processes = worker_processes(2, ENTRY, {}, "/runs/r", 41234, python="/py")
    assert [p.netns for p in processes] == [None, None]
    assert [(p.env["RANK"], p.env["LOCAL_RANK"]) for p in processes] == [("0", "0"), ("1", "1")]
    assert {(p.env["MASTER_ADDR"], p.env["MASTER_PORT"], p.env["LOCAL_WORLD_SIZE"])
            for p in processes} == {("127.0.0.1", "41234", "2")}  # fmt: skip
    assert all("GLOO_SOCKET_IFNAME" not in p.env for p in processes)


def test_a_link_is_refused_for_gpu_runs_it_would_not_shape() -> None:
    check_placement("cpu")
    with pytest.raises(SpecError, match="NCCL's peer-to-peer and shared-memory paths"):
        check_placement("cuda")


def test_without_a_link_processes_start_as_they_are_on_an_unshaped_record() -> None:
    process = Process(argv=("python", "-c", "pass"))
    with launch(LocalRequest(run_dir="/r", processes=(process,))) as started:
        assert started.argv(process) == ["python", "-c", "pass"]
        assert json.loads(started.env[ENV])["description"] == "loopback, unshaped"
        with pytest.raises(ValueError, match="names a namespace, but the request has no link"):
            started.argv(Process(argv=("python",), netns=0))


def test_a_link_without_processes_in_namespaces_is_a_malformed_request() -> None:
    request = LocalRequest("/r", (Process(argv=("python",)),), link="10mbit")
    with pytest.raises(ValueError, match="runs its processes in namespaces"), launch(request):
        pass


@pytest.mark.slow
@pytest.mark.usefixtures("shaping")
def test_a_two_worker_run_trains_over_its_shaped_links_and_records_them(tmp_path: Path) -> None:
    spec = resolve("cnn-digits", [], Placement(procs_per_node=2))
    logs = tmp_path / "logs"
    entry = ("-m", workload_module(spec), *workload_args(spec, str(tmp_path), str(logs)))
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    processes = worker_processes(2, entry, env, str(tmp_path), 29500, shaped=True)
    request = LocalRequest(str(tmp_path), processes, link="100mbit")
    with launch(request) as started:
        ranks = [
            subprocess.Popen(started.argv(p), env={**os.environ, **p.env, **started.env},
                             cwd=p.cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for p in request.processes
        ]  # fmt: skip
        outputs = [a.communicate(timeout=240)[0].decode(errors="replace") for a in ranks]
        assert started.network is not None
        traffic = [started.network.traffic(i) for i in range(2)]
    assert [a.returncode for a in ranks] == [0, 0], outputs[0][-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["target_reached"] is True
    network = json.loads((tmp_path / "manifest.json").read_text())["network"]
    assert network["link"] == "100mbit"
    assert 60 <= network["measured_mbit_s"] <= 110
    assert network["description"].startswith("100mbit per worker, each direction")
    # Training traffic crossed both links, beyond the probe's 0.65 s at 100mbit (~8 MB).
    assert all(link.sent_bytes > 8e6 and link.received_bytes > 8e6 for link in traffic)
