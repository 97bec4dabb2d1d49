"""A slower link costs communication, not compute: for DDP and flat all-reduce, the exposed
communication time and its share of the step rise as the link's rate falls, while compute
(forward, backward, optimizer) stays put. Real gloo ranks in shaped namespaces, real steps."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from runner.backends.local.network import ShapedNetwork
from runner.job.link import parse_link
from tests.runner.network.shaped_ranks import run_ranks

pytestmark = [pytest.mark.usefixtures("shaping"), pytest.mark.slow]
RATES = ("160mbit", "40mbit", "10mbit")  # falling; a step's all-reduce: 27, 110, 440 ms
STRATEGIES = ["ddp", "allreduce"]
NUM_STEPS = 4  # the first is warm-up (DDP builds its buckets) and is left out
COMPUTE = ("data", "forward", "backward", "optimizer")


def median_phases(steps: list[dict[str, float]]) -> dict[str, float]:
    kept = steps[1:]
    compute = statistics.median(sum(s[p] for p in COMPUTE) for s in kept)
    comm = statistics.median(s["communication"] for s in kept)
    share = statistics.median(s["communication"] / sum(s.values()) for s in kept)
    return {"compute": compute, "communication": comm, "share": share}


def test_communication_rises_as_the_rate_falls_while_compute_stays_put(tmp_path: Path) -> None:
    measured: dict[str, list[dict[str, float]]] = {name: [] for name in STRATEGIES}
    for rate in RATES:
        out = tmp_path / rate
        out.mkdir()
        with ShapedNetwork.open(parse_link(rate), num_workers=2) as net:
            ranks = run_ranks(net, "tests.runner.network.rank_work:strategy_phases", out,
                              strategies=STRATEGIES, num_steps=NUM_STEPS)  # fmt: skip
        for name in STRATEGIES:
            # The slowest rank's view, as the benchmarks report it.
            per_rank = [median_phases(r[name]) for r in ranks]
            measured[name].append(max(per_rank, key=lambda m: m["communication"]))
    for name, points in measured.items():
        comm = [p["communication"] for p in points]
        share = [p["share"] for p in points]
        compute = [p["compute"] for p in points]
        summary = f"{name}: comm {comm}, share {share}, compute {compute}"
        assert comm[0] < comm[1] < comm[2], summary
        assert share[0] < share[1] < share[2], summary
        # 16x less rate: at least 4x more communication (a 0.5 MB all-reduce is rate-bound).
        assert comm[2] > 4 * comm[0], summary
        # The link's cost lands in communication: compute moves by a small fraction of what
        # communication gains (milliseconds of scheduling noise on a loaded machine, against
        # hundreds of milliseconds of waiting for the link).
        for point in compute[1:]:
            assert abs(point - compute[0]) < 0.1 * (comm[2] - comm[0]), summary
