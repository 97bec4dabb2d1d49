"""Fixtures of the shaped-network tests: they build real namespaces, veth pairs, bridges and
qdiscs, so they need CAP_NET_ADMIN and CAP_SYS_ADMIN, iproute2 and util-linux; where any of
that is missing they skip, saying which (network_check.problem())."""

from __future__ import annotations

import pytest

from runner.backends.local import network_check


@pytest.fixture(scope="session")
def shaping() -> None:
    reason = network_check.problem()
    if reason is not None:
        pytest.skip(f"shaped networks cannot be built here: {reason}")


@pytest.fixture(scope="session")
def delaying(shaping: None) -> None:
    """A delay line (or netem) can be built here: iptables and its NFQUEUE target."""
    from runner.job.link import parse_link

    reason = network_check.problem(parse_link("100mbit,delay=1ms,jitter=1ms"))
    if reason is not None:
        pytest.skip(f"a delay line cannot be built here: {reason}")
