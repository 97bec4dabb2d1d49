"""The watchdog (workloads/runtime/watchdog.py) over a real shaped link: collectives that queue
behind one another on a slow link, every one of them moving, are no stall however long the queue
takes; a peer that stops answering still ends its rank in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.backends.local.network import ShapedNetwork
from runner.job.link import parse_link
from tests.runner.network.shaped_ranks import run_ranks
from workloads.runtime.watchdog import GRACE_S

pytestmark = [pytest.mark.usefixtures("shaping"), pytest.mark.slow]
WORK = "tests.runner.network.rank_work:queued_all_reduces"
WATCHDOG_S = 1.0  # the ranks' dist_timeout_s; the watchdog ends a rank past it and GRACE_S
NUMEL = 16_000  # 64 KB of float32: about half a second each on 1mbit, far within the timeout
COUNT = 16  # issued at once, as DDP issues its buckets


def test_collectives_queued_on_a_slow_link_are_no_stall(tmp_path: Path) -> None:
    link = parse_link("1mbit")
    with ShapedNetwork.open(link, num_workers=2) as net:
        issued = run_ranks(net, WORK, tmp_path, count=COUNT, numel=NUMEL,
                           watchdog_s=WATCHDOG_S, stop_s=0)  # fmt: skip
        sent = net.traffic(0).sent_bytes
    assert issued == [COUNT, COUNT]
    # What crossed the link took it longer than the watchdog's limit (tbf lets no more
    # through): timed from their issue, the last ones were outstanding past it.
    assert sent * 8 / link.rate_bit_s > WATCHDOG_S + GRACE_S


def test_a_peer_that_stops_after_a_queue_still_ends_its_rank(tmp_path: Path) -> None:
    stop_s = 2 * (WATCHDOG_S + GRACE_S)  # rank 1 answers nothing for that long, then leaves
    with (
        ShapedNetwork.open(parse_link("1mbit"), num_workers=2) as net,
        pytest.raises(AssertionError) as failed,
    ):
        run_ranks(net, WORK, tmp_path, count=2, numel=NUMEL, watchdog_s=WATCHDOG_S,
                  stop_s=stop_s)  # fmt: skip
    said = str(failed.value)
    assert said.startswith("rank 0 exited with 1:"), said[-2000:]
    assert (
        "stackbench: rank 0: collective timed out after 1 s in an all-reduce, at the "
        "all-reduce after a peer stopped (a peer stopped, or it needs longer"
    ) in said, said[-2000:]
    assert "Traceback" not in said
