"""A run's curves from its streamed events (runner.results.runs.curves_of): one pass, each
curve thinned to MAX_CURVE_POINTS evenly by count, its first and last points kept."""

from __future__ import annotations

import itertools

from contract.events import RUN_START, TRAIN_LOSS
from runner.results import runs


def _events(num_losses: int, start_ms: float = 1000.0):
    yield {"key": TRAIN_LOSS, "time_ms": 0.0, "value": 9.0}  # before run_start: negative time
    yield {"key": RUN_START, "time_ms": start_ms}
    for i in range(num_losses):
        yield {"key": TRAIN_LOSS, "time_ms": start_ms + 10.0 * (i + 1), "value": float(i)}


def test_a_short_run_keeps_every_point_relative_to_run_start():
    curve = runs.curves_of(_events(3))[TRAIN_LOSS]
    assert curve == ((-1.0, 9.0), (0.01, 0.0), (0.02, 1.0), (0.03, 2.0))


def test_a_long_run_is_thinned_evenly_keeping_its_ends(monkeypatch):
    monkeypatch.setattr(runs, "MAX_CURVE_POINTS", 100)
    curve = runs.curves_of(_events(10_000))[TRAIN_LOSS]
    assert len(curve) <= 101
    assert curve[0] == (-1.0, 9.0) and curve[-1] == (100.0, 9999.0)
    gaps = {round(b[0] - a[0], 6) for a, b in itertools.pairwise(curve[1:-1])}
    assert len(gaps) == 1  # evenly spaced by count (and so by time, here)


def test_events_are_read_once_from_an_iterator():
    assert runs.curves_of(iter(list(_events(5))))[TRAIN_LOSS][-1] == (0.05, 4.0)


def test_a_log_without_run_start_has_no_curves():
    assert runs.curves_of([{"key": TRAIN_LOSS, "time_ms": 1.0, "value": 1.0}]) == {}
