"""ShapedNetwork on real namespaces: what it builds, that it builds nothing in the host's
namespace, and that nothing it made outlives it, its owner's SIGKILL included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from runner.backends.local import namespaces, network, network_check, processes
from runner.backends.local.network import INTERFACE, ShapedNetwork
from runner.job.link import parse_link
from tests.runner.network import namespace_scan as scan

pytestmark = pytest.mark.usefixtures("shaping")
REPO = Path(__file__).resolve().parents[3]


def run_in(net: ShapedNetwork, index: int, argv: list[str], cwd: str = "/") -> str:
    return subprocess.run(
        net.command(index, argv, cwd), capture_output=True, text=True, check=True, timeout=30
    ).stdout


def test_each_worker_has_only_its_shaped_link_with_its_address() -> None:
    link = parse_link("50mbit")
    with ShapedNetwork.open(link, num_workers=3) as net:
        for i in range(3):
            addresses = json.loads(run_in(net, i, ["ip", "-j", "-4", "address"]))
            assigned = {(a["ifname"], info["local"]) for a in addresses for info in a["addr_info"]}
            assert assigned == {("lo", "127.0.0.1"), (INTERFACE, network.address(i))}
            routes = json.loads(run_in(net, i, ["ip", "-j", "route"]))
            assert [r["dst"] for r in routes] == ["198.18.0.0/24"]  # no way out of the run
            (qdisc,) = json.loads(run_in(net, i, ["tc", "-j", "qdisc", "show", "dev", INTERFACE]))
            assert qdisc["kind"] == "tbf"
            assert qdisc["options"]["rate"] == link.rate_bit_s // 8  # tc reports bytes/s


def test_the_bridge_side_of_every_link_is_shaped_too() -> None:
    link = parse_link("20mbit")
    with ShapedNetwork.open(link, num_workers=2) as net:
        bridge = net.holders[0]
        argv = namespaces.enter_net_argv(bridge, ["tc", "-j", "qdisc", "show"])
        shown = json.loads(subprocess.run(argv, capture_output=True, text=True).stdout)
        shaped = {q["dev"]: q["options"]["rate"] for q in shown if q["kind"] == "tbf"}
        assert shaped == {"w0": link.rate_bit_s // 8, "w1": link.rate_bit_s // 8}


def test_nothing_is_created_in_the_host_namespace() -> None:
    with ShapedNetwork.open(parse_link("10mbit"), num_workers=2) as net:
        net.probe()
        assert scan.host_network_mentions_ours() == []


def test_a_command_runs_in_its_worker_namespaces_and_directory(tmp_path: Path) -> None:
    with ShapedNetwork.open(parse_link("10mbit"), num_workers=2) as net:
        out = run_in(net, 1, ["sh", "-c", "echo $$; pwd; cat /proc/self/net/dev"], str(tmp_path))
    pid_inside, cwd, *net_dev = out.splitlines()
    assert int(pid_inside) <= 3  # the first processes of a PID namespace of its own
    assert cwd == str(tmp_path)
    interfaces = {line.split(":")[0].strip() for line in net_dev[2:]}
    assert interfaces == {"lo", INTERFACE}


def test_closing_kills_what_runs_inside_and_leaves_no_namespace() -> None:
    net = ShapedNetwork.open(parse_link("10mbit"), num_workers=2)
    inodes = {h.net_inode for h in net.holders}
    holders = [psutil.Process(h.pid) for h in net.holders]
    sleeper = subprocess.Popen(net.command(0, ["sleep", "600"], cwd="/"))
    assert scan.wait_until(lambda: len(psutil.Process(sleeper.pid).children()) == 1)
    inside = psutil.Process(sleeper.pid).children()
    net.close()
    sleeper.wait(timeout=10)
    assert scan.running([*holders, *inside]) == []
    assert scan.pids_in(inodes) == []
    assert scan.handles_on(inodes) == []
    net.close()  # idempotent


def test_killing_the_owner_leaves_no_namespace_process_or_link() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-m", "tests.runner.network.owner", "2", "100mbit"],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert owner.stdout is not None
        info = json.loads(owner.stdout.readline())
        inodes = set(info["inodes"])
        nsenters = [psutil.Process(pid) for pid in info["sleepers"]]
        assert scan.wait_until(lambda: all(len(p.children()) == 1 for p in nsenters))
        sleeps = [p.children()[0] for p in nsenters]
        holders = [psutil.Process(pid) for pid in info["holders"]]
        holders += [child for h in holders for child in h.children()]  # PID namespaces' first
        # nsenter is in the namespace too: it entered it before forking the sleeper.
        expected = {p.pid for p in [*holders, *nsenters, *sleeps]}
        assert set(scan.pids_in(inodes)) == expected
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    everything = [*holders, *nsenters, *sleeps]
    assert scan.wait_until(lambda: scan.running(everything) == [])
    # No process in the namespaces and no handle on them: the kernel has freed them, and with
    # them their veths, the bridge and every qdisc (none of which ever was in the host's).
    assert scan.wait_until(lambda: scan.pids_in(inodes) == [] and scan.handles_on(inodes) == [])
    assert scan.host_network_mentions_ours() == []


def test_the_end_of_a_run_leaves_the_holders_to_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The supervisor's own environment names the run, as at the end of every run: it ends
    # the run's processes, found by that environment, then closes the network. A holder that
    # passed for one of them was SIGTERMed, which a PID namespace's first process ignores
    # from outside, so the run's end waited out the grace period and SIGKILLed it.
    run_id = "run-1"
    for key, value in processes.run_env(run_id, tmp_path).items():
        monkeypatch.setenv(key, value)
    net = ShapedNetwork.open(parse_link("10mbit"), num_workers=2)
    try:
        rank = subprocess.Popen(net.command(1, ["sleep", "600"], cwd="/"))
        assert scan.wait_until(lambda: len(psutil.Process(rank.pid).children()) == 1)
        members = processes.members(run_id, tmp_path)
        assert rank.pid in {p.pid for p in members}
        assert {p.pid for p in members}.isdisjoint(h.pid for h in net.holders)
        processes.end(members, grace_s=5)
        assert scan.running(members) == []
    finally:
        net.close()
    # Each holder ended as close() ends it, on its lifeline's end, not by a signal.
    assert [h.process.returncode for h in net.holders] == [0, 0, 0]


def test_a_refused_step_fails_in_one_line_and_leaves_no_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tc as a kernel without tbf answers it (a fake at the process boundary, found on PATH).
    fake = tmp_path / "tc"
    fake.write_text("#!/bin/sh\necho 'Error: Specified qdisc kind is unknown.' >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    before = {p.pid for p in psutil.Process().children()}
    with pytest.raises(network_check.NetworkUnavailable) as caught:
        ShapedNetwork.open(parse_link("1gbit"), num_workers=2)
    assert str(caught.value) == (
        "cannot build the shaped network: tc failed: Error: Specified qdisc kind is unknown."
    )
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert scan.running(left) == []
