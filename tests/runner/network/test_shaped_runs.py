"""Shaped runs through the runner: `Placement.link` (what `--link` sets) gives every worker its
own namespace and link, the manifest records the link as measured, and a SIGKILLed supervisor
takes the workers and their network with it."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contract import files
from contract.rundir import JobState, JobStatus
from runner import api
from runner.backends.local import processes
from runner.backends.local.backend import SUPERVISOR_FILE, LocalBackend
from runner.job.spec import Placement, resolve
from tests.runner.network.namespace_scan import (
    handles_on,
    host_network_mentions_ours,
    pids_in,
    wait_until,
)
from tests.runner.training import wait_for_training

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shaping")]


# 10 ms: the probe's bar (10 %, at least 0.5 ms) on a 2 ms delay is less than a busy CPU's
# timer lateness (+0.57 ms refused a CI run's probe).
DELAYED = "50mbit,delay=10ms,loss=0.1%"


def submit(results: Path, overrides: list[str], link: str = "50mbit") -> api.Run:
    spec = resolve("cnn-digits", overrides, Placement(1, 2, "cpu", link=link))
    return api.submit(spec, LocalBackend(results), results)


def test_a_run_with_a_link_trains_over_it_and_its_manifest_says_so(tmp_path: Path) -> None:
    # An epoch: every step's gradients cross the link (the default ran on to its target, the
    # same steps again for seconds more, which nothing here reads).
    run = submit(tmp_path, ["max_epochs=1", "stop_at_target=false"])
    status = api.wait(tmp_path, run)
    assert status.state is JobState.SUCCEEDED, status.reason
    network = files.read_json(run.run_dir / "manifest.json")["network"]
    assert network["link"] == "50mbit" and 30 <= network["measured_mbit_s"] <= 55
    request = files.read_json(run.run_dir / "launch.json")
    assert [p["netns"] for p in request["processes"]] == [0, 1]  # a namespace per worker
    assert files.read_json(run.run_dir / "job.json")["placement"]["link"] == "50mbit"


def test_a_run_with_a_delay_and_loss_records_them_asked_and_measured_and_its_drops(
    tmp_path: Path, delaying: None
) -> None:
    run = submit(tmp_path, ["max_epochs=1", "stop_at_target=false"], link=DELAYED)
    status = api.wait(tmp_path, run)
    assert status.state is JobState.SUCCEEDED, status.reason
    network = files.read_json(run.run_dir / "manifest.json")["network"]
    assert network["link"] == DELAYED and network["asked_rtt_ms"] == 20.0
    assert network["asked_loss_percent"] == 0.1 and network["latency"] == "10 ms one way"
    assert 18 <= network["rtt_ms"] - network["base_rtt_ms"] <= 22  # the probe's bar passed
    tally = files.read_json(run.run_dir / "network.json")  # written when the network closed
    assert tally["link"] == DELAYED and len(tally["links"]) == 2
    for link in tally["links"]:
        line = link["delay_line"] if tally["impairment"] == "delay line" else None
        assert line is None or (line["released"] > 0 and line["dropped_full"] == 0)


def test_a_sigkilled_supervisor_takes_the_workers_and_their_network_with_it(
    tmp_path: Path, delaying: None
) -> None:
    # With a delay line: its readers are the supervisor's threads, its rules in the namespaces.
    run = submit(tmp_path, ["stop_at_target=false", "max_epochs=400"], link=DELAYED)
    try:
        wait_for_training(run)
        # The ranks themselves, not the namespace commands that start them (same environment).
        members = processes.members(run.run_id, run.run_dir)
        workers = [p for p in members if p.cmdline()[1:3] == ["-m", "workloads.train"]]
        assert len(workers) == 2
        namespaces = {os.stat(f"/proc/{p.pid}/ns/net").st_ino for p in workers}
        assert len(namespaces) == 2 and os.stat("/proc/self/ns/net").st_ino not in namespaces
    except BaseException:
        api.cancel(tmp_path, run)  # a failed check must not leave a 400-epoch run behind
        raise
    os.kill(files.read_json(run.run_dir / SUPERVISOR_FILE)["pid"], signal.SIGKILL)
    assert wait_until(lambda: not processes.members(run.run_id, run.run_dir), 30)
    assert wait_until(lambda: not pids_in(namespaces) and not handles_on(namespaces), 30)
    assert host_network_mentions_ours() == []  # no rule, queue or qdisc of ours in the host's
    status = api.status(tmp_path, run)
    assert status.state is JobState.FAILED and "supervisor died" in status.reason


def _kill_while_training(tmp_path: Path, victim: Callable[[Any], Any]) -> tuple[Any, JobStatus]:
    """A shaped 2-worker run, training: `victim(its supervisor's psutil.Process)` names the
    process to SIGKILL; (that process, how the run ended). A short collective timeout:
    without the supervisor's checks, the run fails after it with gloo's line."""
    import psutil

    run = submit(tmp_path, ["stop_at_target=false", "max_epochs=400", "dist_timeout_s=60"])
    try:
        wait_for_training(run)
        killed = victim(psutil.Process(files.read_json(run.run_dir / SUPERVISOR_FILE)["pid"]))
        killed.kill()
        status = api.wait(tmp_path, run)
    except BaseException:
        api.cancel(tmp_path, run)
        raise
    assert wait_until(lambda: not processes.members(run.run_id, run.run_dir), 30)
    return killed, status


def test_a_killed_namespace_holder_fails_the_run_naming_it(tmp_path: Path) -> None:
    """Someone kills the bridge's holder: its namespace, and every link, goes with it. The
    ranks would wait on each other until gloo's timeout (minutes) and then fail with a line
    that names no cause; the run fails at once, saying what broke."""

    def bridge(supervisor: Any) -> Any:
        # The bridge's holder is unshare become `cat` (a worker's forks its namespace's first
        # process, and stays unshare): the supervisor's one child of that name.
        (cat,) = [p for p in supervisor.children() if p.cmdline() == ["cat"]]
        return cat

    killed, status = _kill_while_training(tmp_path, bridge)
    assert status.state is JobState.FAILED
    assert status.reason.startswith(
        f"the shaped network broke: the bridge's namespace holder (pid {killed.pid}) exited"
    ), status.reason


def test_a_workers_namespace_killed_under_its_rank_fails_the_run_naming_the_network(
    tmp_path: Path,
) -> None:
    """Killing the first process of a worker's PID namespace takes its rank down with it, a
    moment before the namespace's holder: the run said `rank 1 exited with code -9`, a crash
    of the rank's own, where the network under it broke."""
    holders = []

    def namespace_init(supervisor: Any) -> Any:
        # A worker's holder stays unshare; its child `cat` is its PID namespace's init.
        unshares = [p for p in supervisor.children() if p.cmdline()[:1] == ["unshare"]]
        holders.append(max(unshares, key=lambda p: p.pid))
        (init,) = holders[0].children()
        return init

    _, status = _kill_while_training(tmp_path, namespace_init)
    assert status.state is JobState.FAILED
    assert status.reason.startswith("the shaped network broke: worker "), status.reason
    assert f"namespace holder (pid {holders[0].pid})" in status.reason, status.reason
