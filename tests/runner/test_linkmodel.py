"""The alpha-beta model of a collective on shaped links (runner/results/linkmodel.py): the fit
recovers a model the points were made from, tells the two collectives apart, and `runner
report` draws it for allreduce-micro runs over several links (and for nothing else)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pytest

from contract.summary import Measurement, MicroSummary
from runner.results import linkmodel
from runner.results.linkmodel import Fit, Point

TRUE = Fit("allreduce", alpha0_s=2e-4, alpha_per_delay=1.0, per_byte_s=2e-9, bits_per_byte=8.4)
LINKS = [(d, r) for d in (0.0, 0.001, 0.005, 0.02) for r in (25e6, 100e6, 1e9)]


def grid(strategy: str, model: Fit) -> list[Point]:
    made = []
    for delay_s, rate in LINKS:
        for workers in (2, 4):
            for size in (4e3, 4e5, 4e6):
                p = Point(strategy, workers, delay_s, rate, size, 1.0)
                made.append(Point(strategy, workers, delay_s, rate, size, model.predict_s(p)))
    return made


def test_the_fit_recovers_the_model_and_predicts_held_out_links() -> None:
    train, held = linkmodel.split(grid("allreduce", TRUE), {0.001}, {100e6})
    model = linkmodel.fit("allreduce", train)
    assert model.alpha0_s == pytest.approx(2e-4, rel=1e-6)
    assert model.alpha_per_delay == pytest.approx(1.0, rel=1e-6)
    assert model.bits_per_byte == pytest.approx(8.4, rel=1e-6)
    assert max(linkmodel.relative_errors(model, held)) < 1e-6


def test_ring_and_gather_scatter_scale_differently_with_workers() -> None:
    assert linkmodel.ring(4) == (6.0, 1.5)  # 2(N-1) steps, 2(N-1)/N of the bytes
    assert linkmodel.gather_scatter(4) == (2.0, 6.0)  # two steps, rank 0 carries 2(N-1)
    gs = grid("gather-scatter", TRUE)
    own = linkmodel.fit("gather-scatter", gs)
    assert max(linkmodel.relative_errors(own, gs)) < 1e-6
    # The same times read as a ring's cannot be fitted: the model is the collective's own.
    as_ring = [dataclasses.replace(p, strategy="allreduce") for p in gs]
    ring = linkmodel.fit("allreduce", as_ring)
    assert max(linkmodel.relative_errors(ring, as_ring)) > 0.2


@dataclass(frozen=True)
class Run:
    """The fields of a RunResult the figure reads."""

    link: str | None
    world_size: int
    summary: object


def micro_run(link: str | None, workers: int) -> Run:
    delay_s = 0.0 if link is None or "delay" not in link else 0.005
    rate = 1e9 if link is None or link.startswith("1gbit") else 25e6
    results = []
    for size in (4_000, 400_000, 4_000_000):
        time_s = TRUE.predict_s(Point("allreduce", workers, delay_s, rate, size, 1.0))
        results.append(Measurement(size // 4, "float32", size, 5, time_s * 1e6, 0.0, 0.0))
    summary = MicroSummary(
        run_id="r", benchmark="allreduce-micro", division="closed", status="success",
        world_size=workers, device="cpu", backend="gloo", run_time_s=1.0,
        results=tuple(results), stopped_by_time_budget=False,
    )  # fmt: skip
    return Run(link, workers, summary)


def test_report_draws_the_fit_for_micro_runs_over_several_links(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="runner report's figures need the report extra")
    runs = [micro_run(link, w) for link in ("25mbit", "1gbit,delay=5ms") for w in (2, 4)]
    paths = linkmodel.fit_figure(runs, "study", tmp_path / "link_model")
    assert sorted(p.name for p in paths) == ["link_model.png", "link_model.svg"]
    assert "alpha = 0.2 ms + 1.00 d" in (tmp_path / "link_model.svg").read_text()


def test_report_draws_no_fit_for_one_link_or_unshaped_runs(tmp_path: Path) -> None:
    one_link = [micro_run("25mbit", w) for w in (2, 4)]
    unshaped = [micro_run(None, w) for w in (2, 4)]
    assert linkmodel.fit_figure(one_link, "study", tmp_path / "a") == []
    assert linkmodel.fit_figure(unshaped, "study", tmp_path / "b") == []
