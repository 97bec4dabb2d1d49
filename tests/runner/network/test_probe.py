"""The probe measures the link it is given: close to the shaped rate, for the manifest."""

from __future__ import annotations

import subprocess

import pytest

from runner.backends.local.network import INTERFACE, ShapedNetwork
from runner.backends.local.probe import ProbeError
from runner.job.link import parse_link

pytestmark = pytest.mark.usefixtures("shaping")


# 100kbit: a window holds about four packets, so a packet counted that arrived before the
# window opened shows as a payload rate above the link's own.
@pytest.mark.parametrize("link", ["100kbit", "2mbit", "40mbit", "400mbit"])
def test_the_probe_measures_close_to_the_shaped_rate(link: str) -> None:
    with ShapedNetwork.open(parse_link(link), num_workers=2) as net:
        record = net.probe()
    asked = parse_link(link).rate_mbit_s
    assert record.link == link
    assert record.asked_mbit_s == asked
    assert record.measured_mbit_s is not None
    # Payload is about 95 % of the rate (headers); the band allows a loaded machine.
    assert 0.6 * asked <= record.measured_mbit_s <= 1.1 * asked
    assert record.rtt_ms is not None and record.rtt_ms > 0
    assert record.latency == "not emulated"
    assert "worker 0 -> worker 1" in (record.method or "")


def test_a_link_faster_than_the_machine_carries_is_recorded_as_limited() -> None:
    # One core moves a few Gbit/s through a veth pair, far below the highest rate allowed.
    with ShapedNetwork.open(parse_link("100gbit"), num_workers=2) as net:
        record = net.probe()
    assert record.link == "100gbit" and record.measured_mbit_s is not None
    assert record.measured_mbit_s < 0.8 * 100_000
    assert record.description.endswith(
        "under 80% of the rate: something other than the shaper (this machine) limited the link"
    )


def test_a_slower_link_measures_slower() -> None:
    measured = []
    for link in ("5mbit", "50mbit"):
        with ShapedNetwork.open(parse_link(link), num_workers=2) as net:
            measured.append(net.probe().measured_mbit_s)
    assert measured[0] * 5 < measured[1]


def test_the_links_are_idle_again_when_the_probe_returns() -> None:
    # What the probe's stream left in the shapers' queues crosses the link after its sockets
    # are closed (at 1mbit about a second of it): the workers, started next, must not meet it.
    with ShapedNetwork.open(parse_link("1mbit"), num_workers=3) as net:
        net.probe()
        assert [net.traffic(i).queued_bytes for i in range(3)] == [0, 0, 0]


def test_one_worker_has_no_link_to_measure() -> None:
    with ShapedNetwork.open(parse_link("10mbit"), num_workers=1) as net:
        record = net.probe()
    assert record.measured_mbit_s is None and record.rtt_ms is None
    assert record.method == "not measured: one worker, no link is crossed"


def test_a_link_that_is_down_fails_the_probe_instead_of_recording_a_number() -> None:
    with ShapedNetwork.open(parse_link("10mbit"), num_workers=2) as net:
        down = ["ip", "link", "set", "dev", INTERFACE, "down"]
        subprocess.run(net.command(0, down, "/"), check=True)  # the sender's own link
        with pytest.raises(ProbeError, match=r"cannot measure the link to 198\.18\.0\.2"):
            net.probe()
