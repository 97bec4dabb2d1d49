"""gloo ranks in shaped namespaces: their collectives are right and cross the shaped link."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runner.backends.local.network import INTERFACE, ShapedNetwork
from runner.job.link import parse_link
from tests.runner.network.shaped_ranks import run_ranks

pytestmark = [pytest.mark.usefixtures("shaping"), pytest.mark.slow]
NUMEL = 250_000  # 1 MB of float32


def test_two_ranks_all_reduce_correctly_over_their_shaped_links(tmp_path: Path) -> None:
    with ShapedNetwork.open(parse_link("200mbit"), num_workers=2) as net:
        results = run_ranks(net, "tests.runner.network.rank_work:all_reduce_sum", tmp_path,
                            numel=NUMEL)  # fmt: skip
        traffic = [net.traffic(i) for i in range(2)]
    expected = torch.arange(NUMEL, dtype=torch.float32) * 3  # ranks contribute x1 and x2
    for result in results:
        assert torch.equal(result["sum"], expected)
        assert result["ifname"] == INTERFACE
    # Ring all-reduce of 2 ranks: each sends half the tensor to reduce and half to gather, so
    # the whole tensor crossed each worker's shaped link each way (gloo did not use loopback).
    for link in traffic:
        assert link.sent_bytes > NUMEL * 4
        assert link.received_bytes > NUMEL * 4
